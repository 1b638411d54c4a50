"""The ``onceflow`` data source: what ``spark.dataSource.register`` takes, joining the source's
adapter (``source.py``) and the sink's (``writer.py``).  Options are parsed and checked here,
when a query or job is defined, before any data moves.  An error leaving a method Spark calls
carries its own line first (``_errors``), for Spark to show it before the traceback."""

from __future__ import annotations

from . import _extra  # noqa: F401  (first: one line naming the spark extra when it is missing)

# isort: split
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from . import FORMAT, sink
from ._errors import surfaced
from .kafka import spark_schema
from .options import OptionError, check_sink_columns, parse_sink_options, parse_source_options
from .source import OnceflowBatchReader, OnceflowStreamReader
from .writer import OnceflowBatchWriter, OnceflowStreamWriter


class OnceflowDataSource(DataSource):
    """``spark.readStream.format("onceflow")``, ``spark.read``, ``writeStream`` and ``write``.

    Options and columns are Spark's Kafka connector's; see the README.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @surfaced
    def schema(self) -> str:
        # load() asks for the schema first: bad options fail here, before any query starts.
        # (Streaming-only rules are checked again when the stream reader is made.)
        return spark_schema(parse_source_options(self.options, streaming=False).include_headers)

    @surfaced
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OnceflowStreamReader(parse_source_options(self.options, streaming=True))

    @surfaced
    def reader(self, schema: StructType) -> DataSourceReader:
        return OnceflowBatchReader(parse_source_options(self.options, streaming=False))

    @surfaced
    def streamWriter(self, schema: StructType, overwrite: bool) -> OnceflowStreamWriter:
        options = parse_sink_options(self.options, streaming=True)
        check_sink_columns(schema.fieldNames(), options.topic)
        sink.check_client_settings(options)
        return OnceflowStreamWriter(options)

    @surfaced
    def writer(self, schema: StructType, overwrite: bool) -> OnceflowBatchWriter:
        if overwrite:  # Kafka topics are appended to; Spark's Kafka sink refuses Overwrite in the same words
            raise OptionError("Save mode Overwrite not allowed for onceflow. Allowed save mode is Append "
                              '(.mode("append"); Spark itself refuses ErrorIfExists and Ignore for a Python data source).')
        options = parse_sink_options(self.options, streaming=False)
        check_sink_columns(schema.fieldNames(), options.topic)
        # A batch job needs the cluster now; write_exactly_once's writes (named) run inside micro-batches.
        sink.check_client_settings(options, require_cluster=options.name is None)
        return OnceflowBatchWriter(options)

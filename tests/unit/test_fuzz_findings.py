"""Regression tests for what the fuzzers found (docs/reliability.md, "Bad input at scale"), each
with the input that showed it."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.broker.handlers.metadata import handle_metadata
from onceflow.config import AUTO_CREATE_TOPICS_ENABLE, BrokerConfig, TopicConfig
from onceflow.log.partition_log import PartitionLog
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.framing import encode_response, parse_request
from onceflow.records.batch import BatchHeader, Invalid, validate_produced
from onceflow.records.builder import build_batch
from onceflow.records.records import CorruptRecords, decompress
from tests.fuzz.corpus import compressed, with_crc
from tests.support.wire import encode_request

NOW = 1_700_000_000_000

#: tests/fuzz/atheris/batches found it in 317 inputs (flag byte 0x01: the harness computes the CRC).
#: A 5-record batch whose fourth record's length does not match its fields, with a valid CRC.
UNDECODABLE_RECORDS = with_crc(base64.b64decode(
    "AAAAAAAAAAAAAADWAAAAAAJMfp2oAAAAAAAEAAABi88AAQBoAIvlz+VoBP//////////////////AAAABUAAAAAKa2V5LTAqdmFsdWUtMHZhbHVlLT"
    "B2YWx1ZS0wAEAAAgIKa2V5LTEqdmFsdWUtMXZhbHVlLTF2YWx1ZS0xAEAABAQKa2V5LTIqdmFsdWUtMnZhbHVlLTJ2YWx1ZS0yAEAABgYKa2V5AEAABgYK"
    "a2V5LTMqdmFsdWUtM3ZhbHVlLTN2CAgKa2V5LTQqdmFsdWUtNHZhbHVlLTR2YWx1ZS00AA=="))


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_of_many_small_records_is_accepted(codec: int) -> None:
    """validate_produced refused any batch with fewer than 7 bytes per record, compressed or not:
    librdkafka's zstd batches of 3,000 one-byte messages all failed with CORRUPT_MESSAGE."""
    batch = compressed(build_batch([(None, b"x")] * 1000, NOW), codec)
    assert len(batch) < 7 * 1000
    assert isinstance(validate_produced(batch, 1 << 20), BatchHeader)


def test_an_uncompressed_batch_claiming_more_records_than_fit_is_still_refused() -> None:
    batch = bytearray(build_batch([(None, b"x")] * 3, NOW))
    batch[23:27] = (99).to_bytes(4, "big")  # lastOffsetDelta
    batch[57:61] = (100).to_bytes(4, "big")  # recordCount
    verdict = validate_produced(with_crc(batch), 1 << 20)
    assert isinstance(verdict, Invalid) and verdict.error == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_records_a_codec_refuses_raise_corrupt_records(codec: int) -> None:
    with pytest.raises(CorruptRecords):
        decompress(codec, b"\x1f\x8b\x08 not compressed at all")


def _garbage_compressed() -> bytes:
    batch = bytearray(compressed(build_batch([(b"k", b"v")] * 3, NOW), 1))
    batch[70:80] = b"\xaa" * 10  # inside the gzip stream
    return with_crc(batch)


@pytest.mark.parametrize("batch", [UNDECODABLE_RECORDS, _garbage_compressed()], ids=["bad-record-length", "bad-gzip"])
def test_timestamp_lookups_answer_when_stored_records_do_not_decode(tmp_path: Path, batch: bytes) -> None:
    """Produce checks header and CRC only, so such a batch is stored; ListOffsets by timestamp and
    by max timestamp (KIP-734) then raised CorruptRecords (or the codec's error) in the handler:
    logged at ERROR, the requester's connection closed, for every later lookup."""
    log = PartitionLog("t", 0, tmp_path / "t-0", TopicConfig({}, BrokerConfig()), NOW)
    log.append_produced(build_batch([(None, b"before")], NOW - 10), NOW)
    accepted = log.append_produced(batch, NOW)
    assert not isinstance(accepted, Invalid), accepted
    point = log.flush_point()
    assert point is not None
    point.segment.flush()
    log.on_flushed(point)
    header = validate_produced(batch, 1 << 20)
    assert isinstance(header, BatchHeader)
    assert log.offset_for_timestamp(NOW - 5) == (1, header.max_timestamp), "the batch's start, its max timestamp"
    assert log.max_timestamp_offset() == (1, header.max_timestamp)
    assert log.offset_for_timestamp(NOW - 10) == (0, NOW - 10), "decodable batches are answered record by record"
    log.close()


@pytest.mark.parametrize("version", [10, 11])
def test_a_metadata_request_naming_a_topic_by_id_alone_before_v12_is_an_invalid_request(version: int) -> None:
    """tests/fuzz/atheris/dispatcher found it in 1,003 inputs: Metadata v10/v11 allow a null topic
    name (and carry a topic id), but their response cannot hold a null name; for an unknown id the
    broker answered with one, and encoding the response raised TypeError (logged at ERROR, the
    connection dropped).  Kafka refuses such a request: INVALID_REQUEST for every topic, "" for a
    null name (MetadataRequest.getErrorResponse)."""
    module = load_payload_module(apis.METADATA, version, EntityType.request)
    body = apis.build(
        module.MetadataRequest,
        topics=(module.MetadataRequestTopic(topic_id=uuid.UUID("40668958-3d4d-2844-7680-92a4f600a400"), name=None),
                module.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="known")),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    request = parse_request(encode_request(body, 41)[4:])
    broker = SimpleNamespace(registry=SimpleNamespace(topics={}, by_id={}, cluster_id="c"), config={AUTO_CREATE_TOPICS_ENABLE: False},
                             node_id=1, advertised_address=lambda _listener: ("127.0.0.1", 9092), authorizer=None)
    response = handle_metadata(broker, request, SimpleNamespace(peer="test", listener_name="PLAINTEXT"))  # type: ignore[arg-type]
    assert [(t.error_code, t.name) for t in response.topics] == [(ErrorCode.invalid_request, ""), (ErrorCode.invalid_request, "known")]
    encode_response(41, response)  # raised TypeError


#: The WriteTxnMarkers v1 request of tests/fuzz/atheris/dispatcher's crash (146 inputs, once the
#: topic it names existed; the network fuzzer met it five times in ten minutes): producer id -1.
WRITE_TXN_MARKERS_NO_PRODUCER = bytes.fromhex(
    "001b000100000090000466757a7a0002ffffffffffffffffffff000209667a2d6f74686572020000000000ffffffff0000")


def test_a_transaction_marker_without_a_producer_id_is_refused(tmp_path: Path) -> None:
    """PartitionLog.append_marker raised ValueError (producer state: "marker at 0 has no producer
    id") for WriteTxnMarkers naming producer -1: the handler failed, logged at ERROR."""
    request = parse_request(WRITE_TXN_MARKERS_NO_PRODUCER)
    marker = request.body.markers[0]  # type: ignore[union-attr]
    assert marker.producer_id == -1
    log = PartitionLog("fz-other", 0, tmp_path / "fz-other-0", TopicConfig({}, BrokerConfig()), NOW)
    outcome = log.append_marker(marker.producer_id, marker.producer_epoch, bool(marker.transaction_result), marker.coordinator_epoch, NOW)
    assert isinstance(outcome, Invalid) and outcome.error == ErrorCode.invalid_record
    assert log.log_end_offset == 0 and log.segments[-1].size == 0, "nothing was written"
    log.close()


# -- start-up over damaged segments (tests/fuzz/atheris/recovery) ------------------------------


def _log(path: Path, clean: bool = False) -> PartitionLog:
    return PartitionLog("t", 0, path, TopicConfig({}, BrokerConfig()), NOW, clean_shutdown=clean)


def _written(path: Path, clean: bool) -> tuple[int, int]:
    """A partition of five batches, closed as a crash (or a clean shutdown) leaves it: (end offset, log size)."""
    log = _log(path, clean=True)
    for i in range(5):
        log.append_produced(build_batch([(b"k", b"v%d" % i)], NOW), NOW)
    if clean:
        log.flush_all()
    end, size = log.log_end_offset, log.segments[-1].size
    log.close()
    return end, size


def _stamped(base_offset: int, last_offset_delta: int | None = None, batch: bytes | None = None) -> bytes:
    out = bytearray(batch or build_batch([(None, b"tail")], NOW))
    out[0:8] = base_offset.to_bytes(8, "big", signed=True)
    if last_offset_delta is not None:
        out[23:27] = last_offset_delta.to_bytes(4, "big", signed=True)
    return with_crc(out)


@pytest.mark.parametrize("tail", ["runs-backwards", "past-the-index-range"])
def test_recovery_cuts_a_batch_whose_offsets_cannot_follow(tmp_path: Path, tail: str) -> None:
    """The recovery harness found both (CRC-valid batches, its mode 0x02): a batch whose last offset
    is before its first was kept, and the log's next offsets went backwards; one 2**31 offsets past
    the segment's base was kept too, and its index entry raised struct.error: the partition, and
    so the broker, could not start."""
    path = tmp_path / "t-0"
    end, size = _written(path, clean=False)
    bad = _stamped(end + 10, last_offset_delta=-224) if tail == "runs-backwards" else _stamped(2**31 + 5)
    with open(path / "00000000000000000000.log", "ab") as f:
        f.write(bad)
    log = _log(path)
    assert (log.log_end_offset, log.segments[-1].size) == (end, size), "the batch is cut"
    assert not isinstance(log.append_produced(build_batch([(None, b"after")], NOW), NOW), Invalid)
    log.close()


def test_a_clean_start_over_a_batch_with_impossible_offsets_recovers(tmp_path: Path) -> None:
    """After a clean shutdown the tail is scanned without a CRC check; a batch whose header says
    offset -6,052,837,899,185,946,623 (recovery harness, mode 0x01) was accepted, and the next
    append raised struct.error in the produce handler.  The offsets are now checked: the segment
    is recovered (CRC-checked) and cut."""
    path = tmp_path / "t-0"
    end, size = _written(path, clean=True)
    bad = bytearray(_stamped(end))
    bad[0:8] = (-6_052_837_899_185_946_623).to_bytes(8, "big", signed=True)  # not covered by the CRC
    with open(path / "00000000000000000000.log", "ab") as f:
        f.write(bad)
    log = _log(path, clean=True)
    assert (log.log_end_offset, log.segments[-1].size) == (end, size)
    result = log.append_produced(build_batch([(None, b"after")], NOW), NOW)
    assert not isinstance(result, Invalid) and result.base_offset == end
    log.close()


def test_a_marker_whose_records_do_not_decode_is_skipped_by_the_replay(tmp_path: Path) -> None:
    """The recovery harness (mode 0x02): a CRC-valid control batch whose records do not decode made
    read_marker raise CorruptRecords while producer state was replayed: the partition could not
    open.  It is skipped with a warning."""
    path = tmp_path / "t-0"
    end, _ = _written(path, clean=False)
    marker = bytearray(build_batch([(b"\x00\x00\x00\x00", b"\x00" * 6)], NOW, producer_id=7, producer_epoch=0, transactional=True,
                                   control=True))
    marker[61:63] = b"\xff\xff"  # the record's length varint: runs past the batch
    with open(path / "00000000000000000000.log", "ab") as f:
        f.write(_stamped(end, batch=bytes(marker)))
    log = _log(path)
    assert log.log_end_offset == end + 1, "the batch itself is whole and CRC-valid: kept"
    log.close()

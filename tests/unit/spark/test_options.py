"""The connector's options: Spark's Kafka connector's names, defaults and errors, each naming its option."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    OffsetSpec,
    OptionError,
    SinkOptions,
    SourceOptions,
    Subscribe,
    SubscribePattern,
    check_sink_columns,
    offsets_to_json,
    parse_duration_ms,
    parse_offsets_json,
    parse_sink_options,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def source(*, streaming: bool = True, **options: str) -> SourceOptions:
    """Source options with topic 't' subscribed unless another subscription is given."""
    strategy = {} if {"subscribe", "subscribePattern", "assign"} & set(options) else {"subscribe": "t"}
    return parse_source_options({**BOOT, **strategy, **options}, streaming=streaming)


def source_with(options: dict[str, str]) -> SourceOptions:
    """Streaming source options for topic 't' plus ``options`` (for keys that are not identifiers)."""
    return parse_source_options({**BOOT, "subscribe": "t", **options}, streaming=True)


def source_error(options: dict[str, str], streaming: bool = True) -> OptionError:
    with pytest.raises(OptionError) as info:
        parse_source_options(options, streaming=streaming)
    return info.value


def sink(**options: str) -> SinkOptions:
    return parse_sink_options({**BOOT, **options}, streaming=True)


def sink_error(options: dict[str, str]) -> OptionError:
    with pytest.raises(OptionError) as info:
        parse_sink_options(options, streaming=True)
    return info.value


# --------------------------------------------------------------------------- defaults


def test_streaming_defaults() -> None:
    opts = parse_source_options({**BOOT, "subscribe": "orders"}, streaming=True)
    assert opts.bootstrap_servers == "127.0.0.1:9092"
    assert opts.subscription == Subscribe(("orders",))
    assert opts.starting_offsets == OffsetSpec.latest()
    assert opts.ending_offsets is None
    assert opts.max_offsets_per_trigger is None
    assert opts.min_offsets_per_trigger is None
    assert opts.max_trigger_delay_ms == 15 * 60_000
    assert opts.min_partitions is None
    assert opts.include_headers is False
    assert opts.fail_on_data_loss is True
    assert opts.commit_offsets_to_group is None
    assert opts.group_id_prefix == "onceflow-spark-source"
    assert opts.kafka_params == {"bootstrap.servers": "127.0.0.1:9092", "isolation.level": "read_committed"}
    assert opts.isolation_level == "read_committed"
    assert opts.group_id is None
    assert opts.warnings == ()


def test_batch_defaults() -> None:
    opts = parse_source_options({**BOOT, "subscribe": "orders"}, streaming=False)
    assert opts.starting_offsets == OffsetSpec.earliest()
    assert opts.ending_offsets == OffsetSpec.latest()


def test_every_option_parsed() -> None:
    opts = parse_source_options({
        **BOOT, "subscribePattern": "orders-.*", "startingOffsets": "earliest", "failOnDataLoss": "false",
        "maxOffsetsPerTrigger": "1000", "minOffsetsPerTrigger": "10", "maxTriggerDelay": "30s", "minPartitions": "8",
        "includeHeaders": "true", "groupIdPrefix": "etl", "commitOffsetsToGroup": "etl-lag", "path": "ignored",
        "checkpointLocation": "/tmp/ckpt", "kafka.fetch.max.bytes": "1048576",
    }, streaming=True)
    assert opts.subscription == SubscribePattern("orders-.*")
    assert opts.starting_offsets == OffsetSpec.earliest()
    assert opts.fail_on_data_loss is False
    assert opts.max_offsets_per_trigger == 1000
    assert opts.min_offsets_per_trigger == 10
    assert opts.max_trigger_delay_ms == 30_000
    assert opts.min_partitions == 8
    assert opts.include_headers is True
    assert opts.group_id_prefix == "etl"
    assert opts.commit_offsets_to_group == "etl-lag"
    assert opts.kafka_params["fetch.max.bytes"] == "1048576"


# --------------------------------------------------------------------------- case-insensitivity


def test_keys_as_spark_passes_them_lower_case() -> None:
    opts = parse_source_options({"kafka.bootstrap.servers": "b:1", "subscribepattern": "x.*",
                                 "startingoffsets": '{"xa":{"0":5}}', "maxoffsetspertrigger": "7",
                                 "failondataloss": "false", "checkpointlocation": "/c"}, streaming=True)
    assert opts.subscription == SubscribePattern("x.*")
    assert opts.starting_offsets == OffsetSpec.specific({("xa", 0): 5})
    assert opts.max_offsets_per_trigger == 7
    assert opts.fail_on_data_loss is False


def test_keys_in_any_case() -> None:
    opts = parse_source_options({"KAFKA.Bootstrap.Servers": "b:1", "SUBSCRIBE": "a", "StartingOffsets": "EARLIEST",
                                 "Kafka.Isolation.Level": "READ_UNCOMMITTED", "INCLUDEHEADERS": "TRUE"},
                                streaming=True)
    assert opts.bootstrap_servers == "b:1"
    assert opts.starting_offsets == OffsetSpec.earliest()
    assert opts.include_headers is True
    assert opts.kafka_params == {"bootstrap.servers": "b:1", "isolation.level": "read_uncommitted"}


def test_pyspark_case_insensitive_dict() -> None:
    datasource = pytest.importorskip("pyspark.sql.datasource")
    options = datasource.CaseInsensitiveDict({"kafka.bootstrap.servers": "b:1", "subscribe": "a",
                                              "startingOffsets": "earliest", "maxOffsetsPerTrigger": "5"})
    opts = parse_source_options(options, streaming=True)
    assert opts.starting_offsets == OffsetSpec.earliest()
    assert opts.max_offsets_per_trigger == 5


def test_same_key_twice_in_different_case() -> None:
    err = source_error({**BOOT, "subscribe": "a", "startingOffsets": "earliest", "startingoffsets": "latest"})
    assert "startingoffsets" in str(err) and "twice" in str(err)


def test_sink_keys_in_any_case() -> None:
    opts = parse_sink_options({"KAFKA.BOOTSTRAP.SERVERS": "b:1", "TOPIC": "out", "DeliveryGuarantee": "AT-LEAST-ONCE",
                               "transactionalidprefix": "p", "checkpointlocation": "/c"}, streaming=True)
    assert (opts.topic, opts.delivery_guarantee, opts.transactional_id_prefix, opts.checkpoint_location) == (
        "out", "at-least-once", "p", "/c")


# --------------------------------------------------------------------------- every error names its option

SOURCE_ERRORS: list[tuple[dict[str, str], bool, str]] = [
    ({"subscribe": "a"}, True, "kafka.bootstrap.servers"),
    ({**BOOT}, True, "subscribe"),
    ({**BOOT, "subscribe": "a", "assign": '{"a":[0]}'}, True, "assign"),
    ({**BOOT, "subscribe": " , "}, True, "subscribe"),
    ({**BOOT, "subscribe": "a,,b"}, True, "subscribe"),
    ({**BOOT, "subscribe": "bad topic"}, True, "subscribe"),
    ({**BOOT, "subscribePattern": "  "}, True, "subscribePattern"),
    ({**BOOT, "subscribePattern": "a(["}, True, "subscribePattern"),
    ({**BOOT, "assign": "topicA"}, True, "assign"),
    ({**BOOT, "assign": "{not json"}, True, "assign"),
    ({**BOOT, "assign": '{"a":0}'}, True, "assign"),
    ({**BOOT, "assign": '{"a":[-1]}'}, True, "assign"),
    ({**BOOT, "assign": '{"a":["0"]}'}, True, "assign"),
    ({**BOOT, "assign": '{"a":[]}'}, True, "assign"),
    ({**BOOT, "subscribe": "a", "startingOffsets": "first"}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":23'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"x":23}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"-1":23}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":1.5}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":true}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":"5"}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":1,"00":2}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":1},"a":{"1":2}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":[0]}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": "{}"}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"b":{"0":1}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribePattern": "a.*", "startingOffsets": '{"b":{"0":1}}'}, True, "startingOffsets"),
    ({**BOOT, "assign": '{"a":[0]}', "startingOffsets": '{"a":{"0":1,"1":1}}'}, True, "startingOffsets"),
    ({**BOOT, "assign": '{"a":[0,1]}', "startingOffsets": '{"a":{"0":1}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, True, "endingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, False, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "endingOffsets": "earliest"}, False, "endingOffsets"),
    ({**BOOT, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "endingOffsets"),
    ({**BOOT, "subscribe": "a", "endingOffsets": '{"b":{"0":5}}'}, False, "endingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":9}}', "endingOffsets": '{"a":{"0":5}}'}, False,
     "endingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":1}}', "endingOffsets": '{"a":{"1":5}}'}, False,
     "endingOffsets"),
    ({**BOOT, "subscribe": "a", "failOnDataLoss": "yes"}, True, "failOnDataLoss"),
    ({**BOOT, "subscribe": "a", "includeHeaders": "1"}, True, "includeHeaders"),
    ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "-5"}, True, "maxOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "ten"}, True, "maxOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "1.5"}, True, "maxOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "1_000"}, True, "maxOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": ""}, True, "minOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "10"}, True,
     "minOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "a", "minPartitions": "0"}, True, "minPartitions"),
    ({**BOOT, "subscribe": "a", "maxTriggerDelay": "5 minutes"}, True, "maxTriggerDelay"),
    ({**BOOT, "subscribe": "a", "maxTriggerDelay": "-1s"}, True, "maxTriggerDelay"),
    ({**BOOT, "subscribe": "a", "maxTriggerDelay": ""}, True, "maxTriggerDelay"),
    ({**BOOT, "subscribe": "a", "commitOffsetsToGroup": " "}, True, "commitOffsetsToGroup"),
    ({**BOOT, "subscribe": "a", "groupIdPrefix": ""}, True, "groupIdPrefix"),
    ({**BOOT, "assign": '{"a":[2147483648]}'}, True, "assign"),
    ({**BOOT, "assign": '{"a":[true]}'}, True, "assign"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"2147483648":1}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":9223372036854775808}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"\\u0661":1}}'}, True, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, True, "auto.offset.reset"),
    ({**BOOT, "subscribe": "a", "kafka.key.deserializer": "x"}, True, "key.deserializer"),
    ({**BOOT, "subscribe": "a", "kafka.value.deserializer": "x"}, True, "value.deserializer"),
    ({**BOOT, "subscribe": "a", "kafka.enable.auto.commit": "false"}, True, "enable.auto.commit"),
    ({**BOOT, "subscribe": "a", "kafka.interceptor.classes": "x"}, True, "interceptor.classes"),
    ({**BOOT, "subscribe": "a", "kafka.isolation.level": "serializable"}, True, "kafka.isolation.level"),
    ({**BOOT, "subscribe": "a", "kafka.group.id": ""}, True, "kafka.group.id"),
    ({**BOOT, "subscribe": "a", "kafka.": "x"}, True, "kafka."),
    ({**BOOT, "subscribe": "a", "startingoffset": "earliest"}, True, "startingoffset"),
    ({**BOOT, "subscribe": "a", "topic": "x"}, True, "topic"),
    ({**BOOT, "subscribe": "a", "startingTimestamp": "1"}, True, "startingTimestamp"),
]


@pytest.mark.parametrize(("options", "streaming", "option"), SOURCE_ERRORS)
def test_source_errors_name_the_option(options: dict[str, str], streaming: bool, option: str) -> None:
    err = source_error(options, streaming)
    assert option in str(err)
    assert err.option is not None and option in err.option


SINK_ERRORS: list[tuple[dict[str, str], str]] = [
    ({"topic": "a"}, "kafka.bootstrap.servers"),
    ({**BOOT, "topic": " "}, "topic"),
    ({**BOOT, "topic": "no/slashes"}, "topic"),
    ({**BOOT, "deliveryGuarantee": "exactly_once"}, "deliveryGuarantee"),
    ({**BOOT, "deliveryGuarantee": "at-most-once"}, "deliveryGuarantee"),
    ({**BOOT, "transactionalIdPrefix": ""}, "transactionalIdPrefix"),
    ({**BOOT, "kafka.key.serializer": "x"}, "key.serializer"),
    ({**BOOT, "kafka.value.serializer": "x"}, "value.serializer"),
    ({**BOOT, "kafka.transactional.id": "x"}, "transactional.id"),
    ({**BOOT, "kafka.enable.idempotence": "False"}, "kafka.enable.idempotence"),
    ({**BOOT, "kafka.acks": "1"}, "kafka.acks"),
    ({**BOOT, "kafka.transaction.timeout.ms": "ten"}, "kafka.transaction.timeout.ms"),
    ({**BOOT, "kafka.transaction.timeout.ms": "0"}, "kafka.transaction.timeout.ms"),
    ({**BOOT, "includeHeaders": "maybe"}, "includeHeaders"),
    ({**BOOT, "topik": "a"}, "topik"),
    ({**BOOT, "subscribe": "a"}, "subscribe"),
    ({**BOOT, "startingOffsets": "earliest"}, "startingOffsets"),
    ({**BOOT, "startingTimestamp": "1"}, "startingTimestamp"),
    ({**BOOT, "deliveryGuarantee": ""}, "deliveryGuarantee"),
    ({**BOOT, "deliveryGuarantee": " "}, "deliveryGuarantee"),
    ({**BOOT, "kafka.enable.idempotence": "nope"}, "kafka.enable.idempotence"),
    ({**BOOT, "kafka.max.in.flight.requests.per.connection": "6"}, "kafka.max.in.flight.requests.per.connection"),
    ({**BOOT, "kafka.max.in.flight": "10"}, "kafka.max.in.flight.requests.per.connection"),
    ({**BOOT, "kafka.max.in.flight": "zero"}, "kafka.max.in.flight.requests.per.connection"),
    ({**BOOT, "kafka.message.timeout.ms": "600001"}, "kafka.message.timeout.ms"),
    ({**BOOT, "kafka.delivery.timeout.ms": "0"}, "kafka.delivery.timeout.ms"),
    ({**BOOT, "kafka.transaction.timeout.ms": "60000", "kafka.message.timeout.ms": "60001"}, "kafka.message.timeout.ms"),
    ({**BOOT, "deliveryGuarantee": "at-least-once", "kafka.acks": "0"}, "kafka.acks"),
    ({**BOOT, "deliveryGuarantee": "at-least-once", "kafka.acks": "1"}, "kafka.acks"),
    ({**BOOT, "kafka.acks": "some"}, "kafka.acks"),
    ({**BOOT, "acceptChangedReplay": "-1"}, "acceptChangedReplay"),
    ({**BOOT, "acceptChangedReplay": "last"}, "acceptChangedReplay"),
    ({**BOOT, "replayWaitMs": "0"}, "replayWaitMs"),
    ({**BOOT, "writeName": "has space"}, "writeName"),
    ({**BOOT, "writeName": "x" * 151}, "writeName"),
]


@pytest.mark.parametrize(("options", "option"), SINK_ERRORS)
def test_sink_errors_name_the_option(options: dict[str, str], option: str) -> None:
    err = sink_error(options)
    assert option in str(err)
    assert err.option is not None and option in err.option


# --------------------------------------------------------------------------- Spark's messages


def test_bootstrap_servers_message() -> None:
    err = source_error({"subscribe": "a"})
    assert str(err) == "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
    assert "Kafka producer" in str(sink_error({"topic": "a"}))


def test_strategy_messages() -> None:
    assert "One of the following options must be specified" in str(source_error({**BOOT}))
    err = source_error({**BOOT, "subscribe": "a", "subscribePattern": "b"})
    assert "Only one of the following options can be specified" in str(err)
    assert "subscribe, subscribePattern" in str(err)


def test_auto_offset_reset_message() -> None:
    err = source_error({**BOOT, "subscribe": "a", "kafka.auto.offset.reset": "latest"})
    assert str(err).startswith("Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
                               "'startingOffsets' to 'earliest' or 'latest'")
    assert err.option == "kafka.auto.offset.reset"


def test_bad_json_shows_the_expected_form() -> None:
    assert '{"topicA":[0,1],"topicB":[2,4]}' in str(source_error({**BOOT, "assign": "{oops}"}))
    err = source_error({**BOOT, "subscribe": "a", "startingOffsets": "{oops}"})
    assert '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}' in str(err)


def test_unknown_option_suggests_the_right_one() -> None:
    err = source_error({**BOOT, "subscribe": "a", "startingoffset": "earliest"})
    assert str(err) == "Unknown option 'startingoffset' for the onceflow source; did you mean 'startingOffsets'?"
    assert "did you mean 'maxOffsetsPerTrigger'?" in str(source_error({**BOOT, "subscribe": "a",
                                                                        "maxOffsetPerTrigger": "5"}))
    assert "did you mean 'kafka.bootstrap.servers'?" in str(source_error({**BOOT, "subscribe": "a",
                                                                          "bootstrap.servers": "x"}))
    err = source_error({**BOOT, "subscribe": "a", "zzz": "1"})
    assert "Unknown option 'zzz'" in str(err) and "Known options:" in str(err) and "startingOffsets" in str(err)
    assert "did you mean 'topic'?" in str(sink_error({**BOOT, "topik": "a"}))


def test_options_of_the_other_side() -> None:
    assert "is a sink option" in str(source_error({**BOOT, "subscribe": "a", "deliveryGuarantee": "exactly-once"}))
    assert "is a source option" in str(sink_error({**BOOT, "topic": "a", "failOnDataLoss": "false"}))


@pytest.mark.parametrize("name", ["startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
                                  "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
                                  "maxRecordsPerPartition", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
                                  "fetchOffset.retryIntervalMs"])
def test_spark_options_not_supported(name: str) -> None:
    err = source_error({**BOOT, "subscribe": "a", name.lower(): "1"}, streaming=False)
    assert f"Option '{name}' of Spark's Kafka connector is not supported" in str(err)
    assert err.option == name


# --------------------------------------------------------------------------- subscriptions


def test_subscribe_trims_and_dedupes() -> None:
    assert source(subscribe=" a , b,a ").subscription == Subscribe(("a", "b"))


def test_subscribe_pattern_full_match() -> None:
    sub = source(subscribePattern=" orders-.* ").subscription
    assert sub == SubscribePattern("orders-.*")
    assert isinstance(sub, SubscribePattern)
    assert sub.matches("orders-eu") and not sub.matches("old-orders-eu") and not sub.matches("orders")


def test_assign_sorted_and_deduplicated() -> None:
    opts = parse_source_options({**BOOT, "assign": ' {"topicB":[4,2],"topicA":[1,0,1]}'}, streaming=True)
    assert opts.subscription == Assign((("topicA", 0), ("topicA", 1), ("topicB", 2), ("topicB", 4)))


def test_assign_with_matching_specific_offsets() -> None:
    opts = parse_source_options({**BOOT, "assign": '{"a":[0,1]}', "startingOffsets": '{"a":{"0":5,"1":-2}}',
                                 "endingOffsets": '{"a":{"0":9,"1":-1}}'}, streaming=False)
    assert opts.starting_offsets == OffsetSpec.specific({("a", 0): 5, ("a", 1): EARLIEST})
    assert opts.ending_offsets == OffsetSpec.specific({("a", 0): 9, ("a", 1): LATEST})


def test_assign_offsets_mismatch_lists_partitions() -> None:
    err = source_error({**BOOT, "assign": '{"a":[0,1]}', "startingOffsets": '{"a":{"0":5,"2":5}}'})
    assert "not assigned: a-2" in str(err) and "missing: a-1" in str(err)


# --------------------------------------------------------------------------- offsets


def test_offsets_keywords_any_case_and_whitespace() -> None:
    assert source(startingOffsets=" Earliest ").starting_offsets == OffsetSpec.earliest()
    assert source(startingOffsets="LATEST").starting_offsets == OffsetSpec.latest()


def test_specific_offsets() -> None:
    opts = source(startingOffsets='{"t":{"0":23,"1":-1,"2":-2}}')
    assert opts.starting_offsets.kind == "specific"
    assert dict(opts.starting_offsets.offsets) == {("t", 0): 23, ("t", 1): LATEST, ("t", 2): EARLIEST}


def test_batch_start_and_end() -> None:
    opts = source(streaming=False, startingOffsets='{"t":{"0":5,"1":-2}}', endingOffsets='{"t":{"0":5,"1":-1}}')
    assert opts.ending_offsets == OffsetSpec.specific({("t", 0): 5, ("t", 1): LATEST})
    # Sentinels are not compared with offsets (Spark's checkStartOffsetNotGreaterThanEndOffset).
    source(streaming=False, startingOffsets='{"t":{"0":50}}', endingOffsets='{"t":{"0":-1}}')


def test_ending_offsets_earliest_message() -> None:
    err = source_error({**BOOT, "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, streaming=False)
    assert "can't be earliest" in str(err) and "t-0" in str(err)
    err = source_error({**BOOT, "subscribe": "t", "endingOffsets": "earliest"}, streaming=False)
    assert "ending offset can't be earliest for batch queries" in str(err)


def test_streaming_refuses_ending_offsets() -> None:
    err = source_error({**BOOT, "subscribe": "t", "endingOffsets": "latest"})
    assert "not valid in streaming queries" in str(err)


def test_parse_offsets_json_allow_earliest() -> None:
    assert parse_offsets_json('{"a":{"0":-2}}', "x", allow_earliest=True) == {("a", 0): -2}
    with pytest.raises(OptionError, match="'x'"):
        parse_offsets_json('{"a":{"0":-2}}', "x", allow_earliest=False)


def test_offsets_to_json_is_sparks_format() -> None:
    offsets = {("b", 10): 7, ("b", 2): -1, ("a", 0): 23}
    assert offsets_to_json(offsets) == '{"a":{"0":23},"b":{"2":-1,"10":7}}'
    assert offsets_to_json({}) == "{}"


topics = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=12).filter(lambda t: t not in (".", ".."))
offset_maps = st.dictionaries(st.tuples(topics, st.integers(0, 10_000)), st.integers(-2, 2**63 - 1), min_size=1)


@given(offset_maps)
def test_offsets_json_round_trip(offsets: dict[tuple[str, int], int]) -> None:
    text = offsets_to_json(offsets)
    assert parse_offsets_json(text, "startingOffsets", allow_earliest=True) == offsets
    assert offsets_to_json(parse_offsets_json(text, "o", allow_earliest=True)) == text


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(("text", "ms"), [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("1h", 3_600_000),
                                          ("2d", 172_800_000), ("5min", 300_000), ("250000us", 250), ("100", 100),
                                          (" 5S ", 5000), ("0", 0)])
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text, "maxTriggerDelay") == ms
    assert source(maxTriggerDelay=text).max_trigger_delay_ms == ms


@pytest.mark.parametrize("text", ["", "5 m", "1.5h", "-1s", "5x", "m", "15mins"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(OptionError, match="'maxTriggerDelay'"):
        parse_duration_ms(text, "maxTriggerDelay")


def test_booleans_any_case() -> None:
    assert source(failOnDataLoss="FALSE").fail_on_data_loss is False
    assert source(includeHeaders=" True ").include_headers is True


def test_positive_integers() -> None:
    assert source(maxOffsetsPerTrigger=" 10 ", minOffsetsPerTrigger="+3").max_offsets_per_trigger == 10
    assert source(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="10").min_offsets_per_trigger == 10


def test_per_trigger_limits_ignored_in_batch_with_warnings() -> None:
    opts = source(streaming=False, maxOffsetsPerTrigger="10", minOffsetsPerTrigger="5", maxTriggerDelay="1s")
    assert opts.max_offsets_per_trigger is None and opts.min_offsets_per_trigger is None
    assert opts.warnings == ("maxOffsetsPerTrigger option ignored in batch queries",
                             "minOffsetsPerTrigger option ignored in batch queries",
                             "maxTriggerDelay option ignored in batch queries")


# --------------------------------------------------------------------------- Kafka client settings


def test_kafka_params_prefix_removed() -> None:
    opts = source_with({"kafka.fetch.min.bytes": "1", "kafka.client.id": "Me"})
    assert opts.kafka_params == {"bootstrap.servers": "127.0.0.1:9092", "fetch.min.bytes": "1", "client.id": "Me",
                                 "isolation.level": "read_committed"}


def test_fixed_group_id_allowed_with_warning() -> None:
    opts = source_with({"kafka.group.id": "mine", "groupIdPrefix": "p"})
    assert opts.group_id == "mine"
    assert len(opts.warnings) == 2
    assert "kafka.group.id" in opts.warnings[0]
    assert "groupIdPrefix" in opts.warnings[1]


def test_isolation_level() -> None:
    assert source_with({"kafka.isolation.level": "read_uncommitted"}).isolation_level == "read_uncommitted"
    assert source_with({"kafka.isolation.level": "read_committed"}).kafka_params["isolation.level"] == "read_committed"


# --------------------------------------------------------------------------- the sink


def test_sink_defaults() -> None:
    opts = parse_sink_options({**BOOT, "topic": " out "}, streaming=True)
    assert opts.bootstrap_servers == "127.0.0.1:9092"
    assert opts.topic == "out"
    assert opts.delivery_guarantee == "exactly-once"
    assert opts.transactional_id_prefix is None
    assert opts.checkpoint_location is None
    assert opts.transaction_timeout_ms == 600_000
    assert opts.kafka_params == {"bootstrap.servers": "127.0.0.1:9092", "transaction.timeout.ms": "600000"}


def test_sink_at_least_once() -> None:
    opts = sink(deliveryGuarantee="at-least-once", **{"kafka.enable.idempotence": "false", "kafka.acks": "1"})
    assert opts.delivery_guarantee == "at-least-once"
    assert "transaction.timeout.ms" not in opts.kafka_params
    assert opts.kafka_params["acks"] == "1"


def test_sink_accepts_what_spark_passes() -> None:
    opts = parse_sink_options({**BOOT, "checkpointLocation": "/ckpt", "path": "p", "queryName": "q",
                               "includeHeaders": "true"}, streaming=False)
    assert opts.checkpoint_location == "/ckpt"
    assert opts.topic is None


def test_sink_replay_options_and_the_write_name() -> None:
    opts = sink(acceptChangedReplay=" 7 ", replayWaitMs="5000", writeName="ledger.v2")
    assert (opts.accept_changed_replay, opts.replay_wait_ms, opts.name) == (7, 5000, "ledger.v2")
    assert (sink().accept_changed_replay, sink().replay_wait_ms, sink().name) == (None, 30_000, None)
    assert sink(deliveryGuarantee=" Exactly-Once ").delivery_guarantee == "exactly-once"


def test_sink_producer_settings_that_keep_the_guarantee_are_accepted() -> None:
    sink(**{"kafka.max.in.flight.requests.per.connection": "5", "kafka.message.timeout.ms": "600000"})
    sink(**{"kafka.transaction.timeout.ms": "900000", "kafka.delivery.timeout.ms": "900000"})
    sink(deliveryGuarantee="at-least-once", **{"kafka.max.in.flight": "20", "kafka.enable.idempotence": "false",
                                                "kafka.message.timeout.ms": "3600000"})


def test_sink_transaction_timeout_and_acks() -> None:
    opts = sink(transactionalIdPrefix=" etl ", **{"kafka.transaction.timeout.ms": "60000", "kafka.acks": "all",
                                                  "kafka.enable.idempotence": "true"})
    assert opts.transaction_timeout_ms == 60_000
    assert opts.kafka_params["transaction.timeout.ms"] == "60000"
    assert opts.transactional_id_prefix == "etl"
    sink(**{"kafka.acks": "-1"})


# --------------------------------------------------------------------------- the sink's columns


@pytest.mark.parametrize(("columns", "topic"), [
    (["value"], "t"), (["key", "value", "topic"], None), (["value", "topic", "partition", "headers", "key"], None),
    (["key", "value", "topic"], "t"),
])
def test_sink_columns_ok(columns: list[str], topic: str | None) -> None:
    check_sink_columns(columns, topic)


@pytest.mark.parametrize(("columns", "topic", "named", "text"), [
    (["key"], "t", "value", "Required attribute 'value' not found"),
    (["key", "value"], None, "topic", "topic option required when no 'topic' attribute is present"),
    (["vaule", "value"], "t", "vaule", "did you mean 'value'?"),
    (["Value"], "t", "Value", "did you mean 'value'?"),
    (["value", "timestamp"], "t", "timestamp", "allowed: key, value, topic, partition, headers"),
    (["value", "value"], "t", "value", "more than once"),
])
def test_sink_columns_errors(columns: list[str], topic: str | None, named: str, text: str) -> None:
    with pytest.raises(OptionError) as info:
        check_sink_columns(columns, topic)
    assert f"'{named}'" in str(info.value) and text in str(info.value)
    assert info.value.option == named


# --------------------------------------------------------------------------- plain data


def test_results_pickle() -> None:
    src = source(startingOffsets='{"t":{"0":5}}', subscribe="t")
    assert pickle.loads(pickle.dumps(src)) == src
    snk = sink(topic="o")
    assert pickle.loads(pickle.dumps(snk)) == snk
    err = pickle.loads(pickle.dumps(OptionError("bad", "opt")))
    assert isinstance(err, OptionError) and str(err) == "bad" and err.option == "opt"


def test_results_are_frozen() -> None:
    opts: Any = source()
    with pytest.raises(AttributeError):
        opts.include_headers = True


def test_non_string_values_refused() -> None:
    options: Any = {**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": 10}
    err = source_error(options)
    assert "maxOffsetsPerTrigger" in str(err)


# --------------------------------------------------------------------------- security settings (onceflow.clientconfig)

_SECRET = "s3cr3t-Value"
_JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{_SECRET}";'


def test_spark_security_options_are_translated_for_librdkafka(tmp_path: Any) -> None:
    from onceflow.security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path, "CN=ca").location
    settings = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": _JAAS,
                "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca),
                "kafka.ssl.endpoint.identification.algorithm": ""}
    for parsed in (source_with(settings), parse_sink_options({**BOOT, **settings}, streaming=True)):
        params = parsed.kafka_params
        assert (params["sasl.username"], params["sasl.password"]) == ("alice", _SECRET)
        assert params["ssl.ca.location"] == str(ca)
        assert params["ssl.endpoint.identification.algorithm"] == "none"
        assert not {"sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type"} & set(params)
        assert parsed.kafka_origins["sasl.password"] == "sasl.jaas.config"
        assert _SECRET not in repr(parsed), "the options' repr leaves the client settings out"
        assert pickle.loads(pickle.dumps(parsed)) == parsed


@pytest.mark.parametrize(("settings", "option"), [
    ({"kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": _JAAS}, "kafka.sasl.jaas.config"),
    ({"kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": _JAAS[:-1]}, "kafka.sasl.jaas.config"),
    ({"kafka.ssl.truststore.location": "/nonexistent/truststore.jks"}, "kafka.ssl.truststore.location"),
    ({"kafka.ssl.keystore.type": "JKS", "kafka.ssl.keystore.location": "/x.jks", "kafka.ssl.keystore.password": _SECRET},
     "kafka.ssl.keystore.location"),
    ({"kafka.security.protocol": "SASL_SSLX"}, "kafka.security.protocol"),
    ({"kafka.ssl.enabled.protocols": "TLSv1.3"}, "kafka.ssl.enabled.protocols"),
    ({"kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
])
def test_bad_security_options_are_one_line_naming_them(settings: dict[str, str], option: str) -> None:
    for err in (source_error({**BOOT, "subscribe": "t", **settings}), sink_error({**BOOT, **settings})):
        assert err.option == option
        assert f"Option '{option}'" in str(err)
        assert _SECRET not in str(err) and "\n" not in str(err)


def test_a_secret_that_is_not_a_string_is_not_quoted() -> None:
    err = source_error({**BOOT, "subscribe": "t", "kafka.sasl.password": 12345})  # type: ignore[dict-item]
    assert "12345" not in str(err)

"""Offset arithmetic: Spark's rate limit, trigger delay and range splitting, checked on Spark's own examples."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.spark.ranges import OffsetRange, plan_ranges, rate_limit, should_trigger, topic_changes, total_size

T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)


# --------------------------------------------------------------------------- OffsetRange


def test_offset_range() -> None:
    r = OffsetRange("t", 3, 10, 25)
    assert r.size == 15
    assert r.topic_partition == ("t", 3)
    assert OffsetRange("t", 0, 5, 5).size == 0
    for bad in ((-1, 0, 1), (0, -1, 1), (0, 5, 4)):
        with pytest.raises(ValueError):
            OffsetRange("t", *bad)


# --------------------------------------------------------------------------- rate_limit


def test_rate_limit_spark_max_offsets_per_trigger() -> None:
    """KafkaMicroBatchSourceSuite "maxOffsetsPerTrigger": 101, 11 and 1 records in three partitions, limit 10."""
    latest = {T0: 101, T1: 11, T2: 1}
    start = {T0: 0, T1: 0, T2: 0}
    batches = []
    for _ in range(4):
        end = rate_limit(10, start, latest, {})
        batches.append({tp: end[tp] - start[tp] for tp in latest})
        start = end
    # "1 from smallest, 1 from middle, 8 from biggest", then "smallest now empty, 1 more from middle, 9 more
    # from biggest" three times.
    assert batches == [{T0: 8, T1: 1, T2: 1}] + [{T0: 9, T1: 1, T2: 0}] * 3
    assert start == {T0: 35, T1: 4, T2: 1}


def test_rate_limit_spark_composite_read_limit() -> None:
    """KafkaMicroBatchSourceSuite "compositeReadLimit": 21, 11 and 1 records, maxOffsetsPerTrigger 20."""
    assert rate_limit(20, {T0: 0, T1: 0, T2: 0}, {T0: 21, T1: 11, T2: 1}, {}) == {T0: 12, T1: 6, T2: 1}


def test_rate_limit_small_partitions_not_starved() -> None:
    start = {("t", p): 0 for p in range(5)}
    latest = {("t", 0): 1_000_000, **{("t", p): 1 for p in range(1, 5)}}
    out = rate_limit(100, start, latest, {})
    assert all(out[("t", p)] == 1 for p in range(1, 5))  # shares of ~0.0004 are ceiled to 1
    assert out[("t", 0)] == 99  # 99.9996 floored
    # Three partitions of one offset each, limit 1: each share is 1/3, ceiled, so the batch reads 3 (as Spark).
    assert rate_limit(1, {T0: 0, T1: 0, T2: 0}, {T0: 1, T1: 1, T2: 1}, {}) == {T0: 1, T1: 1, T2: 1}


def test_rate_limit_never_past_latest() -> None:
    assert rate_limit(1000, {T0: 5, T1: 0}, {T0: 10, T1: 3}, {}) == {T0: 10, T1: 3}
    # SPARK-26718: Long.MaxValue as the limit must not overflow.
    assert rate_limit(2**63 - 1, {T0: 5}, {T0: 10}, {}) == {T0: 10}


def test_rate_limit_new_partitions_start_at_earliest() -> None:
    # T1 is new: it begins at its earliest offset 90, so 10 are available there, 10 in T0.
    assert rate_limit(10, {T0: 0}, {T0: 10, T1: 100}, {T1: 90}) == {T0: 5, T1: 95}
    # A new partition whose earliest is unknown is left at latest (Spark leaves it to the data-loss check).
    assert rate_limit(10, {T0: 0}, {T0: 100, T1: 100}, {}) == {T0: 10, T1: 100}


def test_rate_limit_nothing_available() -> None:
    assert rate_limit(10, {T0: 5, T1: 7}, {T0: 5, T1: 7}, {}) == {T0: 5, T1: 7}
    assert rate_limit(10, {}, {}, {}) == {}
    # A partition gone backwards (recreated topic) has nothing "available" and ends at latest, as in Spark.
    assert rate_limit(10, {T0: 50, T1: 0}, {T0: 3, T1: 100}, {}) == {T0: 3, T1: 10}


def test_rate_limit_result_has_the_partitions_of_latest() -> None:
    assert set(rate_limit(5, {T0: 0, T2: 0}, {T0: 10, T1: 10}, {T1: 0})) == {T0, T1}


def test_rate_limit_refuses_non_positive_limit() -> None:
    with pytest.raises(ValueError):
        rate_limit(0, {T0: 0}, {T0: 10}, {})


partition_keys = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5))


@st.composite
def limited_batches(draw: st.DrawFn) -> tuple[int, dict[tuple[str, int], int], dict[tuple[str, int], int],
                                              dict[tuple[str, int], int]]:
    tps = draw(st.lists(partition_keys, min_size=1, max_size=10, unique=True))
    start: dict[tuple[str, int], int] = {}
    latest: dict[tuple[str, int], int] = {}
    earliest: dict[tuple[str, int], int] = {}
    for tp in tps:
        begin = draw(st.integers(0, 10**12))
        latest[tp] = begin + draw(st.integers(0, 10**6))
        if draw(st.booleans()):
            start[tp] = begin
        else:
            earliest[tp] = begin
    return draw(st.integers(1, 10**7)), start, latest, earliest


@given(limited_batches())
def test_rate_limit_properties(case: tuple[int, dict[tuple[str, int], int], dict[tuple[str, int], int],
                                           dict[tuple[str, int], int]]) -> None:
    limit, start, latest, earliest = case
    out = rate_limit(limit, start, latest, earliest)
    assert set(out) == set(latest)
    begin = {**earliest, **start}
    advanced = 0
    for tp, end in out.items():
        assert begin[tp] <= end <= latest[tp]
        if latest[tp] > begin[tp]:
            assert end > begin[tp]  # nobody starves
        advanced += end - begin[tp]
    available = sum(latest[tp] - begin[tp] for tp in latest)
    # Floors never exceed the limit; each ceiling adds less than one offset.
    assert advanced <= limit + len(latest)
    if limit >= 2 * available:
        assert out == latest


# --------------------------------------------------------------------------- should_trigger


def test_should_trigger_without_min_offsets() -> None:
    assert should_trigger(0, None, 0, 0, 1000)


def test_should_trigger_spark_min_offsets_per_trigger() -> None:
    """KafkaMicroBatchSourceSuite "minOffsetsPerTrigger": 15, maxTriggerDelay 5s."""
    now, last = 1_000_000, 0
    assert should_trigger(16, 15, last, now, 5000)  # the first batch always runs
    last = now
    now += 100
    assert not should_trigger(6, 15, last, now, 5000)  # too few, too soon
    now += 100
    assert should_trigger(18, 15, last, now, 5000)  # enough
    last = now
    now += 100
    assert not should_trigger(10, 15, last, now, 5000)
    now = last + 5000
    assert should_trigger(10, 15, last, now, 5000)  # the delay has passed (>=, as Spark)
    assert not should_trigger(10, 15, last, now - 1, 5000)
    assert should_trigger(15, 15, last, last, 5000)  # exactly the minimum


# --------------------------------------------------------------------------- total_size


def test_total_size() -> None:
    assert total_size({T0: 5, T1: 0, T2: 9}, {T0: 15, T1: 3, T2: 4}) == 13  # T2 went backwards: 0
    assert total_size({T0: 5, T1: 0}, {T0: 15}) == 10  # partitions only in start are ignored
    assert total_size({}, {}) == 0
    with pytest.raises(ValueError, match="t-1"):
        total_size({T0: 0}, {T0: 5, T1: 5})
    with pytest.raises(ValueError, match="unresolved"):
        total_size({T0: -2}, {T0: 5})


# --------------------------------------------------------------------------- plan_ranges


def ranges_of(*specs: tuple[str, int, int]) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """(topic, from, until) triples on partition 1, as KafkaOffsetRangeCalculatorSuite writes them."""
    return {(t, 1): a for t, a, _ in specs}, {(t, 1): b for t, _, b in specs}


def as_triples(ranges: list[OffsetRange]) -> list[tuple[str, int, int]]:
    assert all(r.partition == 1 for r in ranges)
    return [(r.topic, r.start, r.end) for r in ranges]


def test_plan_ranges_one_per_partition_sorted() -> None:
    start = {("b", 0): 0, ("a", 2): 5, ("a", 10): 0, ("c", 0): 7}
    end = {("b", 0): 10, ("a", 2): 6, ("a", 10): 3, ("c", 0): 7}
    assert plan_ranges(start, end) == [OffsetRange("a", 2, 5, 6), OffsetRange("a", 10, 0, 3),
                                       OffsetRange("b", 0, 0, 10)]


def test_plan_ranges_drops_empty_and_backwards_and_ignores_start_only() -> None:
    assert plan_ranges({T0: 5, T1: 9, T2: 0}, {T0: 5, T1: 3}) == []


def test_plan_ranges_caller_bugs() -> None:
    with pytest.raises(ValueError, match="t-1"):
        plan_ranges({T0: 0}, {T0: 5, T1: 5})
    with pytest.raises(ValueError, match="unresolved"):
        plan_ranges({T0: 0}, {T0: -1})
    with pytest.raises(ValueError, match="min_partitions"):
        plan_ranges({T0: 0}, {T0: 5}, min_partitions=0)


# KafkaOffsetRangeCalculatorSuite, case by case: (minPartitions, input ranges, expected ranges).
SPARK_CASES = [
    pytest.param(None, [("t1", 1, 2)], [("t1", 1, 2)], id="no minPartition"),
    pytest.param(None, [("t1", 1, 2), ("t2", 1, 1)], [("t1", 1, 2)], id="no minPartition, empty ignored"),
    pytest.param(3, [("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)], [("t1", 1, 2), ("t2", 1, 2), ("t3", 1, 2)],
                 id="N to N"),
    pytest.param(4, [("t1", 1, 5)], [("t1", 1, 2), ("t1", 2, 3), ("t1", 3, 4), ("t1", 4, 5)], id="1 to N"),
    pytest.param(4, [("t1", 1, 5), ("t2", 1, 21)], [("t1", 1, 5), ("t2", 1, 7), ("t2", 7, 14), ("t2", 14, 21)],
                 id="N skewed to M"),
    pytest.param(4, [("t1", 1, 1), ("t2", 1, 21)], [("t2", 1, 6), ("t2", 6, 11), ("t2", 11, 16), ("t2", 16, 21)],
                 id="SPARK-30656 empty ignored, rest split"),
    pytest.param(4, [("t1", 1, 2), ("t2", 1, 1001)],
                 [("t1", 1, 2), ("t2", 1, 334), ("t2", 334, 667), ("t2", 667, 1001)], id="SPARK-30656 very skewed"),
    pytest.param(1, [("t1", 1, 5), ("t2", 1, 21)], [("t1", 1, 5), ("t2", 1, 21)], id="SPARK-30656 fewer than N"),
    pytest.param(3, [("t1", 1, 11)], [("t1", 1, 4), ("t1", 4, 7), ("t1", 7, 11)], id="inexact multiple"),
    pytest.param(4, [("t1", 1, 5), ("t2", 1, 21), ("t3", 1, 1)],
                 [("t1", 1, 5), ("t2", 1, 7), ("t2", 7, 14), ("t2", 14, 21)], id="empty ranges ignored"),
    pytest.param(6, [("t1", 0, 10), ("t2", 0, 10), ("t3", 0, 1)],
                 [("t1", 0, 3), ("t1", 3, 6), ("t1", 6, 10), ("t2", 0, 3), ("t2", 3, 6), ("t2", 6, 10),
                  ("t3", 0, 1)], id="SPARK-28489 never drop offsets"),
    pytest.param(9, [("t1", 0, 10000), ("t2", 0, 15000), ("t3", 0, 20000)],
                 [("t1", 0, 5000), ("t1", 5000, 10000), ("t2", 0, 5000), ("t2", 5000, 10000),
                  ("t2", 10000, 15000), ("t3", 0, 5000), ("t3", 5000, 10000), ("t3", 10000, 15000),
                  ("t3", 15000, 20000)], id="SPARK-36576 0 unsplit 3 split"),
    pytest.param(6, [("t1", 0, 500), ("t2", 0, 12000), ("t3", 0, 15001)],
                 [("t1", 0, 500), ("t2", 0, 6000), ("t2", 6000, 12000), ("t3", 0, 5000), ("t3", 5000, 10000),
                  ("t3", 10000, 15001)], id="SPARK-36576 1 unsplit 2 split"),
    pytest.param(6, [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 10000)],
                 [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 2500), ("t3", 2500, 5000), ("t3", 5000, 7500),
                  ("t3", 7500, 10000)], id="SPARK-36576 2 unsplit 1 split"),
    pytest.param(4, [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 2)],
                 [("t1", 0, 1), ("t2", 0, 1), ("t3", 0, 1), ("t3", 1, 2)], id="SPARK-46798 split"),
]


@pytest.mark.parametrize(("min_partitions", "given_ranges", "expected"), SPARK_CASES)
def test_plan_ranges_spark_cases(min_partitions: int | None, given_ranges: list[tuple[str, int, int]],
                                 expected: list[tuple[str, int, int]]) -> None:
    start, end = ranges_of(*given_ranges)
    assert as_triples(plan_ranges(start, end, min_partitions=min_partitions)) == expected


def test_plan_ranges_rounds_half_up_like_java() -> None:
    # Shares 2.5 and 1.5 of 4: Java's Math.round gives 3 and 2 parts (Python's round would give 2 and 2).
    start, end = ranges_of(("a", 0, 5), ("b", 0, 3))
    assert as_triples(plan_ranges(start, end, min_partitions=4)) == [
        ("a", 0, 1), ("a", 1, 3), ("a", 3, 5), ("b", 0, 1), ("b", 1, 3)]


def test_plan_ranges_more_parts_than_offsets() -> None:
    # One offset cannot be split: the empty parts are dropped.
    assert plan_ranges({T0: 7}, {T0: 8}, min_partitions=5) == [OffsetRange("t", 0, 7, 8)]
    assert [r.size for r in plan_ranges({T0: 0}, {T0: 3}, min_partitions=10)] == [1, 1, 1]


@st.composite
def batches(draw: st.DrawFn) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int], int | None]:
    tps = draw(st.lists(partition_keys, max_size=12, unique=True))
    start: dict[tuple[str, int], int] = {}
    end: dict[tuple[str, int], int] = {}
    for tp in tps:
        start[tp] = draw(st.integers(0, 10**15))
        end[tp] = start[tp] + draw(st.one_of(st.integers(-5, 20), st.integers(0, 10**9)))
        if end[tp] < 0:
            end[tp] = 0
    return start, end, draw(st.one_of(st.none(), st.integers(1, 64)))


@given(batches())
def test_plan_ranges_cover_exactly(case: tuple[dict[tuple[str, int], int], dict[tuple[str, int], int],
                                              int | None]) -> None:
    start, end, min_partitions = case
    ranges = plan_ranges(start, end, min_partitions=min_partitions)
    assert ranges == sorted(ranges, key=lambda r: (r.topic, r.partition, r.start))
    assert all(r.size > 0 for r in ranges)
    by_partition: dict[tuple[str, int], list[OffsetRange]] = {}
    for r in ranges:
        by_partition.setdefault(r.topic_partition, []).append(r)
    # Exactly the partitions with data, each covered from start to end by contiguous parts.
    assert set(by_partition) == {tp for tp in end if end[tp] > start[tp]}
    for tp, parts in by_partition.items():
        assert parts[0].start == start[tp] and parts[-1].end == end[tp]
        assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    assert sum(r.size for r in ranges) == total_size(start, end)
    if min_partitions is None or min_partitions <= len(by_partition):
        assert len(ranges) == len(by_partition)
    else:
        assert len(ranges) >= len(by_partition)


def test_topic_changes_tell_deleted_recreated_and_backwards_partitions_apart() -> None:
    begin = {("a", 0): 10, ("a", 1): 5, ("b", 0): 7, ("c", 0): 3, ("d", 0): 9}
    changes = topic_changes(begin, {"a": "id-a", "b": "id-b", "c": "id-c"},
                            listed=[("a", 0), ("b", 0), ("c", 0), ("d", 0)],
                            ids={"a": "id-a", "b": "id-B", "c": "id-c"}, unsettled=[],
                            latest={("a", 0): 12, ("b", 0): 20, ("c", 0): 1, ("d", 0): 9})
    assert changes.deleted == {("a", 1): 5}
    assert changes.recreated == {("b", 0): 7}, "a new id, even past the old offset"
    assert changes.backwards == {("c", 0): (3, 1)}
    assert changes and "b-0 (read up to offset 7)" in changes.describe() and "c-0 from 3 to 1" in changes.describe()


def test_unsettled_topics_and_unknown_ids_conclude_nothing() -> None:
    begin = {("a", 0): 10, ("b", 0): 4}
    changes = topic_changes(begin, {}, listed=[("b", 0)], ids={"b": "x"}, unsettled=["a"], latest={("b", 0): 4})
    assert not changes
    assert not topic_changes(begin, {"a": "1"}, [("a", 0), ("b", 0)], {}, [], {("a", 0): 10, ("b", 0): 5})

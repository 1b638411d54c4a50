"""The KIP-848 server-side assignors (coordinator/group/assignors.py).

Cases named ``kafka_*`` are Kafka 4.3's own tests (group-coordinator's
UniformHomogeneousAssignmentBuilderTest, UniformHeterogeneousAssignmentBuilderTest
and RangeAssignorTest) with their inputs and expected outputs written out here.
Kafka's tests feed members in member-id order, as the module does.  Where
Kafka's outcome depends on the order in which it walked a hash set or map of
topic ids, the case gives its topics ids that sort (the module's topic order)
the way Kafka's run walked them; each such case says so.
"""

from __future__ import annotations

import base64
import itertools
import random
import uuid
from collections.abc import Mapping, Sequence

import pytest

from onceflow.coordinator.group.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    Assignor,
    MemberSpec,
    PartitionAssignorError,
    RangeAssignor,
    SubscriptionType,
    TopicSpec,
    UniformAssignor,
    kafka_uuid_order,
)

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
HET = SubscriptionType.HETEROGENEOUS
Result = dict[str, dict[uuid.UUID, frozenset[int]]]
Group = tuple[dict[str, MemberSpec], dict[uuid.UUID, TopicSpec]]


def kafka_uuid(text: str) -> uuid.UUID:
    """A topic id written as Kafka prints it (URL-safe base64 of the 16 bytes)."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


# The topic ids of Kafka's uniform-assignor tests.
T1 = kafka_uuid("T1-A4s3VTwiI5CTbEp6POw")
T2 = kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe")
T3 = kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa")
T4 = kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa")


def ordered_ids(*names: str) -> dict[str, uuid.UUID]:
    """Topic ids for ``names`` that sort in the order given."""
    return {name: uuid.UUID(int=i + 1) for i, name in enumerate(names)}


def member(subscribed: Sequence[uuid.UUID], assigned: Mapping[uuid.UUID, Sequence[int]] | None = None, instance_id: str | None = None) -> MemberSpec:
    return MemberSpec(frozenset(subscribed), {t: frozenset(ps) for t, ps in (assigned or {}).items()}, instance_id=instance_id)


def topic_specs(counts: Mapping[uuid.UUID, int]) -> dict[uuid.UUID, TopicSpec]:
    return {t: TopicSpec(f"topic-{t}", n) for t, n in counts.items()}


def expect(**assignment: Mapping[uuid.UUID, Sequence[int]]) -> Result:
    return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in assignment.items()}


def sizes(result: Result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in assignment.values()) for m, assignment in result.items()}


def owners(result: Result) -> dict[tuple[uuid.UUID, int], str]:
    return {(t, p): m for m, assignment in result.items() for t, ps in assignment.items() for p in ps}


def check_valid(members: Mapping[str, MemberSpec], specs: Mapping[uuid.UUID, TopicSpec], result: Result) -> None:
    """What every assignor guarantees: all members present, subscribed topics only, each partition exactly once."""
    assert set(result) == set(members)
    seen: set[tuple[uuid.UUID, int]] = set()
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert topic_id in members[member_id].subscribed_topic_ids and topic_id in specs
            assert partitions, "no empty topic entries"
            assert all(0 <= p < specs[topic_id].num_partitions for p in partitions)
            assert seen.isdisjoint((topic_id, p) for p in partitions)
            seen.update((topic_id, p) for p in partitions)
    subscribed = set().union(*(m.subscribed_topic_ids for m in members.values())) & specs.keys()
    assert seen == {(t, p) for t in subscribed for p in range(specs[t].num_partitions)}


def check_uniform_balance(members: Mapping[str, MemberSpec], specs: Mapping[uuid.UUID, TopicSpec], result: Result) -> None:
    """Homogeneous: sizes within one.  Otherwise no partition could move to a subscriber two or more lighter."""
    load = sizes(result)
    subscriptions = {m: spec.subscribed_topic_ids.intersection(specs) for m, spec in members.items()}
    if len(set(subscriptions.values())) <= 1:
        assert max(load.values(), default=0) - min(load.values(), default=0) <= 1
        return
    for (topic_id, _), owner in owners(result).items():
        for other, subscribed in subscriptions.items():
            if topic_id in subscribed:
                assert load[owner] - load[other] <= 1, (topic_id, owner, other, load)


# --- Kafka's UniformHomogeneousAssignmentBuilderTest --------------------------------------------


def test_kafka_homogeneous_one_member_no_subscription() -> None:
    assert UNIFORM.assign({"A": member([])}, topic_specs({T1: 3})) == {"A": {}}


def test_kafka_homogeneous_first_assignment_two_members_two_topics() -> None:
    # Kafka's HashSet walked topic3 before topic1.
    ids = ordered_ids("t3", "t1")
    t1, t3 = ids["t1"], ids["t3"]
    members = {"A": member([t1, t3]), "B": member([t1, t3])}
    specs = topic_specs({t1: 3, t3: 2})
    result = UNIFORM.assign(members, specs)
    assert result == expect(A={t3: [0, 1]}, B={t1: [0, 1, 2]})
    check_valid(members, specs, result)


def test_kafka_homogeneous_first_assignment_more_members_than_partitions() -> None:
    # The first member gives up its claim on an extra partition: the last two must take one each.
    members = {m: member([T3]) for m in "ABC"}
    result = UNIFORM.assign(members, topic_specs({T3: 2}))
    assert result == expect(A={}, B={T3: [0]}, C={T3: [1]})


def test_kafka_homogeneous_unbalanced_previous_assignment() -> None:
    # Kafka's test lists the current topics in the order topic1, topic2 (mkOrderedAssignment).
    members = {
        "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
        "B": member([T1, T2], {T1: [2], T2: [2]}),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 3, T2: 3}))
    assert result == expect(A={T1: [0, 1], T2: [0]}, B={T1: [2], T2: [1, 2]})


def test_kafka_homogeneous_partitions_added() -> None:
    # Kafka's HashSet walked topic2 before topic1 when listing the new partitions.
    ids = ordered_ids("t2", "t1")
    t1, t2 = ids["t1"], ids["t2"]
    members = {
        "A": member([t1, t2], {t1: [0, 2], t2: [0]}),
        "B": member([t1, t2], {t1: [1], t2: [1, 2]}),
    }
    result = UNIFORM.assign(members, topic_specs({t1: 6, t2: 5}))
    assert result == expect(A={t1: [0, 2], t2: [0, 3, 4]}, B={t1: [1, 3, 4, 5], t2: [1, 2]})


def test_kafka_homogeneous_member_added() -> None:
    # Kafka's test lists the current topics in the order topic1, topic2 (mkOrderedAssignment).
    members = {
        "A": member([T1, T2], {T1: [0, 2], T2: [0]}),
        "B": member([T1, T2], {T1: [1], T2: [1, 2]}),
        "C": member([T1, T2]),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 3, T2: 3}))
    assert result == expect(A={T1: [0, 2]}, B={T1: [1], T2: [1]}, C={T2: [0, 2]})


def test_kafka_homogeneous_member_removed() -> None:
    # Member C left; Kafka's HashSet walked topic2 before topic1 when listing its partitions.
    ids = ordered_ids("t2", "t1")
    t1, t2 = ids["t1"], ids["t2"]
    members = {
        "A": member([t1, t2], {t1: [0], t2: [0]}),
        "B": member([t1, t2], {t1: [1], t2: [1]}),
    }
    result = UNIFORM.assign(members, topic_specs({t1: 3, t2: 3}))
    assert result == expect(A={t1: [0], t2: [0, 2]}, B={t1: [1, 2], t2: [1]})


def test_kafka_homogeneous_subscription_removed() -> None:
    members = {
        "A": member([T2], {T1: [0], T2: [0]}),
        "B": member([T2], {T1: [1], T2: [1]}),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 2, T2: 2}))
    assert result == expect(A={T2: [0]}, B={T2: [1]})


def test_kafka_homogeneous_large_sample_is_valid_and_balanced() -> None:
    rng = random.Random(7)
    ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(100)]
    members = {f"member{i}": member(ids) for i in range(1, 50)}
    specs = topic_specs(dict.fromkeys(ids, 3))
    result = UNIFORM.assign(members, specs)
    check_valid(members, specs, result)
    check_uniform_balance(members, specs, result)


# --- Kafka's UniformHeterogeneousAssignmentBuilderTest ------------------------------------------
# (its GroupSpec hands the builder members sorted by id; topic order is the builder's own)


def test_kafka_heterogeneous_no_subscriptions() -> None:
    assert UNIFORM.assign({"A": member([]), "B": member([])}, topic_specs({T1: 3}), subscription_type=HET) == {"A": {}, "B": {}}


def test_kafka_heterogeneous_first_assignment_two_members_two_topics() -> None:
    members = {"A": member([T1, T3]), "B": member([T3])}
    result = UNIFORM.assign(members, topic_specs({T1: 3, T3: 6}))
    assert result == expect(A={T1: [0, 1, 2], T3: [4]}, B={T3: [0, 1, 2, 3, 5]})


def test_kafka_heterogeneous_first_assignment_more_members_than_partitions() -> None:
    members = {"A": member([T3]), "B": member([T3]), "C": member([T1])}
    result = UNIFORM.assign(members, topic_specs({T3: 1, T1: 2}))
    assert result == expect(A={T3: [0]}, B={}, C={T1: [0, 1]})


def test_kafka_heterogeneous_unbalanced_previous_assignment() -> None:
    members = {
        "A": member([T1], {T1: [0, 1, 2]}),
        "B": member([T1, T2], {T1: [3], T2: [0]}),
        "C": member([T1, T2, T3], {T1: [4, 5], T2: [1, 2, 3], T3: [0, 1, 2, 3]}),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 6, T2: 4, T3: 4}))
    assert result == expect(A={T1: [0, 1, 2, 5]}, B={T1: [3], T2: [0, 1, 2, 3]}, C={T1: [4], T3: [0, 1, 2, 3]})


def test_kafka_heterogeneous_partitions_added() -> None:
    members = {
        "A": member([T1, T3], {T1: [0, 1, 2, 3], T3: [0, 1]}),
        "B": member([T1, T2, T3, T4], {T2: [0, 1, 2], T4: [0, 1, 2]}),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 6, T2: 5, T3: 3, T4: 3}))
    assert result == expect(A={T1: [0, 1, 2, 3, 4, 5], T3: [0, 1, 2]}, B={T2: [0, 1, 2, 3, 4], T4: [0, 1, 2]})


def test_kafka_heterogeneous_member_and_partitions_added() -> None:
    members = {
        "A": member([T1], {T1: [0, 2], T2: [0]}),
        "B": member([T1, T2], {T1: [1], T2: [1, 2]}),
        "C": member([T1, T2]),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 6, T2: 7}))
    assert result == expect(A={T1: [0, 2, 3, 4, 5]}, B={T1: [1], T2: [1, 2, 6]}, C={T2: [0, 3, 4, 5]})


def test_kafka_heterogeneous_member_removed() -> None:
    members = {
        "A": member([T1, T3], {T1: [0, 1, 2], T3: [0, 1]}),
        "B": member([T2], {T2: [3, 4, 5, 6]}),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 3, T2: 8, T3: 3}))
    assert result == expect(A={T1: [0, 1, 2], T3: [0, 1, 2]}, B={T2: list(range(8))})


def test_kafka_heterogeneous_subscription_removed() -> None:
    members = {
        "A": member([T1], {T1: [0, 2], T2: [1, 3]}),
        "B": member([T1, T2], {T1: [1], T2: [0, 2, 4]}),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 3, T2: 5}))
    assert result == expect(A={T1: [0, 1, 2]}, B={T2: [0, 1, 2, 3, 4]})


def test_kafka_heterogeneous_topic_partitions_run_out() -> None:
    # Identical subscriptions, heterogeneous builder imposed (Kafka's test passes HETEROGENEOUS).
    members = {
        "A": member([T1, T2, T3], {T1: [0, 1], T2: [0, 1], T3: [0, 1]}),
        "B": member([T1, T2, T3]),
    }
    result = UNIFORM.assign(members, topic_specs({T1: 2, T2: 2, T3: 2}), subscription_type=HET)
    assert result == expect(A={T2: [0], T3: [0, 1]}, B={T1: [0, 1], T2: [1]})


def test_kafka_heterogeneous_one_member_without_subscriptions() -> None:
    result = UNIFORM.assign({"A": member([T1]), "B": member([])}, topic_specs({T1: 3}))
    assert result == expect(A={T1: [0, 1, 2]}, B={})


# --- Kafka's RangeAssignorTest --------------------------------------------------------------------


def test_kafka_range_one_member_no_topic() -> None:
    assert RANGE.assign({"A": member([])}, topic_specs({T1: 3})) == {"A": {}}


def test_kafka_range_two_members_two_topics_same_subscriptions() -> None:
    members = {"A": member([T1, T3]), "B": member([T1, T3])}
    result = RANGE.assign(members, topic_specs({T1: 3, T3: 2}))
    assert result == expect(A={T1: [0, 1], T3: [0]}, B={T1: [2], T3: [1]})


def test_kafka_range_three_members_different_subscriptions() -> None:
    members = {"A": member([T1, T2]), "B": member([T3]), "C": member([T2, T3])}
    result = RANGE.assign(members, topic_specs({T1: 3, T2: 3, T3: 2}))
    assert result == expect(A={T1: [0, 1, 2], T2: [0, 1]}, B={T3: [0]}, C={T2: [2], T3: [1]})


def test_kafka_range_more_members_than_partitions() -> None:
    members = {m: member([T1, T3]) for m in "ABC"}
    result = RANGE.assign(members, topic_specs({T1: 3, T3: 2}))
    assert result == expect(A={T1: [0], T3: [0]}, B={T1: [1], T3: [1]}, C={T1: [2]})


def test_kafka_range_static_membership() -> None:
    first = RANGE.assign({"A": member([T1], instance_id="instanceA"), "B": member([T1], instance_id="instanceB")}, topic_specs({T1: 3}))
    # A restarts as memberA1 (sorts after B by member id, not by instance id).
    again = RANGE.assign({"memberA1": member([T1], instance_id="instanceA"), "B": member([T1], instance_id="instanceB")}, topic_specs({T1: 3}))
    assert again["memberA1"] == first["A"] and again["B"] == first["B"]


def test_kafka_range_mixed_static_membership() -> None:
    specs = topic_specs({T1: 5})
    first = RANGE.assign({"A": member([T1], instance_id="instanceA"), "C": member([T1], instance_id="instanceC"), "B": member([T1])}, specs)
    again = RANGE.assign({"memberA1": member([T1], instance_id="instanceA"), "C": member([T1], instance_id="instanceC"), "B": member([T1])}, specs)
    assert (again["memberA1"], again["B"], again["C"]) == (first["A"], first["B"], first["C"])
    # Static members first, by instance id; then the dynamic ones.
    assert first == expect(A={T1: [0, 1]}, C={T1: [2, 3]}, B={T1: [4]})


def test_kafka_range_member_added_more_members_than_partitions() -> None:
    members = {
        "A": member([T1, T2], {T1: [0], T2: [0]}),
        "B": member([T1, T2], {T1: [1], T2: [1]}),
        "C": member([T1, T2]),
    }
    result = RANGE.assign(members, topic_specs({T1: 2, T2: 2}))
    assert result == expect(A={T1: [0], T2: [0]}, B={T1: [1], T2: [1]}, C={})


def test_kafka_range_partition_added() -> None:
    members = {"A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}), "B": member([T1, T2], {T1: [2], T2: [2]})}
    result = RANGE.assign(members, topic_specs({T1: 4, T2: 4}))
    assert result == expect(A={T1: [0, 1], T2: [0, 1]}, B={T1: [2, 3], T2: [2, 3]})


def test_kafka_range_member_added() -> None:
    members = {
        "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
        "B": member([T1, T2], {T1: [2], T2: [2]}),
        "C": member([T1, T2]),
    }
    result = RANGE.assign(members, topic_specs({T1: 3, T2: 3}))
    assert result == expect(A={T1: [0], T2: [0]}, B={T1: [1], T2: [1]}, C={T1: [2], T2: [2]})


def test_kafka_range_member_and_partition_added() -> None:
    members = {
        "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
        "B": member([T1, T2], {T1: [2], T2: [2]}),
        "C": member([T1]),
    }
    result = RANGE.assign(members, topic_specs({T1: 4, T2: 3}))
    assert result == expect(A={T1: [0, 1], T2: [0, 1]}, B={T1: [2], T2: [2]}, C={T1: [3]})


def test_kafka_range_member_removed() -> None:
    result = RANGE.assign({"B": member([T1, T2], {T1: [2], T2: [2]})}, topic_specs({T1: 3, T2: 3}))
    assert result == expect(B={T1: [0, 1, 2], T2: [0, 1, 2]})


def test_kafka_range_subscriptions_changed() -> None:
    members = {
        "A": member([T1], {T1: [0, 1, 2], T2: [0]}),
        "B": member([T1, T2, T3], {T2: [1]}),
        "C": member([T2], {T2: [2], T3: [0, 1]}),
    }
    result = RANGE.assign(members, topic_specs({T1: 3, T2: 3, T3: 2}))
    assert result == expect(A={T1: [0, 1]}, B={T1: [2], T2: [0, 1], T3: [0, 1]}, C={T2: [2]})


# --- the interface --------------------------------------------------------------------------------


def test_registry() -> None:
    assert DEFAULT_ASSIGNOR == "uniform"
    assert list(ASSIGNORS) == ["uniform", "range"]
    assert all(assignor.name == name for name, assignor in ASSIGNORS.items())
    implementations: list[Assignor] = [UniformAssignor(), RangeAssignor()]
    assert [a.name for a in implementations] == ["uniform", "range"]


def test_topic_spec_defaults() -> None:
    assert TopicSpec("t", 3).partition_racks == {}
    assert MemberSpec(frozenset(), {}).rack_id is None


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_empty_group(name: str) -> None:
    assert ASSIGNORS[name].assign({}, topic_specs({T1: 3})) == {}


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_negative_partition_count_is_refused(name: str) -> None:
    with pytest.raises(PartitionAssignorError):
        ASSIGNORS[name].assign({"A": member([T1])}, topic_specs({T1: -1}))


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_subscribed_topics_missing_from_the_metadata_are_ignored(name: str) -> None:
    # Kafka throws for them; the coordinator passes existing topics only, so they get nothing.
    members = {"A": member([T1, T2]), "B": member([T2])}
    assert ASSIGNORS[name].assign(members, topic_specs({T1: 2})) == expect(A={T1: [0, 1]}, B={})


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_topics_nobody_subscribes_to_stay_unassigned(name: str) -> None:
    members = {"A": member([T1], {T2: [0, 1]}), "B": member([T1])}
    result = ASSIGNORS[name].assign(members, topic_specs({T1: 2, T2: 2, T3: 4}))
    assert not {T2, T3} & {t for assignment in result.values() for t in assignment}
    assert sizes(result) == {"A": 1, "B": 1}


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_topic_without_partitions(name: str) -> None:
    members = {"A": member([T1, T2]), "B": member([T1])}
    result = ASSIGNORS[name].assign(members, topic_specs({T1: 0, T2: 3}))
    check_valid(members, topic_specs({T1: 0, T2: 3}), result)
    assert result == expect(A={T2: [0, 1, 2]}, B={})


def test_inconsistent_current_assignment_is_cleaned() -> None:
    # Both claim T1-0 (A, first by member id, keeps it); 7 is out of range; T4 is gone.
    members = {
        "A": member([T1], {T1: [0, 7], T4: [0]}),
        "B": member([T1], {T1: [0, 1]}),
    }
    specs = topic_specs({T1: 2})
    for subscription_type in (None, HET):
        result = UNIFORM.assign(members, specs, subscription_type=subscription_type)
        check_valid(members, specs, result)
        assert result == expect(A={T1: [0]}, B={T1: [1]})


def test_kafka_uuid_order_is_signed() -> None:
    negative = uuid.UUID("80000000-0000-0000-0000-000000000000")  # most significant bits < 0 in Java
    positive = uuid.UUID("7fffffff-ffff-ffff-ffff-ffffffffffff")
    assert kafka_uuid_order(negative) < kafka_uuid_order(uuid.UUID(int=0)) < kafka_uuid_order(positive)
    assert sorted([T3, T1, T2], key=kafka_uuid_order) == [T1, T2, T3]


# --- uniform: balance and stickiness ------------------------------------------------------------


@pytest.mark.parametrize(("num_members", "partitions"), [(1, [5]), (3, [3, 4]), (4, [1, 1]), (5, [7, 11, 2]), (7, [100])])
def test_uniform_homogeneous_first_assignment_is_balanced(num_members: int, partitions: list[int]) -> None:
    ids = [uuid.UUID(int=i + 1) for i in range(len(partitions))]
    members = {f"m{i}": member(ids) for i in range(num_members)}
    specs = topic_specs(dict(zip(ids, partitions, strict=True)))
    result = UNIFORM.assign(members, specs)
    check_valid(members, specs, result)
    quota, extra = divmod(sum(partitions), num_members)
    assert sorted(sizes(result).values()) == [quota] * (num_members - extra) + [quota + 1] * extra


def test_uniform_homogeneous_member_added_moves_only_what_it_gets() -> None:
    ids = [uuid.UUID(int=i + 1) for i in range(3)]
    specs = topic_specs(dict(zip(ids, [5, 7, 4], strict=True)))
    members = {f"m{i}": member(ids) for i in range(4)}
    before = UNIFORM.assign(members, specs)
    grown = {m: member(ids, before[m]) for m in members} | {"m9": member(ids)}
    after = UNIFORM.assign(grown, specs)
    check_valid(grown, specs, after)
    check_uniform_balance(grown, specs, after)
    moved = {tp for tp, owner in owners(after).items() if owners(before).get(tp) != owner}
    assert moved == {tp for tp, owner in owners(after).items() if owner == "m9"}
    assert len(moved) == 16 // 5
    for m in members:  # the others only lose partitions
        assert all(after[m].get(t, frozenset()) <= ps for t, ps in before[m].items())


def test_uniform_member_removed_keeps_the_others_partitions() -> None:
    ids = [uuid.UUID(int=i + 1) for i in range(3)]
    specs = topic_specs(dict(zip(ids, [5, 7, 4], strict=True)))
    members = {f"m{i}": member(ids) for i in range(5)}
    before = UNIFORM.assign(members, specs)
    for gone in members:
        rest = {m: member(ids, before[m]) for m in members if m != gone}
        after = UNIFORM.assign(rest, specs)
        check_uniform_balance(rest, specs, after)
        for m in rest:
            assert all(ps <= after[m].get(t, frozenset()) for t, ps in before[m].items()), (gone, m)


def test_uniform_heterogeneous_subscriptions() -> None:
    a, b, c = (uuid.UUID(int=i) for i in (1, 2, 3))
    members = {"x": member([a]), "y": member([a, b]), "z": member([b, c])}
    specs = topic_specs({a: 6, b: 6, c: 3})
    result = UNIFORM.assign(members, specs)
    check_valid(members, specs, result)
    check_uniform_balance(members, specs, result)
    # Overlapping subscriptions: each topic's subscribers are within one, the group is not
    # (5, 5, 5 exists).  This is the shape of Kafka's own example (9, 10, 11) in balanceTopics.
    assert sizes(result) == {"x": 4, "y": 5, "z": 6}


def test_uniform_heterogeneous_member_added_keeps_the_rest_sticky() -> None:
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    specs = topic_specs({a: 8, b: 4})
    members = {"x": member([a]), "y": member([a, b])}
    before = UNIFORM.assign(members, specs)
    grown = {m: member(list(members[m].subscribed_topic_ids), before[m]) for m in members} | {"z": member([a, b])}
    after = UNIFORM.assign(grown, specs)
    check_valid(grown, specs, after)
    check_uniform_balance(grown, specs, after)
    for m in members:  # the existing members only give partitions up
        assert all(after[m].get(t, frozenset()) <= ps for t, ps in before[m].items())


@pytest.mark.parametrize("subscription_type", [None, HET])
def test_uniform_reassigning_its_own_result_changes_nothing(subscription_type: SubscriptionType | None) -> None:
    # Kafka's CommonAssignorTests.testAssignmentReuse and testReassignmentStickiness, with member orders shuffled.
    ids = [uuid.UUID(int=i + 1) for i in range(3)]
    specs = topic_specs(dict(zip(ids, [2, 5, 7], strict=True)))
    members = {m: member(ids) for m in "ABC"}
    first = UNIFORM.assign(members, specs, subscription_type=subscription_type)
    for order in itertools.permutations("ABC"):
        again = UNIFORM.assign({m: member(ids, first[m]) for m in order}, specs, subscription_type=subscription_type)
        assert again == first


@pytest.mark.parametrize("subscription_type", [None, HET])
def test_uniform_static_member_replacement(subscription_type: SubscriptionType | None) -> None:
    # The coordinator hands the new member id the old one's target assignment: nothing moves.
    ids = [uuid.UUID(int=i + 1) for i in range(3)]
    specs = topic_specs(dict(zip(ids, [2, 5, 7], strict=True)))
    members = {m: member(ids, instance_id=f"i-{m}") for m in "ABC"}
    first = UNIFORM.assign(members, specs, subscription_type=subscription_type)
    replaced = {("Z" if m == "A" else m): member(ids, first[m], instance_id=f"i-{m}") for m in "ABC"}
    again = UNIFORM.assign(replaced, specs, subscription_type=subscription_type)
    assert again["Z"] == first["A"] and again["B"] == first["B"] and again["C"] == first["C"]


def test_homogeneous_verdict_contradicted_by_the_ids_is_ignored() -> None:
    members = {"A": member([T1]), "B": member([T2])}
    specs = topic_specs({T1: 2, T2: 2})
    result = UNIFORM.assign(members, specs, subscription_type=SubscriptionType.HOMOGENEOUS)
    assert result == expect(A={T1: [0, 1]}, B={T2: [0, 1]})


# --- range: contiguity and co-partitioning --------------------------------------------------------


def test_range_copartitions_topics_with_equal_partition_counts() -> None:
    ids = [uuid.UUID(int=i + 1) for i in range(3)]
    members = {f"m{i}": member(ids) for i in range(4)}
    result = RANGE.assign(members, topic_specs(dict.fromkeys(ids, 10)))
    for assignment in result.values():
        assert len({assignment[t] for t in ids}) == 1  # the same partition numbers of every topic
    assert [sorted(result[f"m{i}"][ids[0]]) for i in range(4)] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


def test_range_ignores_the_current_assignment() -> None:
    members = {"A": member([T1], {T1: [2]}), "B": member([T1], {T1: [0, 1]})}
    assert RANGE.assign(members, topic_specs({T1: 3})) == expect(A={T1: [0, 1]}, B={T1: [2]})


def check_range(members: Mapping[str, MemberSpec], specs: Mapping[uuid.UUID, TopicSpec], result: Result) -> None:
    """Per topic: its subscribers, static ones first, hold consecutive ranges of sizes n//k (+1 for the first n%k)."""
    check_valid(members, specs, result)

    def order(m: str) -> tuple[int, str, str]:
        instance = members[m].instance_id
        return (0, instance, m) if instance is not None else (1, m, "")

    for topic_id, spec in specs.items():
        subscribers = sorted((m for m in members if topic_id in members[m].subscribed_topic_ids), key=order)
        if not subscribers:
            continue
        quota, extra = divmod(spec.num_partitions, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            end = start + quota + (1 if i < extra else 0)
            assert result[m].get(topic_id, frozenset()) == frozenset(range(start, end)), (topic_id, m)
            start = end


# --- properties over many shapes ----------------------------------------------------------------


def random_group(rng: random.Random) -> Group:
    topic_ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(rng.randint(0, 5))]
    specs = topic_specs({t: rng.randint(0, 12) for t in topic_ids})
    homogeneous = rng.random() < 0.5
    shared = rng.sample(topic_ids, rng.randint(0, len(topic_ids)))
    members: dict[str, MemberSpec] = {}
    for i in range(rng.randint(0, 7)):
        subscribed = shared if homogeneous else rng.sample(topic_ids, rng.randint(0, len(topic_ids)))
        instance = f"inst-{rng.randint(0, 99)}-{i}" if rng.random() < 0.3 else None
        members[f"member-{rng.randint(0, 9999)}-{i}"] = member(subscribed, instance_id=instance)
    return members, specs


def previous_round(rng: random.Random, members: dict[str, MemberSpec], specs: dict[uuid.UUID, TopicSpec], result: Result) -> dict[str, MemberSpec]:
    """The group after a change: members leave and join, subscriptions change, current assignment = result."""
    changed: dict[str, MemberSpec] = {}
    topic_ids = list(specs)
    for m, spec in members.items():
        if rng.random() < 0.2:
            continue  # left
        subscribed = spec.subscribed_topic_ids
        if rng.random() < 0.2:
            subscribed = frozenset(rng.sample(topic_ids, rng.randint(0, len(topic_ids))))
        changed[m] = MemberSpec(subscribed, result[m], instance_id=spec.instance_id)
    for _ in range(rng.randint(0, 2)):
        changed[f"joiner-{rng.getrandbits(32):08x}"] = member(rng.sample(topic_ids, rng.randint(0, len(topic_ids))))
    return changed


def shuffled(rng: random.Random, members: Mapping[str, MemberSpec], specs: Mapping[uuid.UUID, TopicSpec]) -> Group:
    """The same group with every mapping and set built in another order."""
    member_items = list(members.items())
    rng.shuffle(member_items)
    reshuffled: dict[str, MemberSpec] = {}
    for m, spec in member_items:
        assigned = list(spec.assigned.items())
        rng.shuffle(assigned)
        subscribed = list(spec.subscribed_topic_ids)
        rng.shuffle(subscribed)
        reshuffled[m] = MemberSpec(frozenset(subscribed), dict(assigned), instance_id=spec.instance_id)
    spec_items = list(specs.items())
    rng.shuffle(spec_items)
    return reshuffled, dict(spec_items)


def check_homogeneous_stickiness(members: Mapping[str, MemberSpec], specs: Mapping[uuid.UUID, TopicSpec], result: Result) -> None:
    """Homogeneous uniform: each member keeps its current partitions up to the minimum quota."""
    subscriptions = {spec.subscribed_topic_ids.intersection(specs) for spec in members.values()}
    if len(subscriptions) != 1:
        return
    subscribed = subscriptions.pop()
    quota = sum(specs[t].num_partitions for t in subscribed) // len(members)
    held = owners({m: {t: ps for t, ps in spec.assigned.items() if t in subscribed} for m, spec in members.items()})
    for m in members:
        had = {tp for tp, owner in held.items() if owner == m}
        kept = {tp for tp, owner in owners(result).items() if owner == m} & had
        assert len(kept) >= min(len(had), quota), (m, had, kept)


@pytest.mark.parametrize("seed", range(300))
def test_properties_over_random_groups(seed: int) -> None:
    rng = random.Random(seed)
    members, specs = random_group(rng)
    for _round in range(4):
        uniform = UNIFORM.assign(members, specs)
        check_valid(members, specs, uniform)
        check_uniform_balance(members, specs, uniform)
        check_homogeneous_stickiness(members, specs, uniform)

        heterogeneous = UNIFORM.assign(members, specs, subscription_type=HET)
        check_valid(members, specs, heterogeneous)
        check_uniform_balance(members, specs, heterogeneous)

        ranges = RANGE.assign(members, specs)
        check_range(members, specs, ranges)

        for assignor, result in ((UNIFORM, uniform), (RANGE, ranges)):
            again_members, again_specs = shuffled(rng, members, specs)
            assert assignor.assign(again_members, again_specs) == result, "deterministic whatever the dict orders"
        # The next round starts from this one's uniform assignment, after members come, go and resubscribe.
        members = previous_round(rng, members, specs, uniform)

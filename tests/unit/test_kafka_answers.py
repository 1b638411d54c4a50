"""Answers the reference suite (issue 10, tests/reference/test_scenarios_groups*.py and
test_scenarios_admin*.py / test_scenarios_bad_input*.py) found different from Apache Kafka's,
pinned here without a broker: the KIP-511 fallback, DescribeGroups v6 and authorized operations,
the client host of a group member, and DescribeConfigs synonyms."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_configs.v4 import response as describe_configs_v4
from kio.schema.describe_groups.v5 import response as describe_groups_v5
from kio.schema.describe_groups.v6 import response as describe_groups_v6

from onceflow.broker.handlers.admin import _topic_synonyms
from onceflow.broker.handlers.groups import _described
from onceflow.broker.handlers.metadata import unknown_api_versions_response
from onceflow.config import BrokerConfig
from onceflow.coordinator.group.types import GroupDescription
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode, InvalidRequest
from onceflow.protocol.framing import UnknownApiVersions, parse_request
from tests.support.wire import encode_request


def test_the_kip_511_fallback_lists_api_versions_alone() -> None:
    response = unknown_api_versions_response()
    assert response.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(apis.API_VERSIONS, 0, 4)]


def test_an_unknown_api_versions_version_still_needs_a_whole_flexible_header() -> None:
    frame = bytearray(encode_request(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 42)[4:])
    struct.pack_into(">h", frame, 2, 77)
    assert parse_request(bytes(frame)) == UnknownApiVersions(42, 77)
    # api key, version, correlation id, client id: no tagged fields -- Kafka closes the connection.
    with pytest.raises(InvalidRequest):
        parse_request(struct.pack(">hhih", 18, 5, 7, -1))
    assert parse_request(struct.pack(">hhih", 18, 5, 7, -1) + b"\x00") == UnknownApiVersions(7, 5)


def test_describe_groups_v6_reports_an_unknown_group_as_not_found() -> None:
    absent = GroupDescription(group_id="g", error=ErrorCode.none)  # the coordinator's answer: Dead
    old = _described(describe_groups_v5, absent, 5, include_operations=False)
    assert (old.error_code, old.group_state, old.authorized_operations) == (ErrorCode.none, "Dead", -2147483648)
    new = _described(describe_groups_v6, absent, 6, include_operations=False)
    assert (new.error_code, new.error_message, new.group_state) == (ErrorCode.group_id_not_found, "Group g not found.", "Dead")
    loading = GroupDescription(group_id="g", error=ErrorCode.coordinator_load_in_progress, state="")
    assert _described(describe_groups_v6, loading, 6, include_operations=True).error_code == ErrorCode.coordinator_load_in_progress


def test_describe_groups_authorized_operations_are_every_group_operation() -> None:
    stable = GroupDescription(group_id="g", error=ErrorCode.none, state="Stable", protocol_type="consumer", protocol="range")
    # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: what Kafka without an authorizer answers.
    assert _described(describe_groups_v5, stable, 5, include_operations=True).authorized_operations == 3400
    assert _described(describe_groups_v5, stable, 5, include_operations=False).authorized_operations == -2147483648


def test_retention_and_roll_have_no_broker_synonym_unless_set() -> None:
    def synonyms(config: BrokerConfig, overrides: dict[str, object], key: str) -> list[tuple[str, str | None, int]]:
        broker = SimpleNamespace(config=config)
        return [(s.name, s.value, s.source) for s in _topic_synonyms(describe_configs_v4, broker, overrides, key)]  # type: ignore[arg-type]

    defaults = BrokerConfig()
    assert synonyms(defaults, {}, "retention.ms") == []
    assert synonyms(defaults, {"segment.ms": 100000}, "segment.ms") == [("segment.ms", "100000", 1)]
    assert synonyms(defaults, {}, "cleanup.policy") == [("log.cleanup.policy", "delete", 5)]
    assert synonyms(BrokerConfig({"log.retention.hours": "1"}), {}, "retention.ms") == []
    assert synonyms(BrokerConfig({"log.retention.ms": "5000"}), {}, "retention.ms") == [("log.retention.ms", "5000", 4)]

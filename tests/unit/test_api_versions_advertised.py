"""What ApiVersions advertises against what the broker serves (issue 10, section 4: found by the
Java client's version check, tests/reference/test_java_client.py): Kafka 4 advertises Produce
from v0 (KAFKA-18659, for librdkafka's compression check) while refusing v0-2; so does Onceflow."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from onceflow.broker.handlers.metadata import handle_api_versions
from onceflow.config import BrokerConfig
from onceflow.protocol import apis
from onceflow.protocol.errors import UnsupportedApi
from onceflow.protocol.framing import Request, parse_request
from tests.support.wire import encode_request


def test_produce_is_advertised_from_v0_as_kafka_4_does() -> None:
    frame = encode_request(ApiVersionsRequest(client_software_name="test", client_software_version="1"), 1)[4:]
    request = parse_request(frame)
    assert isinstance(request, Request)
    response = handle_api_versions(SimpleNamespace(config=BrokerConfig({})), request,  # type: ignore[arg-type]
                                   SimpleNamespace(peer="test"))
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised[apis.PRODUCE] == (0, apis.max_version(apis.PRODUCE))
    # Every other API is advertised exactly as served.
    assert {k: v for k, v in advertised.items() if k != apis.PRODUCE} \
        == {k: v for k, v in apis.SUPPORTED.items() if k != apis.PRODUCE}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_is_still_refused(version: int) -> None:
    # api key, version, correlation id, client id, then a v0-2 body (acks, timeout, no topics):
    # the server closes the connection on UnsupportedApi, as Kafka 4.3.1 does.
    frame = struct.pack(">hhih", apis.PRODUCE, version, 7, 1) + b"x" + struct.pack(">hii", 1, 1000, 0)
    with pytest.raises(UnsupportedApi):
        parse_request(frame)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_transaction_version_is_finalized_at_the_setting(level: int) -> None:
    """KIP-584 features: a client sees transactions v2 (KIP-890 part 2) when 2 is finalized.  As
    Kafka, ApiVersions v3 omits a feature whose lowest level is 0 from the supported list, v4 lists
    it, and a feature at level 0 is not finalized.  ``group.version`` 1 (the KIP-848 consumer
    protocol) is always finalized, as Kafka 4.3.1 formats it."""
    from kio.schema.api_versions.v4.request import ApiVersionsRequest as V4

    config = SimpleNamespace(config=BrokerConfig({"transaction.version": level}))
    for body, listed in ((ApiVersionsRequest(client_software_name="t", client_software_version="1"), False),
                         (V4(client_software_name="t", client_software_version="1"), True)):
        request = parse_request(encode_request(body, 1)[4:])
        assert isinstance(request, Request)
        response = handle_api_versions(config, request, SimpleNamespace(peer="test"))  # type: ignore[arg-type]
        supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
        assert supported == ({"group.version": (0, 1), "transaction.version": (0, 2)} if listed else {})
        finalized = {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}
        assert finalized == {"group.version": (1, 1), **({"transaction.version": (level, level)} if level else {})}
        assert response.finalized_features_epoch >= 0

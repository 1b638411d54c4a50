"""Configuration: Kafka's names and defaults, properties files, overrides, topic fallbacks."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from onceflow.config import (
    ADVERTISED_LISTENERS,
    BROKER_CONFIGS,
    BrokerConfig,
    ConfigError,
    TopicConfig,
    kafka_broker_config_names,
    parse_endpoints,
    parse_properties,
    validate_topic_configs,
)


def test_kafka_defaults() -> None:
    cfg = BrokerConfig()
    assert cfg["num.partitions"] == 1
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["offsets.topic.num.partitions"] == 50
    assert cfg["group.initial.rebalance.delay.ms"] == 3000
    assert cfg.log_retention_ms == 168 * 3_600_000
    assert cfg["log.segment.bytes"] == 1073741824


def test_properties_file_then_overrides(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# comment\nnum.partitions=3\nlog.retention.minutes : 5\nlisteners=PLAINTEXT://:9092\n"
                     "log.cleanup.policy=delete,\\\n  compact\n")
    cfg = BrokerConfig.load(props, ["num.partitions=4"])
    assert cfg["num.partitions"] == 4
    assert cfg.log_retention_ms == 300_000
    assert cfg["log.cleanup.policy"] == ["delete", "compact"]
    assert not cfg.is_default("num.partitions") and cfg.is_default("message.max.bytes")


def test_bad_values_are_refused() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig({"num.partitions": "zero"})
    with pytest.raises(ConfigError):
        BrokerConfig({"num.partitions": "0"})
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, ["novalue"])
    with pytest.raises(ConfigError):
        validate_topic_configs({"cleanup.policy": "shred"})
    with pytest.raises(ConfigError):
        validate_topic_configs({"no.such.key": "1"})


def test_topic_configs_fall_back_to_broker_synonyms() -> None:
    broker = BrokerConfig({"log.retention.ms": "1234", "log.segment.bytes": "4096"})
    topic = TopicConfig(validate_topic_configs({"segment.bytes": "2048"}), broker)
    assert topic.retention_ms == 1234
    assert topic.segment_bytes == 2048
    assert topic.max_message_bytes == 1048588
    assert topic.delete_enabled and not topic.compact_enabled


def test_parse_properties_forms() -> None:
    assert parse_properties("a=1\nb: 2\nc 3\n! x\nd=\n") == {"a": "1", "b": "2", "c": "3", "d": ""}


#: Each line of a .properties file and what java.util.Properties.load (Java 17, as Kafka's
#: Utils.loadProps calls it) makes of it, checked with a small Java program printing the map.
JAVA_PROPERTIES_CASES = [
    pytest.param("log.dirs=C:\\\\kafka\\\\logs\n", {"log.dirs": "C:\\kafka\\logs"}, id="escaped-backslashes"),
    pytest.param("a\\=b=c\n", {"a=b": "c"}, id="escaped-separator-in-key"),
    pytest.param("colon\\:key:z\n", {"colon:key": "z"}, id="escaped-colon-in-key"),
    pytest.param("k=\\u0041x\n", {"k": "Ax"}, id="unicode-escape"),
    pytest.param("cont=one,\\\n     two\n", {"cont": "one,two"}, id="continuation-drops-leading-whitespace"),
    pytest.param("key value\n", {"key": "value"}, id="whitespace-separator"),
    pytest.param("k2\\ with\\ space = x\n", {"k2 with space": "x"}, id="escaped-spaces-in-key"),
    pytest.param("tabs\t =\t y\n", {"tabs": "y"}, id="tabs-around-separator"),
    pytest.param(" spaced   :  v  \n", {"spaced": "v  "}, id="trailing-whitespace-kept"),
    pytest.param("  # comment\n! bang\nempty\n", {"empty": ""}, id="comments-and-a-key-alone"),
    pytest.param("trail=a\\\nlast=\\", {"trail": "alast="}, id="continuation-joins-the-next-line"),
    pytest.param("x=1\nx=2\n", {"x": "2"}, id="last-repeat-wins"),
]


@pytest.mark.parametrize(("text", "java"), JAVA_PROPERTIES_CASES)
def test_parse_properties_reads_as_java_does(text: str, java: dict[str, str]) -> None:
    assert parse_properties(text) == java


def test_parse_properties_refuses_a_malformed_unicode_escape() -> None:
    with pytest.raises(ConfigError, match=r"invalid \\u escape '\\\\uZZ'"):
        parse_properties("x=\\uZZ\n")


def test_a_properties_file_with_windows_paths_and_escapes(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("log.dirs=C:\\\\kafka\\\\logs\nnum.partitions 3\nsuper.users=User:\\u0041dmin\n"
                     "log.cleanup.policy=delete,\\\n    compact\n")
    cfg = BrokerConfig.load(props)
    assert cfg["num.partitions"] == 3
    assert cfg["super.users"] == "User:Admin"
    assert cfg["log.cleanup.policy"] == ["delete", "compact"]


def test_listeners_and_advertised_listeners_are_named_endpoints() -> None:
    assert BrokerConfig()[ADVERTISED_LISTENERS] is None  # Kafka's default: advertise the listen address
    cfg = BrokerConfig({"advertised.listeners": "SSL://h:9093, PLAINTEXT://proxy.local:19092"})
    assert parse_endpoints(cfg[ADVERTISED_LISTENERS] or []) == {"SSL": ("h", 9093), "PLAINTEXT": ("proxy.local", 19092)}
    assert parse_endpoints(["plaintext://[::1]:9092", "SASL_SSL://:0"]) == {"PLAINTEXT": ("::1", 9092), "SASL_SSL": ("", 0)}
    for bad in ("proxy:19092", "PLAINTEXT://proxy", "PLAINTEXT://proxy:65536", "PLAINTEXT://a:1,PLAINTEXT://b:2"):
        with pytest.raises(ConfigError, match=r"advertised\.listeners"):
            BrokerConfig({"advertised.listeners": bad})
        with pytest.raises(ConfigError, match=r"listeners"):
            BrokerConfig({"listeners": bad})


def test_per_listener_settings_override_the_broker_wide_ones() -> None:
    cfg = BrokerConfig({"ssl.client.auth": "requested", "listener.name.internal.ssl.client.auth": "required",
                        "listener.name.SASL_SSL.scram-sha-256.sasl.jaas.config": "x required;"})
    assert cfg.for_listener("INTERNAL", "ssl.client.auth") == "required"
    assert cfg.for_listener("external", "ssl.client.auth") == "requested"
    assert cfg.for_listener("sasl_ssl", "scram-sha-256.sasl.jaas.config") == "x required;"
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        BrokerConfig({"listener.name.a.ssl.client.auth": "sometimes"})
    assert cfg.is_sensitive("ssl.key.password") and not cfg.is_sensitive("ssl.client.auth")


def test_kip848_timeouts_are_held_within_their_bounds_as_kafka_holds_them() -> None:
    config = BrokerConfig({"group.consumer.min.heartbeat.interval.ms": 500, "group.consumer.heartbeat.interval.ms": 500})
    assert config["group.consumer.heartbeat.interval.ms"] == 500
    with pytest.raises(ConfigError, match="group.consumer.heartbeat.interval.ms must be greater than or equal to "
                                          "group.consumer.min.heartbeat.interval.ms"):
        BrokerConfig({"group.consumer.heartbeat.interval.ms": 100})
    with pytest.raises(ConfigError, match="group.consumer.session.timeout.ms must be less than or equal to "
                                          "group.consumer.max.session.timeout.ms"):
        config.update({"group.consumer.session.timeout.ms": 70_000})
    assert config["group.consumer.session.timeout.ms"] == 45_000, "a refused update changes nothing"


@pytest.mark.parametrize(("content", "what"), [
    pytest.param(b"num.partitions=3\x00\x00\x01", "contains NUL bytes (the first at byte 16)", id="nul-bytes"),
    pytest.param("num.partitions=3\n".encode("utf-16"), "contains NUL bytes", id="utf-16"),
    pytest.param(b"\x1f\x8b\x08 gzip-like", "contains control byte 0x1f at byte 0", id="control-bytes"),
])
def test_a_file_that_is_not_text_is_refused_in_one_line_naming_it(tmp_path: Path, content: bytes, what: str) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.load(path)
    message = str(refused.value)
    assert message.startswith(f"not a .properties file: {path} {what}")
    assert "\n" not in message


def test_a_file_that_cannot_be_read_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cannot read .*missing\.properties: No such file or directory$"):
        BrokerConfig.load(tmp_path / "missing.properties")
    with pytest.raises(ConfigError, match=r"^cannot read .*: Is a directory$"):
        BrokerConfig.load(tmp_path)
    bad_escape = tmp_path / "bad.properties"
    bad_escape.write_text("x=\\u00\n")
    with pytest.raises(ConfigError, match=r"bad\.properties: invalid \\u escape"):
        BrokerConfig.load(bad_escape)


def test_latin1_bytes_are_read_as_java_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"super.users=User:J\xfcrgen\n")  # ISO-8859-1, not UTF-8
    assert BrokerConfig.load(path)["super.users"] == "User:J\u00fcrgen"


def test_an_unreadable_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    # An OSError of the kind a permission problem gives (root reads any mode, so not chmod): a
    # path through a plain file.
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(ConfigError, match=r"^cannot read .*plain/server\.properties: Not a directory$"):
        BrokerConfig.load(plain / "server.properties")


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "onceflow.config" and r.levelno == logging.WARNING]


def test_an_unknown_setting_warns_in_kafkas_words_with_a_did_you_mean(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="onceflow.config")
    cfg = BrokerConfig.load(None, ["foo.bar=1", "num.partitons=3"])
    assert _warnings(caplog) == [
        "The configuration 'foo.bar' was supplied but isn't a known config.",
        "The configuration 'num.partitons' was supplied but isn't a known config (did you mean num.partitions?)",
    ]
    assert cfg["num.partitions"] == 1, "a typo changes nothing"
    assert set(cfg.unknown) == {"foo.bar", "num.partitons"}


def test_a_line_of_brackets_is_a_key_and_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "server.properties"
    path.write_text("[[[\n")
    assert parse_properties("[[[\n") == {"[[[": ""}  # Java: the key "[[[" with an empty value
    BrokerConfig.load(path)
    assert _warnings(caplog) == ["The configuration '[[[' was supplied but isn't a known config."]


def test_a_kafka_setting_onceflow_ignores_is_info_not_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="onceflow.config")
    cfg = BrokerConfig({"num.network.threads": "3", "log.dirs": "/var/lib/kafka"})
    assert _warnings(caplog) == [] and cfg.unknown == {}
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["ignoring configuration num.network.threads: Onceflow does not use it",
                     "ignoring configuration log.dirs: Onceflow does not use it"]


def test_no_name_kafka_knows_warns(caplog: pytest.LogCaptureFixture) -> None:
    kafka_only = kafka_broker_config_names() - BROKER_CONFIGS.keys()
    BrokerConfig(dict.fromkeys(kafka_only, "x"))
    BrokerConfig({"listener.name.sasl_ssl.ssl.endpoint.identification.algorithm": "",
                  "listener.name.sasl_ssl.plain.sasl.server.callback.handler.class": "com.example.Users",
                  "listener.name.sasl_ssl.scram-sha-256.connections.max.reauth.ms": "60000",
                  "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
                  "rsm.config.bucket": "b", "rlmm.config.remote.log.metadata.topic.replication.factor": "1"})
    assert _warnings(caplog) == []


def test_the_kafka_list_is_kafkas_broker_configs() -> None:
    names = kafka_broker_config_names()
    assert len(names) > 300 and {"num.network.threads", "log.dirs", "process.roles", "num.partitions"} <= names
    # Onceflow's names are Kafka's but for its own settings, and for the authorizer's and JAAS's,
    # which Kafka reads outside its ConfigDef: a misspelt Kafka name in the table would show here.
    assert BROKER_CONFIGS.keys() - names == {"metrics.port", "console.allow.abort", "group.version", "transaction.version",
                                             "super.users", "allow.everyone.if.no.acl.found", "java.security.auth.login.config"}


def test_a_per_listener_typo_warns_with_the_listener_prefix(caplog: pytest.LogCaptureFixture) -> None:
    BrokerConfig({"listener.name.sasl_ssl.ssl.keystore.locaton": "/k.pem",
                  "listener.name.sasl_ssl.scram-sha-256.sasl.jass.config": "x required;"})
    assert _warnings(caplog) == [
        "The configuration 'listener.name.sasl_ssl.ssl.keystore.locaton' was supplied but isn't a known config "
        "(did you mean listener.name.sasl_ssl.ssl.keystore.location?)",
        "The configuration 'listener.name.sasl_ssl.scram-sha-256.sasl.jass.config' was supplied but isn't a known config "
        "(did you mean listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config?)",
    ]


def test_a_bad_value_is_still_refused_beside_a_typo() -> None:
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig.load(None, ["num.partitons=3", "num.partitions=zero"])


def test_embedded_broker_typo_is_a_user_warning_and_a_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from onceflow.broker.embedded import EmbeddedBroker

    with pytest.warns(UserWarning, match=r"^The configuration 'num\.partitons' was supplied but isn't a known config "
                                         r"\(did you mean num\.partitions\?\)$") as caught:
        broker = EmbeddedBroker(tmp_path, **{"num.partitons": 3})
    assert [w.filename for w in caught] == [__file__], "the warning points at the caller's line"
    assert broker.config["num.partitions"] == 1
    assert _warnings(caplog) == [str(caught[0].message)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EmbeddedBroker(tmp_path, **{"num.partitions": 3, "num.network.threads": 8})

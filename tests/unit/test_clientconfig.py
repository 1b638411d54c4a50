"""``onceflow.clientconfig``: each Java name's translation, the JAAS parser, stores by format, the
kafka-python mapping, .properties files with Java's escapes, and -X parsing.  No broker; files
are made in tmp_path (PEM with openssl where a real key and certificate are needed)."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

import pytest

from onceflow.clientconfig import (
    ClientSettings,
    SettingError,
    add_options,
    from_options,
    is_secret,
    parse_assignment,
    parse_jaas,
    read_properties,
    redacted,
    settings_from,
    translate,
)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
SECRET = "s3cr3t-Value"


def error(settings: dict[str, str]) -> SettingError:
    with pytest.raises(SettingError) as caught:
        translate(settings).check()
    assert SECRET not in str(caught.value), "a secret is never quoted"
    assert "\n" not in str(caught.value), "one line"
    return caught.value


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA certificate, a client key and certificate, and the key stores holding both (PEM, PKCS#12)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    from onceflow.security.certs import CertificateAuthority

    d = tmp_path_factory.mktemp("pem")
    ca = CertificateAuthority(d / "pki", "CN=test-ca")
    issued = ca.issue("client", "CN=client")
    (d / "ca.pem").write_bytes(ca.pem)
    (d / "client.key").write_bytes(issued.key.read_bytes())
    (d / "client.crt").write_bytes(issued.certificate.read_bytes())
    (d / "keystore.pem").write_text((d / "client.key").read_text() + (d / "client.crt").read_text())
    key = serialization.load_pem_private_key(issued.key.read_bytes(), password=None)
    certificate = x509.load_pem_x509_certificate(issued.certificate.read_bytes())
    (d / "keystore.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, certificate, None,  # type: ignore[arg-type]
        serialization.BestAvailableEncryption(SECRET.encode())))
    (d / "store.jks").write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    return {name: d / name for name in ("ca.pem", "client.key", "client.crt", "keystore.pem", "keystore.p12", "store.jks")}


# -- pass-through and secrets --------------------------------------------------------------


def test_librdkafka_names_pass_through_and_are_checked_offline() -> None:
    settings = translate({"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                          "sasl.password": SECRET, "client.id": "probe"})
    settings.check()
    assert dict(settings.config) == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                                     "sasl.password": SECRET, "client.id": "probe"}
    assert SECRET not in repr(settings) and "[hidden]" in repr(settings)
    assert settings.librdkafka("b:1", **{"client.id": "default", "log_level": 0}) == {
        **settings.config, "log_level": 0, "bootstrap.servers": "b:1"}, "the user's settings over a client's defaults"


@pytest.mark.parametrize(("settings", "named", "words"), [
    ({"foo.bar": "1"}, "foo.bar", "No such configuration property"),
    ({"security.protocol": "TLS"}, "security.protocol", "Invalid value"),
    ({"ssl.enabled.protocols": "TLSv1.2"}, "ssl.enabled.protocols", "librdkafka negotiates TLS itself"),
    ({"sasl.mechanism": "PLAIN", "sasl.mechanisms": "PLAIN"}, "sasl.mechanisms", "give one"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, None, "sasl.username and sasl.password must be set"),
])
def test_a_bad_setting_is_one_line_naming_it(settings: dict[str, str], named: str | None, words: str) -> None:
    err = error(settings)
    assert err.setting == named
    assert words in str(err)
    if named:
        assert named in str(err)


def test_secrets_are_recognised_and_redacted() -> None:
    for name in ("sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
                 "sasl.jaas.config", "ssl.key.pem", "ssl.keystore.key", "sasl.oauthbearer.client.secret",
                 "kafka.sasl.jaas.config"):
        assert is_secret(name), name
    assert not is_secret("sasl.username") and not is_secret("ssl.ca.location")
    assert redacted({"sasl.username": "a", "sasl.password": SECRET}) == {"sasl.username": "a", "sasl.password": "[hidden]"}


# -- JAAS ----------------------------------------------------------------------------------


def test_jaas_plain_and_scram_become_username_and_password() -> None:
    plain = translate({"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'{PLAIN} required username="alice" password="{SECRET}";'})
    assert plain.config["sasl.username"] == "alice" and plain.config["sasl.password"] == SECRET
    assert plain.origin("sasl.password") == "sasl.jaas.config"
    assert "sasl.jaas.config" not in plain.config
    scram = translate({"sasl.mechanism": "scram-sha-512",
                       "sasl.jaas.config": f"{SCRAM} required\n  username=bob\n  password='p w';"})
    assert (scram.config["sasl.username"], scram.config["sasl.password"]) == ("bob", "p w")


def test_jaas_values_unescape_as_java_does() -> None:
    module, options = parse_jaas(f'{PLAIN} required username="a\\"b\\\\c" password="x\\ty\\101\\q" '
                                 '/* a comment */ other = "semi;colon" // the rest of the line\n ;')
    assert module == PLAIN
    assert options == {"username": 'a"b\\c', "password": "x\tyAq", "other": "semi;colon"}
    assert parse_jaas(f"{PLAIN} REQUIRED;") == (PLAIN, {})


@pytest.mark.parametrize(("text", "words"), [
    ("", "no login module"),
    (f"{PLAIN}", "not terminated"),
    (f'{PLAIN} required username="alice" password="{SECRET}"', "not terminated by ';'"),
    (f"{PLAIN} always;", "control flag"),
    (f'{PLAIN} required username "alice";', "expected '=' after an option name"),
    (f'{PLAIN} required username=;', "no value for option 'username'"),
    (f'{PLAIN} required password="{SECRET};', "quoted value at character"),
    (f'{PLAIN} required username=a username=b;', "given twice"),
    (f"{PLAIN} required; {PLAIN} required;", "more than one login module"),
    (f"{PLAIN} required /* open;", "comment"),
])
def test_malformed_jaas_is_one_line_without_the_values(text: str, words: str) -> None:
    err = error({"sasl.mechanism": "PLAIN", "sasl.jaas.config": text})
    assert err.setting == "sasl.jaas.config"
    assert words in str(err)


@pytest.mark.parametrize(("settings", "words"), [
    ({"sasl.jaas.config": f'{PLAIN} required username="a" password="{SECRET}";'}, "sasl.mechanism is GSSAPI (the default)"),
    ({"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": f'{PLAIN} required username="a" password="b";'},
     "serves SASL mechanism PLAIN"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": 'com.example.Login required;'}, "has no librdkafka equivalent"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'{PLAIN} required username="a";'}, "needs password"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'{PLAIN} required username="a" password="b" x="y";'},
     "option 'x'"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.jaas.config": f'{PLAIN} required username="a" password="b";'},
     "say the same thing"),
])
def test_jaas_that_cannot_be_translated_is_refused(settings: dict[str, str], words: str) -> None:
    assert words in str(error(settings))


def test_other_login_modules() -> None:
    oauth = translate({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config":
                       'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                       f'clientId="app" clientSecret="{SECRET}" scope="kafka";'})
    assert {k: oauth.config[k] for k in ("sasl.oauthbearer.method", "sasl.oauthbearer.client.id", "sasl.oauthbearer.scope")} == {
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app", "sasl.oauthbearer.scope": "kafka"}
    kerberos = translate({"sasl.mechanism": "GSSAPI", "sasl.jaas.config":
                          'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
                          'keyTab="/etc/k.keytab" principal="svc@EXAMPLE.COM";'})
    assert kerberos.config["sasl.kerberos.keytab"] == "/etc/k.keytab"
    assert kerberos.config["sasl.kerberos.principal"] == "svc@EXAMPLE.COM"


def test_endpoint_identification_empty_is_none() -> None:
    assert translate({"ssl.endpoint.identification.algorithm": ""}).config == {"ssl.endpoint.identification.algorithm": "none"}
    assert translate({"ssl.endpoint.identification.algorithm": "HTTPS"}).config == {"ssl.endpoint.identification.algorithm": "https"}


# -- stores ------------------------------------------------------------------------------------


def test_pem_truststore_by_location_or_text(pem: dict[str, Path]) -> None:
    by_file = translate({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pem["ca.pem"])})
    assert by_file.config == {"security.protocol": "SSL", "ssl.ca.location": str(pem["ca.pem"])}
    assert by_file.origin("ssl.ca.location") == "ssl.truststore.location"
    by_file.check()
    sniffed = translate({"ssl.truststore.location": str(pem["ca.pem"])})  # no type: the file says PEM
    assert sniffed.config == {"ssl.ca.location": str(pem["ca.pem"])}
    text = pem["ca.pem"].read_text()
    inline = translate({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": text})
    assert inline.config["ssl.ca.pem"] == text
    inline.check()


def test_pem_keystore_file_is_certificate_and_key(pem: dict[str, Path]) -> None:
    settings = translate({"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                          "ssl.keystore.location": str(pem["keystore.pem"]), "ssl.truststore.location": str(pem["ca.pem"])})
    assert settings.config["ssl.certificate.location"] == settings.config["ssl.key.location"] == str(pem["keystore.pem"])
    settings.check()  # OpenSSL finds the certificate and the key in the one file
    inline = translate({"security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.key": pem["client.key"].read_text(),
                        "ssl.keystore.certificate.chain": pem["client.crt"].read_text()})
    assert set(inline.config) == {"security.protocol", "ssl.key.pem", "ssl.certificate.pem"}
    inline.check()
    err = error({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem["ca.pem"])})
    assert err.setting == "ssl.keystore.location" and "must hold the private key" in str(err)


def test_pkcs12_keystore_goes_to_librdkafka(pem: dict[str, Path]) -> None:
    settings = translate({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                          "ssl.keystore.location": str(pem["keystore.p12"]), "ssl.keystore.password": SECRET})
    assert settings.config["ssl.keystore.location"] == str(pem["keystore.p12"])
    settings.check()
    sniffed = translate({"ssl.keystore.location": str(pem["keystore.p12"]), "ssl.keystore.password": SECRET})
    assert sniffed.config["ssl.keystore.location"] == str(pem["keystore.p12"])
    assert "ssl.keystore.password must be set" in str(error({"ssl.keystore.location": str(pem["keystore.p12"])}))


@pytest.mark.parametrize(("settings", "named", "words"), [
    ({"ssl.truststore.location": "store.jks"}, "ssl.truststore.location", "cannot read a JKS trust store"),
    ({"ssl.truststore.type": "JKS", "ssl.truststore.location": "ca.pem"}, "ssl.truststore.location", "JKS"),
    ({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": "keystore.p12"}, "ssl.truststore.location",
     "PKCS#12 trust store"),
    ({"ssl.keystore.location": "store.jks", "ssl.keystore.password": SECRET}, "ssl.keystore.location",
     "cannot read a JKS key store"),
    ({"ssl.truststore.location": "missing.pem"}, "ssl.truststore.location", "cannot read"),
    ({"ssl.truststore.location": "ca.pem", "ssl.truststore.password": SECRET}, "ssl.truststore.password", "no password"),
    ({"ssl.truststore.type": "XML", "ssl.truststore.location": "ca.pem"}, "ssl.truststore.type", "PEM, PKCS12 or JKS"),
    ({"ssl.truststore.password": SECRET}, "ssl.truststore.password", "no trust store"),
    ({"ssl.truststore.certificates": "not a certificate"}, "ssl.truststore.certificates", "no PEM certificate"),
    ({"ssl.keystore.key": "k"}, "ssl.keystore.certificate.chain", "must be set too"),
    ({"ssl.truststore.location": "ca.pem", "ssl.ca.location": "ca.pem"}, "ssl.truststore.location", "say the same thing"),
])
def test_stores_librdkafka_cannot_read_are_refused(pem: dict[str, Path], settings: dict[str, str], named: str,
                                                   words: str) -> None:
    directory = pem["ca.pem"].parent
    resolved = {k: str(directory / v) if k.endswith("location") else v for k, v in settings.items()}
    err = error(resolved)
    assert err.setting == named
    assert words in str(err)


# -- kafka-python -------------------------------------------------------------------------------


def test_kafka_python_takes_the_same_settings(pem: dict[str, Path]) -> None:
    settings = translate({"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-256", "client.id": "probe",
                          "sasl.jaas.config": f'{SCRAM} required username="alice" password="{SECRET}";',
                          "ssl.truststore.location": str(pem["ca.pem"]), "ssl.keystore.type": "PEM",
                          "ssl.keystore.location": str(pem["keystore.pem"]), "ssl.key.password": "kp",
                          "ssl.endpoint.identification.algorithm": "", "metadata.max.age.ms": "1000"})
    assert settings.kafka_python() == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "client_id": "probe",
        "sasl_plain_username": "alice", "sasl_plain_password": SECRET, "ssl_cafile": str(pem["ca.pem"]),
        "ssl_certfile": str(pem["keystore.pem"]), "ssl_keyfile": str(pem["keystore.pem"]), "ssl_password": "kp",
        "ssl_check_hostname": False, "metadata_max_age_ms": 1000}


def test_kafka_python_gets_a_context_for_pem_text(pem: dict[str, Path]) -> None:
    settings = translate({"security.protocol": "SSL", "ssl.truststore.certificates": pem["ca.pem"].read_text(),
                          "ssl.keystore.key": pem["client.key"].read_text(),
                          "ssl.keystore.certificate.chain": pem["client.crt"].read_text()})
    kwargs = settings.kafka_python()
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].get_ca_certs()[0]["subject"] == ((("commonName", "test-ca"),),)


@pytest.mark.parametrize(("settings", "named"), [
    ({"linger.ms": "5"}, "linger.ms"),
    ({"ssl.keystore.location": "keystore.p12", "ssl.keystore.password": SECRET}, "ssl.keystore.location"),
    ({"metadata.max.age.ms": "soon"}, "metadata.max.age.ms"),
])
def test_kafka_python_refuses_what_it_has_no_word_for(pem: dict[str, Path], settings: dict[str, str], named: str) -> None:
    resolved = {k: str(pem["ca.pem"].parent / v) if k.endswith("location") else v for k, v in settings.items()}
    with pytest.raises(SettingError) as caught:
        translate(resolved).kafka_python()
    assert caught.value.setting == named and named in str(caught.value)
    assert SECRET not in str(caught.value)


# -- .properties files and -X ----------------------------------------------------------------


def test_properties_files_follow_javas_escapes(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_bytes(
        b"# a comment\n"
        b"! another\n"
        b"log.dir = C:\\\\kafka\n"
        b"a\\=b=c\n"
        b"letter=\\u0041BC\n"
        b"continued = first, \\\n"
        b"            second\n"
        b"key with spaces\n"
        b"colon:value\n"
        b"   padded   =   kept trailing   \n"
        b"dup=1\n"
        b"dup=2\n"
        + b"sasl.jaas.config=" + PLAIN.encode() + b' required \\\n    username="alice" \\\n    password="p\\\\\\"w";\n'
        + "utf8=h\u00e9\n".encode()
    )
    props = read_properties(path)
    assert props["log.dir"] == "C:\\kafka"
    assert props["a=b"] == "c"
    assert props["letter"] == "ABC"
    assert props["continued"] == "first, second"
    assert props["key"] == "with spaces"
    assert props["colon"] == "value"
    assert props["padded"] == "kept trailing   "
    assert props["dup"] == "2", "the last wins, as in Java"
    assert props["utf8"] == "h\u00e9"
    assert parse_jaas(props["sasl.jaas.config"])[1] == {"username": "alice", "password": 'p"w'}


def test_properties_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("x=\\u00G1\n")
    with pytest.raises(SettingError, match="invalid \\\\u escape"):
        read_properties(bad)
    with pytest.raises(SettingError, match=r"cannot read .*No such file"):
        read_properties(tmp_path / "missing.properties")
    latin = tmp_path / "latin.properties"
    latin.write_bytes(b"name=caf\xe9\n")  # not UTF-8: ISO-8859-1, as Java reads it
    assert read_properties(latin) == {"name": "caf\u00e9"}


def test_x_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("client.id=from-file\nsecurity.protocol=PLAINTEXT\n")
    settings = settings_from([("client.id", "from-x")], path)
    assert dict(settings.config) == {"client.id": "from-x", "security.protocol": "PLAINTEXT"}


def test_x_parsing() -> None:
    assert parse_assignment("a.b=c=d") == ("a.b", "c=d")
    assert parse_assignment(" k =") == ("k", "")
    for bad in ("novalue", "=v", ""):
        with pytest.raises(ValueError, match="expected key=value"):
            parse_assignment(bad)
    with pytest.raises(ValueError) as caught:
        parse_assignment(f"sasl.password{SECRET}")
    assert SECRET not in str(caught.value)


def test_the_options_collect_every_level_and_refuse_bootstrap_servers(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args(["-X", "client.id=a", "-X", "client.id=b"])
    assert from_options(args).config == {"client.id": "b"}
    with pytest.raises(SystemExit):
        parser.parse_args(["-X", "nothing"])
    with pytest.raises(SettingError, match="--bootstrap-servers"):
        from_options(parser.parse_args(["-X", "bootstrap.servers=x:1"]))
    assert not from_options(parser.parse_args([])), "no settings"
    assert isinstance(from_options(parser.parse_args([])), ClientSettings)


@pytest.mark.parametrize("key,value", [("linger.ms", "soon"), ("acks", "most"), ("retries", "many")])
def test_a_refusal_names_the_setting_as_the_user_wrote_it_not_librdkafkas_canonical_name(key: str, value: str) -> None:
    refused = error({key: value})
    assert f'"{key}"' in str(refused), str(refused)

"""Certificates for development and tests: a private CA and the certificates it signs.

Theory of operation: ``CertificateAuthority`` makes a self-signed CA key and
certificate, and ``issue`` signs a certificate for a broker (its subject
alternative names: the host names and IP addresses clients connect to) or
for a client (a subject that ``ssl.principal.mapping.rules`` turns into a
principal).  Everything is written as PEM files that both sides read: the
broker's ``ssl.keystore.location`` (key and chain in one file, Kafka's PEM
keystore) and ``ssl.truststore.location`` (the CA), a client's
``ssl.ca.location``, ``ssl.certificate.location`` and ``ssl.key.location``.
The ``cryptography`` library does the work; nothing here is for production,
where certificates come from the organisation's CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    #: The private key and the certificate chain (the certificate, then the CA), PEM: a broker keystore.
    keystore: Path
    certificate: Path
    key: Path


def _name(subject: str) -> x509.Name:
    """``CN=alice,OU=eng,O=Acme`` (RFC 4514) as an X.509 name."""
    return x509.Name.from_rfc4514_string(subject)


def _write(path: Path, data: bytes) -> Path:
    """Written readable by its owner only from the first byte (it may hold a private key)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    path.chmod(0o600)  # an existing file keeps its mode through O_CREAT
    return path


class CertificateAuthority:
    def __init__(self, directory: Path, subject: str = "CN=Onceflow test CA") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(subject)).issuer_name(_name(subject))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self._certificate.public_bytes(serialization.Encoding.PEM)
        self.location = _write(self.directory / "ca.pem", self.pem)

    def issue(self, name: str, subject: str, *, hosts: tuple[str, ...] = (), days: float = 365,
              expired: bool = False) -> IssuedCertificate:
        """A certificate for ``subject``, valid for ``hosts`` (a server) or for client authentication."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = ((now - datetime.timedelta(days=2), now - datetime.timedelta(days=1)) if expired
                      else (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(subject)).issuer_name(self._certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return IssuedCertificate(
            keystore=_write(self.directory / f"{name}.keystore.pem", key_pem + cert_pem + self.pem),
            certificate=_write(self.directory / f"{name}.pem", cert_pem + self.pem),
            key=_write(self.directory / f"{name}.key.pem", key_pem),
        )

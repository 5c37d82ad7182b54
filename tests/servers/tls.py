"""Throw-away PKI (CA, server and client certificates) for TLS/mTLS tests.

Why generate instead of committing fixtures: committed certificates expire
and then break CI on a random day; keys generated per run cannot leak into
anything real.  The server certificate is valid for ``127.0.0.1`` and
``localhost``, which is where every test server listens.

Needs the ``cryptography`` package (imported lazily, so modules that do not
use TLS do not depend on it).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TestPki", "TestPkiFiles", "make_test_pki"]


@dataclass(frozen=True)
class TestPkiFiles:
    """Paths of a :class:`TestPki` written to disk (HTTP exporters want files)."""

    __test__ = False  # not a pytest test class despite the name

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@dataclass(frozen=True)
class TestPki:
    """PEM bytes of a CA and a server and a client certificate it signed."""

    __test__ = False  # not a pytest test class despite the name

    ca_cert: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes

    def write(self, directory: Path) -> TestPkiFiles:
        """Write every PEM into *directory* and return their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        for name in ("ca_cert", "server_cert", "server_key", "client_cert", "client_key"):
            path = directory / f"{name}.pem"
            path.write_bytes(getattr(self, name))
            paths[name] = path
        return TestPkiFiles(**paths)


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem


def make_test_pki(days: int = 2) -> TestPki:
    """Create a fresh CA plus server (127.0.0.1/localhost) and client certs."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    not_before = now - datetime.timedelta(minutes=5)  # tolerate clock skew
    not_after = now + datetime.timedelta(days=days)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("otel-spans test CA"))
        .issuer_name(name("otel-spans test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common_name: str, usage: x509.ObjectIdentifier, server: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    server_cert, server_key = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH, server=True)
    client_cert, client_key = leaf("otel-spans test client", ExtendedKeyUsageOID.CLIENT_AUTH, False)
    return TestPki(
        ca_cert=ca_cert.public_bytes(serialization.Encoding.PEM),
        server_cert=server_cert,
        server_key=server_key,
        client_cert=client_cert,
        client_key=client_key,
    )

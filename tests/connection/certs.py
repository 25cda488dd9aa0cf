"""A throwaway CA with a server and a client certificate, generated per test session."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "temporal.test"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    #: A client certificate from another CA: the proxy must refuse it.
    stranger_cert: Path
    stranger_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usage: ExtendedKeyUsageOID | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    return _issue(common_name, key, _name(common_name), key, ca=True), key


def _leaf(
    directory: Path,
    stem: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    usage: ExtendedKeyUsageOID,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(stem, key, ca[0].subject, ca[1], usage=usage, sans=sans)
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return cert_path, key_path


def make_pki(directory: Path) -> Pki:
    ca = _ca("turngate test CA")
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    server_sans: list[x509.GeneralName] = [
        x509.DNSName(SERVER_NAME),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server = _leaf(directory, "server", ca, ExtendedKeyUsageOID.SERVER_AUTH, server_sans)
    client = _leaf(directory, "client", ca, ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _leaf(directory, "stranger", _ca("another CA"), ExtendedKeyUsageOID.CLIENT_AUTH)
    return Pki(ca_path, *server, *client, *stranger)

"""The stack's TLS: a certificate authority of its own and a server certificate it signed.

PostgreSQL, PgBouncer, the object store's S3 gateway and the MLflow server serve TLS with the
server certificate (for 127.0.0.1, localhost and the stack's address when it listens on another).
Every client checks it against the authority's certificate, set once for all of them through
their own variables (`Certificates.client_environment`): libpq's with `sslmode=verify-full`, the
AWS SDK's, MLflow's and `requests`'. Made at the first `stack-up` and kept; the authority's key
stays in the folder (mode 0600), readable by its owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from deploy.stack.processes import write_atomically

VALID_DAYS = 3650
HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Certificates:
    """Where the stack's TLS files are."""

    folder: Path

    @property
    def authority(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def authority_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def bundle(self) -> Path:
        """The authorities HTTPS clients of `requests` trust: the ones they trusted before and
        the stack's (MLflow's client downloads artifacts from the object store with it)."""
        return self.folder / "bundle.pem"

    @property
    def certificate(self) -> Path:
        return self.folder / "server.crt"

    @property
    def key(self) -> Path:
        return self.folder / "server.key"

    def client_environment(self) -> dict[str, str]:
        """The settings that make every client check the server's certificate and name against
        the authority: libpq's (asking for TLS too), the AWS SDKs' (boto3, and s3fs for DVC),
        MLflow's client's."""
        return {
            "PGSSLMODE": "verify-full",
            "PGSSLROOTCERT": str(self.authority),
            "AWS_CA_BUNDLE": str(self.authority),
            "MLFLOW_TRACKING_SERVER_CERT_PATH": str(self.authority),
            "REQUESTS_CA_BUNDLE": str(self.bundle),
        }


def ensure(folder: Path, server_user: str | None, address: str = HOSTS[0]) -> Certificates:
    """The certificates under `folder`, made if missing or if the server's does not name
    `address`; the server key handed to `server_user` (PostgreSQL refuses a key others may read,
    or one it does not own)."""
    made = Certificates(folder)
    folder.mkdir(parents=True, exist_ok=True)
    whole = made.authority.exists() and made.certificate.exists() and made.key.exists()
    if not whole or address not in names(made.certificate):
        _make(made, address)
    _write_bundle(made)
    if server_user and os.geteuid() == 0:
        shutil.chown(made.key, server_user, server_user)
        shutil.chown(made.certificate, server_user, server_user)
    return made


def _write_bundle(made: Certificates) -> None:
    """`made.bundle`: the authorities `requests` trusted in this environment (its
    REQUESTS_CA_BUNDLE, or certifi's), and the stack's."""
    import certifi

    from pipelines.settings import REQUESTS_CA_BUNDLE

    trusted = REQUESTS_CA_BUNDLE.get()
    if not trusted or Path(trusted) == made.bundle or not Path(trusted).is_file():
        trusted = certifi.where()
    text = Path(trusted).read_text() + "\n" + made.authority.read_text()
    write_atomically(made.bundle, text)


def names(certificate: Path) -> set[str]:
    """The host names and addresses a certificate is for."""
    from cryptography import x509

    loaded = x509.load_pem_x509_certificate(certificate.read_bytes())
    alternative = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {
        *alternative.get_values_for_type(x509.DNSName),
        *(str(ip) for ip in alternative.get_values_for_type(x509.IPAddress)),
    }


def _make(made: Certificates, address: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def pem(key) -> str:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()

    authority_key = ec.generate_private_key(ec.SECP256R1())
    authority = (
        x509.CertificateBuilder()
        .subject_name(name("flywheel stack CA"))
        .issuer_name(name("flywheel stack CA"))
        .public_key(authority_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .sign(authority_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    addresses = dict.fromkeys([HOSTS[0], address])
    alternative = [
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in addresses),
        x509.DNSName(HOSTS[1]),
    ]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name(HOSTS[0]))
        .issuer_name(authority.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(authority_key, hashes.SHA256())
    )
    write_atomically(made.authority_key, pem(authority_key), mode=0o600)
    write_atomically(made.key, pem(key), mode=0o600)
    encoded = serialization.Encoding.PEM
    write_atomically(made.certificate, certificate.public_bytes(encoded).decode())
    # Last: its presence says the set is whole.
    write_atomically(made.authority, authority.public_bytes(encoded).decode())

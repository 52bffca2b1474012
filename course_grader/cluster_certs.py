"""The grading cluster's certificates: who may take part in it (`course_grader.cluster`).

A Dask cluster runs whatever function a connected client sends it, as the worker's user. So
the course's cluster speaks mutual TLS only (`distributed.security.Security`): the scheduler,
every worker and the coordinator present a certificate signed by the course's own certificate
authority, and each refuses a peer that presents none or another. `make_certificates` writes
one such folder:

    ca.pem        the course's certificate authority (public: it only checks certificates)
    grading.pem   the certificate that every member of the cluster presents
    grading.key   its private key: whoever holds it can run code on the workers

The authority's own key signs `grading.pem` and is then thrown away, never written: every
holder of `grading.key` is trusted alike, so no further certificate is ever needed, and making
the folder again (`force=True`) makes a new authority, which shuts out every earlier key.
"""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

__all__ = ["CA_CERT", "CERT", "DEFAULT_FOLDER", "KEY", "CertificateError",
           "make_certificates", "security"]

DEFAULT_FOLDER = ".grading-certs"    # in the course folder; gitignored
CA_CERT, CERT, KEY = "ca.pem", "grading.pem", "grading.key"


class CertificateError(ValueError):
    """The certificate folder is missing, incomplete or readable by others."""


def make_certificates(folder: Path, *, days: int = 365, force: bool = False) -> None:
    """Write a new authority's certificate and one member certificate and key, valid for
    `days`, into `folder` (made with mode 0700; the key 0600). An existing set is replaced
    only with `force`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder = Path(folder)
    existing = [name for name in (CA_CERT, CERT, KEY) if (folder / name).exists()]
    if existing and not force:
        raise CertificateError(f"{folder} already holds {', '.join(existing)}: making new "
                               "certificates shuts out every machine that has the old ones; "
                               "pass --force (make grading-certs FORCE=1) to do so")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    for name in existing:
        (folder / name).unlink()
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    member_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("course grading CA", ca_key.public_key(), ca_key, None, now, days)
    member = _certificate("course grading cluster", member_key.public_key(), ca_key, ca,
                          now, days)
    pem = serialization.Encoding.PEM
    _write(folder / CA_CERT, ca.public_bytes(pem), 0o644)
    _write(folder / CERT, member.public_bytes(pem), 0o644)
    _write(folder / KEY, member_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()), 0o600)


def _certificate(name: str, public_key, signer, issuer, now: datetime.datetime, days: int):
    """A certificate for `public_key` named `name`, signed by `signer`: the authority's own
    when `issuer` is None, else a member's signed by the authority `issuer`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    is_ca = issuer is None
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder()
               .subject_name(subject)
               .issuer_name(subject if is_ca else issuer.subject)
               .public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks drift
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None),
                              critical=True)
               .add_extension(x509.KeyUsage(digital_signature=not is_ca, key_cert_sign=is_ca,
                                            crl_sign=is_ca, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key),
                              critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   signer.public_key()), critical=False))
    if not is_ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _write(path: Path, content: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(content)
    path.chmod(mode)   # the umask may have taken bits off


def security(folder: Path):
    """The `distributed.security.Security` of a member of the cluster (scheduler, worker or
    client alike) from `folder`; encryption is required. Refuses a folder without the three
    files, or whose key others can read."""
    from distributed.security import Security

    folder = Path(folder)
    missing = [name for name in (CA_CERT, CERT, KEY) if not (folder / name).is_file()]
    if missing:
        raise CertificateError(f"no grading-cluster certificates in {folder} (missing "
                               f"{', '.join(missing)}): make them with `make grading-certs` "
                               "and copy the folder to every machine of the cluster")
    mode = stat.S_IMODE((folder / KEY).stat().st_mode)
    if mode & 0o077:
        raise CertificateError(f"{folder / KEY} can be read by others (mode {mode:04o}): "
                               f"whoever reads it can run code on the workers; "
                               f"chmod 600 {folder / KEY}")
    files = {"tls_ca_file": str(folder / CA_CERT)}
    for role in ("client", "scheduler", "worker"):
        files[f"tls_{role}_cert"] = str(folder / CERT)
        files[f"tls_{role}_key"] = str(folder / KEY)
    return Security(require_encryption=True, **files)

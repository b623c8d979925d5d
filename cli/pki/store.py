"""The CA's files: made once by `ctl ca init`, checked every time they are used.

The directory holds `ca.key` (the CA's private key, PEM PKCS#8, mode 0600) and `ca.pem`
(its self-signed certificate, 0644); the directory itself is 0700. Both belong to the
user running ctl. A key any other user could read (or write), a directory others can
enter, a key that is a symlink or belongs to someone else: each is refused with the
command that fixes it, never repaired silently. An existing CA is never overwritten.

The key is not encrypted: ctl signs unattended. Keep the directory on the one machine
that onboards nodes, with an encrypted disk and a backup kept offline.

Beside them (0644, each written atomically): `issued.json`, a record of every node
certificate the CA signed; `revoked.json`, the serials `ctl offboard-node` revoked; and
`crl.pem`, the CRL of those serials signed by the CA (cli/pki/revocation.py).
`revoked_serials` and `crl_path` are what a consumer of revocations (the routers) reads.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from cli.edges.files import atomic_write
from cli.errors import InputError
from cli.pki.certs import (
    CAPrivateKey,
    CertificateError,
    NodeNames,
    build_ca_certificate,
    ca_problems,
    serial_hex,
    sign_node_certificate,
)
from cli.pki.revocation import (
    CertRecord,
    RevocationFileError,
    build_crl,
    crl_number,
    parse_records,
    render_records,
)

CA_DIR_ENV = "MODELFLEET_CA_DIR"
KEY_FILE = "ca.key"
CERT_FILE = "ca.pem"
DIR_MODE = 0o700
KEY_MODE = 0o600
CERT_MODE = 0o644
ISSUED_FILE = "issued.json"
REVOKED_FILE = "revoked.json"
CRL_FILE = "crl.pem"
LIST_MODE = 0o644  # serials and node names: no secret


def default_ca_dir(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_CONFIG_HOME/modelfleet/ca, else ~/.config/modelfleet/ca."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "modelfleet" / "ca"


def random_serial() -> int:
    """A fresh certificate serial: 159 random bits (positive, at most 20 octets)."""
    return x509.random_serial_number()


@dataclass(frozen=True)
class CertificateAuthority:
    directory: Path
    key: CAPrivateKey
    cert: x509.Certificate

    @property
    def key_path(self) -> Path:
        return self.directory / KEY_FILE

    @property
    def cert_path(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def name(self) -> str:
        return self.cert.subject.rfc4514_string()

    def issue(
        self, csr: x509.CertificateSigningRequest, names: NodeNames, now: datetime, node: str
    ) -> x509.Certificate:
        """A node certificate for the CSR's key and exactly `names`, with a random serial,
        recorded in issued.json under `node`, the inventory name it is issued to, exactly,
        with `names` beside it, before it is returned (so it can be revoked later, and only
        for that node: cli/pki/revocation.py `issued_to`)."""
        cert = sign_node_certificate(self.key, self.cert, csr, names, now, random_serial())
        record = CertRecord(serial_hex(cert), node, cert.not_valid_after_utc, names.entries())
        issued = self.directory / ISSUED_FILE
        records = (*_records(issued, "issued"), record)
        atomic_write(issued, render_records(records, "issued"), LIST_MODE)
        return cert

    def revoke(self, records: Sequence[CertRecord], now: datetime) -> tuple[CertRecord, ...]:
        """Add `records` to revoked.json and sign a new crl.pem listing every revoked serial;
        returns those not revoked before. The CRL is signed again whenever it does not list
        exactly the revoked serials (a run interrupted between the two files)."""
        known = _records(self.directory / REVOKED_FILE, "revoked")
        have = {r.serial for r in known}
        new = tuple(r for r in dict.fromkeys(records) if r.serial not in have)
        revoked = (*known, *new)
        if new:
            atomic_write(
                self.directory / REVOKED_FILE, render_records(revoked, "revoked"), LIST_MODE
            )
        current = read_crl(self.directory)
        listed = None if current is None else {f"{r.serial_number:x}" for r in current}
        if new or listed != {r.serial for r in revoked}:
            crl = build_crl(self.key, self.cert, revoked, now, crl_number(current))
            atomic_write(crl_path(self.directory), crl.public_bytes(serialization.Encoding.PEM),
                         LIST_MODE)  # fmt: skip
        return new


def init_ca(directory: Path, name: str, now: datetime) -> CertificateAuthority:
    """Make a CA in `directory` (created 0700 if absent); never over an existing one."""
    key_path, cert_path = directory / KEY_FILE, directory / CERT_FILE
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise _error(directory, "is not a directory: choose another --ca-dir")
    existing = [path for path in (key_path, cert_path) if path.exists() or path.is_symlink()]
    if existing:
        raise _error(
            directory,
            f"a CA is already here ({', '.join(p.name for p in existing)}); ctl never"
            f" overwrites a CA: to make a new one, move this one away first"
            f" (mv {directory} {directory}.old), then onboard every node again with --renew",
        )
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        cert = build_ca_certificate(key, name, now, random_serial())
    except CertificateError as error:
        raise InputError.single("--name", None, (), str(error)) from None
    directory.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    _check_owner(directory, directory.stat())
    directory.chmod(DIR_MODE)  # mkdir's mode passes through the umask
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    made: list[Path] = []
    try:
        for path, data, mode in (
            (key_path, key_pem, KEY_MODE),
            (cert_path, cert.public_bytes(serialization.Encoding.PEM), CERT_MODE),
        ):
            atomic_write(path, data, mode, exclusive=True)
            made.append(path)
    except FileExistsError as error:
        for path in made:  # only what this run wrote: another run's CA stays whole
            path.unlink(missing_ok=True)
        message = f"{error.filename} appeared while ctl was writing it: look, then run again"
        raise _error(directory, message) from None
    except BaseException:
        for path in made:
            path.unlink(missing_ok=True)
        raise
    return load_ca(directory, now)


def load_ca(directory: Path, now: datetime) -> CertificateAuthority:
    """The CA in `directory`, once its files pass the checks; raises InputError."""
    key_path, cert_path = directory / KEY_FILE, directory / CERT_FILE
    if not directory.exists():
        raise _error(directory, "no CA here: make one with `ctl ca init` (or pass --ca-dir)")
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise _error(directory, "is not a directory (a symlink is not followed)")
    _check_owner(directory, info)
    if info.st_mode & 0o077:
        raise _error(
            directory,
            f"is open to group or others (mode {_mode(info)}): chmod 700 {directory}",
        )
    key_data = _read_private(key_path)
    cert_data = _read_file(cert_path)
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except TypeError:
        raise _error(key_path, "is encrypted: ctl needs the CA key unencrypted") from None
    except ValueError as error:
        raise _error(key_path, f"is not a PEM private key: {error}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        raise _error(key_path, f"is a {type(key).__name__}: the CA key must be EC or Ed25519")
    try:
        cert = x509.load_pem_x509_certificate(cert_data)
    except ValueError as error:
        raise _error(cert_path, f"is not a PEM certificate: {error}") from None
    problems = ca_problems(cert, key, now)
    if problems:
        raise _error(cert_path, "; ".join(problems))
    return CertificateAuthority(directory, key, cert)


def crl_path(directory: Path) -> Path:
    """Where the CA's CRL is (it may not exist yet: nothing revoked)."""
    return directory / CRL_FILE


def revoked_serials(directory: Path) -> frozenset[str]:
    """The serials the CA has revoked, as `serial_hex` writes them; empty when none.
    Reads only revoked.json: no key, no checks of the CA's modes (a reader needs none)."""
    return frozenset(r.serial for r in _records(directory / REVOKED_FILE, "revoked"))


def revoked_records(directory: Path) -> tuple[CertRecord, ...]:
    return _records(directory / REVOKED_FILE, "revoked")


def issued_records(directory: Path) -> tuple[CertRecord, ...]:
    return _records(directory / ISSUED_FILE, "issued")


def read_crl(directory: Path) -> x509.CertificateRevocationList | None:
    path = crl_path(directory)
    try:
        return x509.load_pem_x509_crl(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise _error(path, f"is not a PEM CRL: {error}") from None


def published_crl(directory: Path) -> str | None:
    """The CA's CRL as PEM text, for the routers (docs/routing.md), once checked against
    the CA's certificate beside it; "" where the CA has revoked nothing (the routers drop
    any list they had); None where there is no CA here (they keep theirs). A CRL the routers
    would choke on is bad input here (exit 2), not a router refusing every engine. Needs no
    key: any copy of the CA directory's public files will do."""
    crl = read_crl(directory)
    if crl is None:
        return "" if (directory / CERT_FILE).is_file() else None
    cert_path = directory / CERT_FILE
    try:
        ca_cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except FileNotFoundError:
        raise _error(crl_path(directory), "has no ca.pem beside it to check it by") from None
    except ValueError as error:
        raise _error(cert_path, f"is not a PEM certificate: {error}") from None
    public_key = ca_cert.public_key()
    signed = isinstance(
        public_key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
    ) and crl.is_signature_valid(public_key)
    if crl.issuer != ca_cert.subject or not signed:
        raise _error(crl_path(directory), "is not signed by the CA certificate beside it (ca.pem)")
    return crl.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _records(path: Path, what: str) -> tuple[CertRecord, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as error:
        raise _error(path, f"cannot read: {error}") from None
    try:
        return parse_records(text, what)
    except RevocationFileError as error:
        raise _error(path, str(error)) from None


def _read_private(path: Path) -> bytes:
    """The key's bytes, read from the very file whose owner and mode were checked."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise _error(path, "missing: the CA directory is incomplete") from None
    except OSError as error:
        if path.is_symlink():
            raise _error(path, "is a symlink: ctl reads the CA key from a file only") from None
        raise _error(path, f"cannot read: {error.strerror}") from None
    with os.fdopen(handle, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _error(path, "is not a regular file")
        _check_owner(path, info)
        if info.st_mode & 0o077:
            raise _error(
                path,
                f"is readable or writable by group or others (mode {_mode(info)}):"
                f" chmod 600 {path}, and consider the key exposed",
            )
        return file.read()


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise _error(path, "missing: the CA directory is incomplete") from None
    except OSError as error:
        raise _error(path, f"cannot read: {error.strerror}") from None


def _check_owner(path: Path, info: os.stat_result) -> None:
    if info.st_uid != os.geteuid():
        raise _error(path, f"belongs to uid {info.st_uid}, not to this user ({os.geteuid()})")


def _mode(info: os.stat_result) -> str:
    return f"{stat.S_IMODE(info.st_mode):04o}"


def _error(path: Path, message: str) -> InputError:
    return InputError.single(str(path), None, (), message)

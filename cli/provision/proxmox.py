"""Proxmox VE over proxmoxer and HTTPS: the API token, TLS verification, errors without secrets.

The token comes from the environment (`PROXMOX_TOKEN_ID`, `PROXMOX_TOKEN_SECRET`) or a
file holding `user@realm!name=secret`; never from the command line, where `ps` and shell
history would show it. Every text that leaves this module is passed through `redact` with
the secret, whatever library produced it.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests.exceptions
from proxmoxer import ProxmoxAPI, ResourceException  # type: ignore[import-untyped]

from cli.provision.api import RELAY_STATUSES, ApiError, RelayError, UnreachableError
from cli.provision.plan import ApiCall, redact

ENV_TOKEN_ID = "PROXMOX_TOKEN_ID"
ENV_TOKEN_SECRET = "PROXMOX_TOKEN_SECRET"
REQUEST_TIMEOUT = 30.0  # one HTTP request; the steps' waits are bounded separately
PVE_ROOT_CA = "/etc/pve/pve-root-ca.pem"  # where a Proxmox node keeps the cluster's own CA

# PVE::AccessControl: `user@realm!tokenname`, the token name `[A-Za-z][A-Za-z0-9.\-_]+`.
_TOKEN_ID = re.compile(
    r"^(?P<user>[^\s:/@!=]+@[A-Za-z][A-Za-z0-9.\-_]*)!(?P<name>[A-Za-z][A-Za-z0-9.\-_]+)$"
)


class TokenError(ValueError):
    """The token is missing or malformed (exit 2). The text never holds the secret."""


@dataclass(frozen=True)
class Token:
    token_id: str  # user@realm!name
    secret: str = field(repr=False)

    @property
    def user(self) -> str:
        return self.token_id.partition("!")[0]

    @property
    def name(self) -> str:
        return self.token_id.partition("!")[2]

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never be printed: the secret, and the header value that carries it."""
        return (self.secret, f"{self.token_id}={self.secret}")


def _token(token_id: str, secret: str, where: str) -> Token:
    token_id, secret = token_id.strip(), secret.strip()
    if not _TOKEN_ID.fullmatch(token_id):
        raise TokenError(f"{where}: the token id must look like user@realm!name")
    if not secret or any(ch.isspace() for ch in secret):
        raise TokenError(f"{where}: the token secret is empty or holds blanks")
    return Token(token_id, secret)


def load_token(env: Mapping[str, str], token_file: Path | None) -> Token:
    """From `token_file` (one line, `user@realm!name=secret`) when given, else the environment."""
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8")
        except OSError as error:
            raise TokenError(f"--token-file {token_file}: {error.strerror}") from None
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        if len(lines) != 1 or "=" not in lines[0]:
            raise TokenError(
                f"--token-file {token_file}: expected one line, user@realm!name=secret"
            )
        token_id, _, secret = lines[0].partition("=")
        return _token(token_id, secret, f"--token-file {token_file}")
    token_id = env.get(ENV_TOKEN_ID, "")
    secret = env.get(ENV_TOKEN_SECRET, "")
    if not token_id or not secret:
        raise TokenError(
            f"no Proxmox API token: set {ENV_TOKEN_ID} (user@realm!name) and "
            f"{ENV_TOKEN_SECRET}, or pass --token-file FILE (one line: user@realm!name=secret)"
        )
    return _token(token_id, secret, f"{ENV_TOKEN_ID}/{ENV_TOKEN_SECRET}")


def token_file_warning(path: Path) -> str | None:
    """A warning when others may read the token file, like ssh says of a private key."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"{path} can be read by others (mode {stat.S_IMODE(mode):04o}): chmod 600 {path}"
    return None


class ProxmoxClient:
    """`Api` over proxmoxer's HTTPS backend with token authentication and TLS verification."""

    def __init__(
        self,
        host: str,
        port: int,
        token: Token,
        *,
        ca_cert: Path | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self._endpoint = f"https://{host}:{port}"
        self._ca_cert = ca_cert
        self._timeout = timeout
        self._secrets = token.secrets
        self._api = ProxmoxAPI(
            host,
            port=port,
            user=token.user,
            token_name=token.name,
            token_value=token.secret,
            verify_ssl=str(ca_cert) if ca_cert is not None else True,
            timeout=timeout,
            service="PVE",
            backend="https",
        )

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def call(self, call: ApiCall) -> Any:
        resource = self._api(call.path.lstrip("/"))
        params = call.param_dict()
        try:
            if call.method == "GET":
                return resource.get(**params)
            if call.method == "POST":
                return resource.post(**params)
            if call.method == "PUT":
                return resource.put(**params)
            return resource.delete(**params)
        except ResourceException as error:
            if int(error.status_code) in RELAY_STATUSES:
                # proxmoxer puts the reason phrase (AnyEvent::HTTP's error text) in content.
                raise RelayError(
                    call,
                    int(error.status_code),
                    self._clean(str(error.content or error.status_message or "")),
                ) from None
            raise ApiError(
                call,
                int(error.status_code),
                self._clean(str(error.content or error.status_message or "")),
                {key: self._clean(value) for key, value in _errors(error.errors).items()},
            ) from None
        except requests.exceptions.SSLError as error:
            raise UnreachableError(self._clean(self._tls_problem(str(error)))) from None
        except requests.exceptions.Timeout:
            raise UnreachableError(
                f"{self._endpoint} did not answer {call.method} {call.path} "
                f"within {self._timeout:g} s"
            ) from None
        except requests.exceptions.ConnectionError as error:
            raise UnreachableError(
                self._clean(f"cannot connect to {self._endpoint}: {_cause(str(error))}")
            ) from None
        except requests.exceptions.RequestException as error:
            raise UnreachableError(self._clean(f"{self._endpoint}: {_cause(str(error))}")) from None

    def _clean(self, text: str) -> str:
        return redact(text, self._secrets)

    def _tls_problem(self, text: str) -> str:
        why = _cause(text)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            if self._ca_cert is not None:
                return (
                    f"TLS: the certificate of {self._endpoint} is not trusted ({why}): "
                    f"it is not signed by --ca-cert {self._ca_cert}, or does not name this host"
                )
            return (
                f"TLS: the certificate of {self._endpoint} is not trusted ({why}); if Proxmox "
                f"uses its own CA (the default, {PVE_ROOT_CA} on a node), pass it with --ca-cert"
            )
        return f"TLS with {self._endpoint} failed: {why}"


def _errors(value: object) -> dict[str, str]:
    """Proxmox's `errors` object, or nothing (proxmoxer wraps unparsable bodies)."""
    if not isinstance(value, Mapping):
        return {}
    if set(value) == {"errors"} and not isinstance(value["errors"], str):
        return {}
    return {str(key): str(reason) for key, reason in value.items()}


def _cause(text: str) -> str:
    """The innermost reason in a requests/urllib3 message, without the pool's preamble."""
    for pattern in (
        r"certificate verify failed: (.+?)\.? \(_ssl\.c:\d+\)",
        r"\[SSL: [A-Z_]+\] (.+?) \(_ssl\.c:\d+\)",
        r"\[Errno -?\d+\] ([^'\")]+)",
        r"(Read timed out|Connection aborted|Remote end closed connection without response)",
    ):
        match = re.search(pattern, text)
        if match:
            return match.group(1).strip(" .:")
    return text

"""The interface the provisioning steps use: one call at a time, and two kinds of failure.

`cli/provision/proxmox.py` implements it over proxmoxer; nothing here imports proxmoxer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from cli.provision.plan import ApiCall


class ProxmoxError(Exception):
    """A call that did not get an answer, or got a refusal. Its text holds no secret."""


class ApiError(ProxmoxError):
    """Proxmox answered with an error status.

    `message` is Proxmox's own text (pveproxy puts it in the HTTP reason phrase; PUT config
    refusals, "VM is locked (clone)", "QEMU guest agent is not running" all come this way),
    `errors` the per-parameter reasons of a 400 "Parameter verification failed.".
    """

    def __init__(self, call: ApiCall, status: int, message: str, errors: Mapping[str, str]):
        self.call = call
        self.status = status
        self.message = message.strip()
        self.errors = dict(errors)
        super().__init__(self.describe())

    def describe(self) -> str:
        text = f"{self.call.method} {self.call.path}: {self.status} {self.message}"
        for param, reason in sorted(self.errors.items()):
            text += f"\n  {param}: {' '.join(reason.split())}"
        return text


class UnreachableError(ProxmoxError):
    """No answer: the connection, TLS verification or the request's timeout failed.

    Whether the call was carried out is unknown. The steps retry these while they wait, and
    never take one for a refusal: nothing is destroyed because of a missing answer.
    """


class RelayError(UnreachableError):
    """pveproxy answered 595–599: it could not relay the call to the node that serves it.

    pveproxy (pve-http-server PVE/APIServer/AnyEvent.pm, `proxy_request`) forwards a call for
    another node with AnyEvent::HTTP and passes its status and reason on as they are. For an
    error of its own AnyEvent::HTTP makes up a status 590–599 and puts the error text in the
    reason ("595 - errors during connection establishment, proxy handshake", e.g. "No route
    to host" or "Connection refused"; "596 - errors during TLS negotiation, request sending
    and header processing", e.g. "Broken pipe"; 597 while receiving the body; 598 aborted;
    599 other). No node refused anything: the answer was lost on the way.
    """

    def __init__(self, call: ApiCall, status: int, reason: str) -> None:
        self.call = call
        self.status = status
        self.reason = reason.strip()
        super().__init__(
            f"{call.method} {call.path}: {status} {self.reason} (pveproxy could not relay the "
            "call to the node)"
        )


RELAY_STATUSES = range(595, 600)


class Api(Protocol):
    @property
    def endpoint(self) -> str:
        """`https://host:port`, for messages."""
        ...

    def call(self, call: ApiCall) -> Any:
        """Make the call; return the `data` of Proxmox's answer.

        Raises ApiError when Proxmox refuses, UnreachableError when there is no answer.
        """
        ...

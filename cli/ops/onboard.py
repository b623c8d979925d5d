"""Onboarding a node, step by step (docs/onboarding.md says the same for operators).

1. Check the input before touching anything: the CA's files, the node's name, where the
   host goes in the inventory (or that it is there already, agreeing with the options).
2. Fetch the host key the node offers, without logging in; compare it with
   --expect-host-key, the fleet's known_hosts, or the operator's eyes. A mismatch stops
   here, and nothing has been sent to the node.
3. Write the key to the fleet's known_hosts; log in accepting that key only.
4. Keep the node's certificate when it is good (this CA, exactly the names known for the
   node, the node's own key, less than two thirds of its lifetime gone), unless --renew.
   Otherwise the node makes a key and a CSR; the CA checks the CSR's signature and signs
   the names it knows; the certificate and the CA's certificate are installed; what was
   installed is read back.
5. Add the host to the inventory (a host already there is left as it is).

Errors: InputError (exit 2) for bad input and refused host keys, before anything has
changed; NodeError (exit 1) when the node cannot be reached or fails a step.
The five steps are one module (about 400 lines) because each checks what the one before
left: split, the order that keeps a refused host key from reaching the node would be
spread over files.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import paramiko
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from cli.edges import ssh
from cli.edges.ssh import NodeError, fingerprint
from cli.edges.templating import render_template
from cli.errors import InputError, near_miss
from cli.inventory.edit import noted
from cli.inventory.load import load_inventory
from cli.inventory.schema import DEFAULT_SSH_PORT, Host, Inventory
from cli.pki import node as remote
from cli.pki.addhost import (
    DEFAULT_USER,
    HostPlan,
    NewHost,
    commit_host,
    plan_new_host,
    read_inventory_texts,
)
from cli.pki.certs import (
    CertificateError,
    NodeNames,
    certificate_names,
    certificate_problems,
    dns_name_problem,
    pem,
    public_key_der,
    read_csr,
)
from cli.pki.paths import CA_FILE, CERT_FILE, KEY_FILE, PKI_DIR
from cli.pki.store import CertificateAuthority

FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")

# Asked with the key's type and fingerprint; True to trust it, False to stop, None when
# there is no terminal to ask on.
Confirm = Callable[[str, str], bool | None]
Say = Callable[[str], None]


@dataclass(frozen=True)
class Request:
    name: str
    inventory: Path
    known_hosts: Path
    address: str | None = None
    port: int | None = None
    user: str | None = None
    identity: Path | None = None
    expect_host_key: str | None = None
    group: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    renew: bool = False
    connect_timeout: float = 10.0
    command_timeout: float = 30.0


@dataclass(frozen=True)
class Outcome:
    inventory: Inventory  # as it reads once the host is in it
    host: Host
    certificate: x509.Certificate
    issued: bool  # False: the node's certificate was good and kept
    why: tuple[str, ...]  # why a new one was issued (empty: --renew, or there was none)


@dataclass(frozen=True)
class _Target:
    address: str
    port: int
    user: str
    key_file: Path | None
    plan: HostPlan | None  # None: already in the inventory


def check_fingerprint(text: str) -> str:
    """--expect-host-key as given, once it has OpenSSH's form; raises InputError."""
    value = text.strip()
    if not FINGERPRINT.fullmatch(value):
        raise InputError.single(
            "--expect-host-key",
            None,
            (),
            f"'{text}' is not a SHA-256 fingerprint as ssh-keygen -lf prints it"
            " (SHA256: and 43 characters of base64)",
        )
    return value


def onboard(
    request: Request, ca: CertificateAuthority, now: datetime, confirm: Confirm, say: Say
) -> Outcome:
    """Onboard `request.name` (see the module docstring)."""
    problem = dns_name_problem(request.name)
    if problem is not None or request.name.endswith("."):
        raise InputError.single(
            "NAME", None, (), f"'{request.name}' {problem or 'must not end with a dot'}"
        )
    expected = None
    if request.expect_host_key is not None:
        expected = check_fingerprint(request.expect_host_key)
    target = _target(request)
    try:
        names = NodeNames.of(request.name, [target.address])
    except CertificateError as error:
        raise InputError.single("--host", None, (), str(error)) from None

    host_key = _trusted_host_key(request, target, expected, confirm, say)
    client = ssh.connect(
        target.address,
        target.port,
        target.user,
        target.key_file,
        host_key,
        request.connect_timeout,
    )
    try:
        renew = "--renew" if request.renew else None
        cert, issued, why = certify(
            client, request.name, ca, names, now, say, renew, request.command_timeout
        )
    finally:
        client.close()

    if target.plan is not None:
        before = (
            load_inventory(request.inventory, render=render_template)
            if request.inventory.exists()
            else None
        )
        try:
            inventory = commit_host(target.plan, request.inventory, before)
        except InputError as error:
            again = "; the node has its certificate: run ctl onboard-node again"
            raise noted(error, again) from None
        say(f"{request.name}: added to the inventory ({target.plan.where})")
    else:
        inventory = load_inventory(request.inventory, render=render_template)
    return Outcome(inventory, inventory.host(request.name), cert, issued, why)


# --- 1. the input ---------------------------------------------------------------------------


def _target(request: Request) -> _Target:
    """Where the node is and how to log in, and where it goes in the inventory."""
    key_file = None
    if request.identity is not None:
        key_file = request.identity.expanduser().absolute()
        if not key_file.is_file():
            raise InputError.single(str(request.identity), None, (), "no such key file")
    inventory = (
        load_inventory(request.inventory, render=render_template)
        if request.inventory.exists()
        else None
    )
    if inventory is not None and request.name in inventory.names():
        return _existing(request, inventory.host(request.name), key_file)
    if request.address is None:
        hint = "" if inventory is None else near_miss(request.name, inventory.names())
        raise InputError.single(
            "--host",
            None,
            (),
            f"{request.name} is not in the inventory{hint}: say where it is with --host ADDRESS",
        )
    if inventory is not None:
        for host in inventory.hosts:
            if host.address == request.address and host.port == (request.port or DEFAULT_SSH_PORT):
                raise InputError.single(
                    str(request.inventory),
                    None,
                    (),
                    f"{request.address} is already the address of {host.name}:"
                    f" onboard {host.name}, or give {request.name} its own address",
                )
    new = NewHost(
        name=request.name,
        address=request.address,
        port=request.port,
        user=request.user,
        key_file=None if key_file is None else str(key_file),
        labels=dict(request.labels),
        group=request.group or "all",
    )
    plan = plan_new_host(read_inventory_texts(request.inventory, request.name), new)
    host = plan.host
    assert host.user is not None
    return _Target(host.address, host.port, host.user, key_file, plan)


def _existing(request: Request, host: Host, key_file: Path | None) -> _Target:
    """A host the inventory has: the options may repeat what it says, not change it."""
    differ = []
    if request.address is not None and request.address != host.address:
        differ.append(f"--host {request.address} (the inventory has {host.address})")
    if request.port is not None and request.port != host.port:
        differ.append(f"--port {request.port} (the inventory has {host.port})")
    if request.user is not None and request.user != (host.user or DEFAULT_USER):
        differ.append(f"--user {request.user} (the inventory has {host.user})")
    if request.group is not None and request.group not in host.groups:
        differ.append(f"--group {request.group} (it is in {', '.join(host.groups)})")
    for key, value in request.labels.items():
        if host.vars.labels.get(key) != value:
            now = host.vars.labels.get(key)
            differ.append(f"--labels {key}={value} (the inventory has {key}={now or '(none)'})")
    if differ:
        raise InputError.single(
            str(request.inventory),
            None,
            (),
            f"{request.name} is already in the inventory, and ctl onboard-node does not"
            f" change it: {'; '.join(differ)}. Edit the inventory, or leave the option out",
        )
    if key_file is None and host.private_key_file is not None:
        key_file = Path(host.private_key_file).expanduser()
    return _Target(host.address, host.port, host.user or DEFAULT_USER, key_file, None)


# --- 2 and 3. the host key ------------------------------------------------------------------


def _trusted_host_key(
    request: Request, target: _Target, expected: str | None, confirm: Confirm, say: Say
) -> paramiko.PKey:
    """The node's host key, once trusted; written to known_hosts if it was not there."""
    known = ssh.known_keys(request.known_hosts, target.address, target.port)
    offered = ssh.offered_host_key(target.address, target.port, request.connect_timeout, known)
    shown = f"{offered.get_name()} {fingerprint(offered)}"
    where = f"{request.name} ({ssh.known_hosts_name(target.address, target.port)})"
    if known and not any(key == offered for key in known):
        listed = ", ".join(f"{key.get_name()} {fingerprint(key)}" for key in known)
        raise InputError.single(
            str(request.known_hosts),
            None,
            (),
            f"has {listed} for {where}, but the node offers {shown}; refused before logging"
            " in. If the node was reinstalled, check the new key on its console and remove"
            f" the old line (ssh-keygen -R {ssh.known_hosts_name(target.address, target.port)}"
            f" -f {request.known_hosts})",
        )
    if expected is not None:
        if fingerprint(offered) != expected:
            raise InputError.single(
                "--expect-host-key",
                None,
                (),
                f"{where} offers {shown}, not {expected}; refused before logging in,"
                " nothing was sent to the node",
            )
        say(f"{request.name}: host key {shown} is the one expected")
    elif known:
        say(f"{request.name}: host key {shown} is in {request.known_hosts}")
    else:
        answer = confirm(where, shown)
        if answer is None:
            raise InputError.single(
                "--expect-host-key",
                None,
                (),
                f"{where} offers {shown}, and there is no terminal to confirm it on: compare it"
                " with the node's own (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on its"
                " console) and pass it as --expect-host-key",
            )
        if not answer:
            raise InputError.single(
                "host key", None, (), f"{shown} not confirmed; nothing was sent to the node"
            )
    if not known:
        ssh.add_known_host(request.known_hosts, target.address, target.port, offered)
        say(f"{request.name}: host key added to {request.known_hosts}")
    return offered


# --- 4. the certificate ---------------------------------------------------------------------


def certify(
    client: paramiko.SSHClient,
    name: str,
    ca: CertificateAuthority,
    names: NodeNames,
    now: datetime,
    say: Say,
    renew: str | None = None,
    timeout: float = 30.0,
) -> tuple[x509.Certificate, bool, tuple[str, ...]]:
    """Keep the node's certificate when it is good, else have the node make a key and CSR
    and install the certificate this CA signs for `names`; read it back. `renew`: why to
    replace even a good one (`--renew`). Returns the certificate, whether it was issued
    now, and why the old one was not kept. Onboarding and reconcile's renewal both run it.
    """
    state = remote.look(client, timeout)
    if state.uid != 0:
        raise NodeError(f"logged in as uid {state.uid}, not root: only root can write {PKI_DIR}")
    ca_pem = pem(ca.cert)
    why: tuple[str, ...] = ()
    current = _current(state, ca, names, now)
    if isinstance(current, x509.Certificate) and renew is None:
        if state.ca_pem != ca_pem or not _modes_right(state):
            remote.install(client, None, ca_pem, timeout)
        _verify_installed(remote.look(client, timeout), current, ca_pem)
        left = (current.not_valid_after_utc - now).days
        say(
            f"{name}: certificate kept (serial {current.serial_number:x}, {left} days"
            " left; --renew replaces it)"
        )
        return current, False, why
    if isinstance(current, tuple):
        why = current
    if not state.openssl:
        raise NodeError(
            "openssl is not installed on the node: install it there (apt-get install openssl,"
            " dnf install openssl) and run ctl onboard-node again; nothing was changed on it"
        )
    csr_pem = remote.make_csr(client, name, timeout)
    try:
        csr = read_csr(csr_pem)
        cert = ca.issue(csr, names, now, name)
    except CertificateError as error:
        raise NodeError(str(error)) from None
    remote.install(client, pem(cert), ca_pem, timeout)
    _verify_installed(remote.look(client, timeout), cert, ca_pem)
    reason = f" (the old one: {'; '.join(why)})" if why else f" ({renew})" if renew else ""
    say(
        f"{name}: certificate issued{reason}: serial {cert.serial_number:x},"
        f" {certificate_names(cert)}, valid until {cert.not_valid_after_utc:%Y-%m-%d}"
    )
    return cert, True, why


def _current(
    state: remote.NodeState, ca: CertificateAuthority, names: NodeNames, now: datetime
) -> x509.Certificate | tuple[str, ...] | None:
    """The node's certificate when it is good to keep; else why not (None: there is none)."""
    if state.node_pem is None:
        return None
    try:
        cert = x509.load_pem_x509_certificate(state.node_pem)
    except ValueError:
        return ("node.pem is not a PEM certificate",)
    key_der = None
    if state.node_pub is not None:
        try:
            key_der = public_key_der(state.node_pub)
        except ValueError:
            key_der = None
    if key_der is None:
        return ("node.key is missing or unreadable",)
    problems = certificate_problems(cert, ca.cert, names, now, key_der)
    return tuple(problems) if problems else cert


def _modes_right(state: remote.NodeState) -> bool:
    wanted = {
        KEY_FILE: remote.KEY_MODE,
        CERT_FILE: remote.CERT_MODE,
        CA_FILE: remote.CERT_MODE,
    }
    return all(state.modes.get(f) == (mode, 0) for f, mode in wanted.items())


def _verify_installed(state: remote.NodeState, cert: x509.Certificate, ca_pem: bytes) -> None:
    """Read back: the files are what was sent, with the right modes, owned by root."""
    problems = []
    if state.node_pem is None or _der(state.node_pem) != cert.public_bytes(
        serialization.Encoding.DER
    ):
        problems.append(f"{CERT_FILE} is not the certificate sent")
    if state.ca_pem is None or _der(state.ca_pem) != _der(ca_pem):
        problems.append(f"{CA_FILE} is not the CA's certificate")
    if state.node_pub is None or public_key_der(state.node_pub) != _spki(cert):
        problems.append(f"{KEY_FILE} is not the key of {CERT_FILE}")
    if not _modes_right(state):
        shown = ", ".join(f"{f} {m} uid {u}" for f, (m, u) in sorted(state.modes.items()))
        problems.append(f"modes are {shown or 'unknown'}")
    if problems:
        raise NodeError(f"read back from {PKI_DIR}: {'; '.join(problems)}")


def _der(pem_bytes: bytes) -> bytes:
    try:
        return x509.load_pem_x509_certificate(pem_bytes).public_bytes(serialization.Encoding.DER)
    except ValueError:
        return base64.b64encode(pem_bytes)  # never equal to a certificate's DER


def _spki(cert: x509.Certificate) -> bytes:
    return cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )

"""`ctl offboard-node NAME`: take a node out of the fleet, in an order a rerun can resume.

1. **Drain** (cli/ops/reconcile.py, as `ctl drain` plans it, make-before-break): each
   replica on the node is started elsewhere and serves before the old one stops, and the
   pass stops the node's shards. Refused before anything changes, unless `force`, while a
   replica the model needs could not be placed elsewhere (it would be lost), or while the
   node cannot be reached (its shards cannot be stopped).
2. **The node's key**: /etc/modelfleet/pki/node.key (and a half-made node.key.new) removed
   on the node when it can be reached; its certificate and the CA's stay (they are public).
3. **Revoke**: every certificate the CA's record (issued.json) says it issued to the node,
   its inventory name compared exactly (cli/pki/revocation.py `issued_to`), added to
   revoked.json and the CRL (cli/pki/store.py). Never one the node merely shows: the
   certificate it holds is read (when it can be reached) only to say so when the record
   does not list it as the node's; legacy entries that may be the node's are said too.
4. **Forget its host key**: its names (`ADDRESS`, `[ADDRESS]:PORT`) leave the fleet's
   known_hosts, unless another host of the inventory has the same address and port.
5. **The inventory**, last: the node's own lines and host_vars (cli/inventory/remove.py).
   The inventory is what names the node, so whatever came before is done when it is gone;
   a rerun finds it gone, says what is already done and does what is left (a certificate
   issued to it and not yet revoked).

Everything is planned first (`plan_offboard`, which changes nothing: the dry run's plan is
the run's), then `carry_out` does it, saying each step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import paramiko
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from cli.catalog.load import Catalog
from cli.cluster.snapshot import Reachability
from cli.edges import ssh
from cli.edges.files import atomic_write
from cli.errors import InputError, near_miss
from cli.inventory.edit import plan_node_removal, remove_node
from cli.inventory.load import Decrypt
from cli.inventory.remove import Removal
from cli.inventory.schema import Host, Inventory
from cli.ops.context import AppContext
from cli.ops.fleet import Fleet, gather_fleet, serving_addresses
from cli.ops.reconcile import Applied, OnRun, apply_plan, router_deployer
from cli.pki import node as remote
from cli.pki.addhost import DEFAULT_USER
from cli.pki.certs import serial_hex
from cli.pki.knownhosts import Forgotten, forget_hosts
from cli.pki.paths import KEY_FILE, PKI_DIR
from cli.pki.revocation import CertRecord, issued_to
from cli.pki.store import CRL_FILE, CertificateAuthority, issued_records, revoked_records
from cli.reconcile.planner import FORCED, Plan
from cli.routes.deploy import failure_text
from cli.routes.table import route_table

Say = Callable[[str], None]

REMOVE_KEY = f"""\
set -eu
d={PKI_DIR}
if [ -e "$d/{KEY_FILE}" ] || [ -e "$d/{KEY_FILE}.new" ]; then
  rm -f "$d/{KEY_FILE}" "$d/{KEY_FILE}.new"; echo removed
else
  echo absent
fi
"""


@dataclass(frozen=True)
class OffboardPlan:
    node: str
    host: Host | None  # None: no longer in the inventory
    drain: Plan | None  # the drain pass; None when the node is gone from the inventory
    would_lose: tuple[str, ...]  # replicas no replacement could be placed for (refused)
    loses: tuple[str, ...]  # with --force: the replicas stopped with nothing in their place
    unreachable: str | None  # why the node cannot be reached now
    revoke: tuple[CertRecord, ...]  # certificates to revoke now
    revoked: tuple[CertRecord, ...]  # revoked before
    removal: Removal | None
    known_hosts: Path
    forgotten: Forgotten | None  # None: nothing of the node in known_hosts
    names: tuple[str, ...] = ()  # the known_hosts names forgotten
    shared_with: str | None = None  # another host with the same address: its key stays
    unproven: tuple[CertRecord, ...] = ()  # legacy entries that may be the node's: kept
    shown: str | None = None  # the serial the node holds, when not recorded as its: kept

    @property
    def refusals(self) -> list[str]:
        """Why this cannot be done without --force (empty: it can)."""
        why = []
        if self.would_lose:
            why.append(
                f"{self.node} runs {', '.join(self.would_lose)}, which no other node can take:"
                " offboarding would lose them (--force stops them anyway)"
            )
        if self.unreachable is not None and self.host is not None:
            why.append(
                f"{self.node} cannot be reached ({self.unreachable}): its shards cannot be"
                " stopped and its key not removed (--force offboards it anyway; whatever runs"
                " there keeps running until the node is switched off)"
            )
        return why

    @property
    def done_already(self) -> bool:
        return self.host is None and not self.revoke and self.forgotten is None


@dataclass
class Done:
    lines: list[str] = field(default_factory=list)
    complete: bool = True


def plan_offboard(
    options: AppContext,
    node: str,
    inventory_path: Path,
    inventory: Inventory,
    ca: CertificateAuthority,
    drain: Callable[[], tuple[Fleet, Plan]] | None,
    now: datetime,
    decrypt: Decrypt | None = None,
    *,
    ask_node: bool = True,
) -> OffboardPlan:
    """What offboarding `node` does (changes nothing). `drain`: the fleet and its drain
    plan, asked only when the node is in the inventory. `ask_node`: read the certificate
    the node holds (over SSH); False with a facts snapshot, which contacts nothing."""
    known_hosts = options.known_hosts(inventory_path)
    present = node in inventory.names()
    host = inventory.host(node) if present else None
    mine = issued_to(
        node, issued_records(ca.directory), inventory.names(), host.address if host else None
    )
    serials = {r.serial for r in mine.issued}
    every_revoked = revoked_records(ca.directory)
    revoked = tuple(r for r in every_revoked if r.serial in serials or r.node == node)
    done = {r.serial for r in revoked}
    revoke = tuple(dict.fromkeys(_revocation(r, now) for r in mine.issued if r.serial not in done))
    # What may be the node's but is revoked already needs no word.
    unproven = tuple(r for r in mine.unproven if r.serial not in {v.serial for v in every_revoked})
    if host is None:
        if not mine.issued and not revoked and not unproven:
            raise InputError.single(
                inventory.source, None, (),
                f"no host '{node}' in this inventory{near_miss(node, inventory.names())}, and"
                f" the CA in {ca.directory} has no certificate of it: nothing to offboard",
            )  # fmt: skip
        return OffboardPlan(
            node, None, None, (), (), None, revoke, revoked, None, known_hosts, None,
            unproven=unproven,
        )  # fmt: skip
    assert drain is not None
    fleet, the_plan = drain()
    view = next((n for n in fleet.snapshot.nodes if n.name == node), None)
    unreachable = None
    if view is not None and view.reachability is not Reachability.READY:
        unreachable = view.unreachable_reason or view.reachability.value.lower()
    would_lose = tuple(leave.replica for leave in the_plan.leaves if leave.undrained)
    loses = tuple(
        stop.replica
        for stop in the_plan.drains
        if stop.reason == FORCED and any(s.node == node for s in stop.shards)
    )
    shown = None
    if ask_node and unreachable is None:
        shown = _held_serial(options, host, known_hosts, ca)
        if shown in serials:
            shown = None
    names, shared = _host_key_names(inventory, host)
    forgotten = None
    if names and known_hosts.exists():
        found = forget_hosts(known_hosts.read_text(encoding="utf-8"), names)
        forgotten = found if found.lines else None
    return OffboardPlan(
        node, host, the_plan, would_lose, loses, unreachable, revoke, revoked,
        plan_node_removal(inventory_path, node, decrypt), known_hosts, forgotten, names, shared,
        unproven, shown,
    )  # fmt: skip


def _revocation(record: CertRecord, now: datetime) -> CertRecord:
    return CertRecord(record.serial, record.node, now)


def _host_key_names(inventory: Inventory, host: Host) -> tuple[tuple[str, ...], str | None]:
    """The known_hosts names of `host`, unless another host has the same address and port."""
    for other in inventory.hosts:
        if other.name != host.name and (other.address, other.port) == (host.address, host.port):
            return (), other.name
    return (ssh.known_hosts_name(host.address, host.port),), None


def _held_serial(
    options: AppContext, host: Host, known_hosts: Path, ca: CertificateAuthority
) -> str | None:
    """The serial of the certificate the node holds, when it can be read and this CA signed
    it: something to say, never a proof of whose it is (a node can show any of the CA's)."""
    try:
        client = _login(options, host, known_hosts)
    except ssh.NodeError:
        return None
    try:
        state = remote.look(client, options.command_timeout)
    except (ssh.NodeError, ssh.CommandTimeoutError, ssh.OutputLimitError):
        return None
    finally:
        client.close()
    if state.node_pem is None:
        return None
    try:
        cert = x509.load_pem_x509_certificate(state.node_pem)
    except ValueError:
        return None
    if cert.issuer != ca.cert.subject:
        return None
    try:
        cert.verify_directly_issued_by(ca.cert)
    except (ValueError, TypeError, InvalidSignature):
        return None
    return serial_hex(cert)


def _login(options: AppContext, host: Host, known_hosts: Path) -> paramiko.SSHClient:
    keys = ssh.known_keys(known_hosts, host.address, host.port)
    if not keys:
        raise ssh.NodeError(f"no host key of it in {known_hosts}")
    key_file = None if host.private_key_file is None else Path(host.private_key_file).expanduser()
    return ssh.connect(
        host.address, host.port, host.user or DEFAULT_USER, key_file, keys[0],
        options.connect_timeout,
    )  # fmt: skip


def carry_out(
    options: AppContext,
    plan: OffboardPlan,
    fleet: Fleet | None,
    inventory_path: Path,
    catalog: Catalog | None,
    ca: CertificateAuthority,
    now: datetime,
    on_run: OnRun,
    say: Say,
    decrypt: Decrypt | None = None,
    *,
    force: bool = False,
) -> Done:
    """Do what `plan` says, in its order; stop before the certificate when the drain left a
    replica of the node serving, unless `force` (then it is said, and the rest done)."""
    done = Done()
    if plan.drain is not None and fleet is not None and not plan.drain.empty:
        applied = apply_plan(options, fleet, plan.drain, inventory_path, catalog, on_run, say)
        done.lines += applied.lines
        left = _left_on_node(applied, plan)
        if left and force:
            done.lines.append(f"--force: {', '.join(left)} may still run on {plan.node}")
        elif left:
            done.lines.append(
                f"NOT OFFBOARDED {plan.node}: {', '.join(left)} still serve there (see above);"
                " it stays cordoned, its certificate valid and in the inventory: run again"
            )
            done.complete = False
            return done
    if plan.host is not None and plan.drain is not None:
        done.lines.append(f"{plan.node}: drained")
    if plan.host is not None and plan.unreachable is None:
        done.lines.append(_remove_key(options, plan))
    if plan.revoke:
        new = ca.revoke(plan.revoke, now)
        serials = ", ".join(r.serial for r in new) or "none new"
        done.lines.append(
            f"{plan.node}: certificate revoked: serial {serials} (CRL {ca.directory / CRL_FILE})"
        )
        if fleet is not None and catalog is not None:
            told = _tell_routers(options, fleet, inventory_path, catalog, ca, on_run)
            if told is not None:
                done.lines.append(told)
    if plan.forgotten is not None:
        current = plan.known_hosts.read_text(encoding="utf-8")
        again = forget_hosts(current, plan.names)
        mode = plan.known_hosts.stat().st_mode & 0o7777
        atomic_write(plan.known_hosts, again.text, mode)
        done.lines.append(f"{plan.node}: host key forgotten ({plan.known_hosts})")
    if plan.removal is not None:
        removal = remove_node(inventory_path, plan.node, decrypt)
        done.lines.append(f"{plan.node}: removed from the inventory ({', '.join(removal.lines)})")
    return done


def _tell_routers(
    options: AppContext,
    fleet: Fleet,
    inventory_path: Path,
    catalog: Catalog,
    ca: CertificateAuthority,
    on_run: OnRun,
) -> str | None:
    """The routers' trust bundle with the new CRL, now: they refuse the revoked certificate
    from here on (docs/routing.md). The routes are the fleet's as it is after the drain,
    gathered again. None where the inventory has no router."""
    deployer = router_deployer(options, fleet, inventory_path, on_run, ca_dir=ca.directory)
    if deployer is None:
        return None
    now_fleet = gather_fleet(fleet.inventory, inventory_path, options)
    addresses, _ = serving_addresses(now_fleet.inventory)
    failures = deployer.push(route_table(catalog, now_fleet.snapshot, addresses))
    if failures:
        return f"routers not told of the revocation: {failure_text(failures)}; run again"
    return f"routers told of the revocation: {', '.join(deployer.hosts)}"


def _left_on_node(applied: Applied, plan: OffboardPlan) -> list[str]:
    """The node's replicas the pass did not stop: left undrained, or a stop that failed."""
    assert plan.drain is not None
    mine = {
        stop.replica
        for stop in (*plan.drain.stops, *plan.drain.drains)
        if any(s.node == plan.node for s in stop.shards)
    }
    mine |= {leave.replica for leave in plan.drain.leaves if leave.undrained}
    outcome = applied.outcome
    return sorted(mine & (outcome.undrained.keys() | outcome.stop_failures.keys()))


def _remove_key(options: AppContext, plan: OffboardPlan) -> str:
    assert plan.host is not None
    key = f"{PKI_DIR}/{KEY_FILE}"
    try:
        client = _login(options, plan.host, plan.known_hosts)
    except ssh.NodeError as error:
        return f"{plan.node}: its key {key} is left on it: {error}"
    try:
        result = ssh.run(client, REMOVE_KEY, options.command_timeout)
    except (ssh.NodeError, ssh.CommandTimeoutError, ssh.OutputLimitError) as error:
        return f"{plan.node}: its key {key} is left on it: {error}"
    finally:
        client.close()
    if result.status != 0:
        return f"{plan.node}: its key {key} is left on it: {result.error_line()}"
    if result.stdout.strip() == b"removed":
        return f"{plan.node}: its key {key} removed"
    return f"{plan.node}: no key at {key} on it (nothing to remove)"

"""The steps of `ctl provision-node`, each with a bounded wait and its progress reported.

find the VM by name → (none) nextid + full clone, retried when the vmid was taken meanwhile
→ wait for the clone task → configure → resize the boot disk → start → wait for the guest
agent's address.

Idempotent by name: a VM that has the name already is taken from where it stands
(configured? big enough? running? an address?) only when it is proved to be one ctl
provisioned, by the same run marker deprovisioning reads (`plan.not_provisioned`): a
same-named VM without it is someone else's and is refused, exit 1, with nothing sent to it
but reads. Several with the name is an error.

The clone carries this run's marker (`modelfleet-run-<id>` in its description). Whatever
Proxmox refuses after the clone, Ctrl-C included, stops and destroys the VM this run made
(never one it found), after waiting for a clone task that Proxmox keeps running, and only
once its config, read back right before the stop and again before the destroy, holds the
marker: a vmid that holds anything else is someone else's, and is left alone and reported.
A missing answer (a lost connection, pveproxy's 595–599 when it cannot reach the node) is
retried while waiting and never destroys anything: when it outlasts the step's timeout the
VM is left, and rerunning goes on from where it stands. When the cleanup fails, the result
says which vmid is left and how to remove it.

At about 640 lines, the steps and their cleanup stay one module: the cleanup's proof that
a VM is ours depends on what each step recorded, and reads best beside it.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from cli.provision import plan
from cli.provision.api import Api, ApiError, ProxmoxError, UnreachableError
from cli.provision.plan import ProvisionOptions, VmRef

T = TypeVar("T")

LOG_TAIL = 12  # lines of a failed task's log shown
TRANSIENT_LOCKS = frozenset({"clone", "create"})  # locks a task holds and then drops
AGENT_NOT_RUNNING = "QEMU guest agent is not running"  # qemu-server PVE/QemuServer/Agent.pm
NO_AGENT = "No QEMU guest agent configured"
NOT_MAPPED = "config for non-mapped devices"  # PVE/API2/Qemu.pm check_hostpci_perm


@dataclass(frozen=True)
class Limits:
    wait: float = 600.0  # each wait: a task, a lock, the guest agent
    poll_first: float = 0.25
    poll_max: float = 5.0
    report_every: float = 15.0
    clone_attempts: int = 5


class Reporter(Protocol):
    def step(self, text: str) -> None: ...

    def waiting(self, text: str, elapsed: float, limit: float) -> None: ...

    def warn(self, text: str) -> None: ...


@dataclass(frozen=True)
class Outcome:
    name: str
    vmid: int
    node: str
    address: str
    created: bool


class ProvisionError(Exception):
    """The provisioning stopped. `cleanup` says what became of the VM this run made."""

    def __init__(
        self,
        message: str,
        *,
        details: Sequence[str] = (),
        hints: Sequence[str] = (),
        code: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)
        self.hints = list(hints)
        self.code = code
        self.cleanup: list[str] = []
        self.left_over: int | None = None  # the vmid still there when cleanup failed
        self.no_answer = False  # Proxmox did not answer (not a refusal): nothing is destroyed


class _TaskFailedError(Exception):
    def __init__(self, exitstatus: str) -> None:
        super().__init__(exitstatus)
        self.exitstatus = exitstatus


@dataclass
class _Made:
    """The VM this run asked Proxmox to clone: the only one it may destroy."""

    vmid: int
    node: str
    upid: str | None = None  # None: the clone request got no answer
    clone_over: bool = False


@dataclass(frozen=True)
class _Entry:
    vmid: int
    node: str
    name: str | None
    template: bool
    lock: str | None


@dataclass
class _Poll:
    last_problem: str | None = None
    warned: bool = False
    unanswered: bool = False  # the last try got no answer (a lost connection, a 59x)
    notes: list[str] = field(default_factory=list)


def explain(problem: ProxmoxError) -> ProvisionError:
    """A Proxmox refusal or a missing answer, said for an operator, with what to do."""
    if isinstance(problem, UnreachableError):
        error = ProvisionError(str(problem))
        error.no_answer = True
        return error
    assert isinstance(problem, ApiError)
    text = problem.describe()
    if problem.status == 401:
        return ProvisionError(
            f"Proxmox refused the API token: {problem.message}",
            hints=[
                "check PROXMOX_TOKEN_ID / PROXMOX_TOKEN_SECRET (or --token-file): "
                "user@realm!name and the secret shown once when the token was made"
            ],
            code=2,
        )
    if NOT_MAPPED in problem.message:
        return ProvisionError(
            f"Proxmox refused the GPU: {problem.message}",
            hints=[
                "only root@pam may pass a raw PCI device, and an API token is never root@pam: "
                "make a PCI resource mapping (Datacenter → Resource Mappings, or "
                "`pvesh create /cluster/mapping/pci`), give the token Mapping.Use on "
                "/mapping/pci/NAME, and pass --gpu NAME"
            ],
        )
    if problem.status == 403:
        return ProvisionError(
            f"Proxmox refused: {text}",
            hints=[
                "the token lacks this privilege; a token with privilege separation needs "
                "its own ACL entries (pveum acl modify PATH --tokens user@realm!name --roles …)"
            ],
        )
    return ProvisionError(f"Proxmox refused: {text}")


class ProxmoxSteps:
    """What provisioning and deprovisioning both do on Proxmox: find VMs by name, read
    configs and status, wait for tasks and locks with bounded back-off."""

    def __init__(
        self,
        api: Api,
        name: str,
        node: str,
        reporter: Reporter,
        *,
        limits: Limits = Limits(),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.name = name  # the VM's name: the node's
        self.node = node  # where tasks run when a UPID does not say
        self.reporter = reporter
        self.limits = limits
        self.clock = clock
        self.sleep = sleep

    def _entries(self) -> list[_Entry]:
        """Every VM in the cluster, names filled in from configs where resources lacks them.

        /cluster/resources takes names and the template flag from pvestatd's RRD data, so a
        VM a few seconds old has none there yet; its config has.
        """
        data = self.api.call(plan.list_vms_call())
        entries: list[_Entry] = []
        for item in data if isinstance(data, list) else []:
            if not isinstance(item, Mapping) or item.get("type") != "qemu":
                continue
            try:
                vmid, node = int(item["vmid"]), str(item["node"])
            except (KeyError, TypeError, ValueError):
                continue
            name = item.get("name")
            template = str(item.get("template", "0")) == "1"
            lock = item.get("lock")
            if not name:
                config = self._config_or_none(node, vmid)
                if config is None:
                    continue
                name = config.get("name")
                template = str(config.get("template", "0")) == "1"
                lock = config.get("lock")
            entries.append(
                _Entry(
                    vmid, node, str(name) if name else None, template, str(lock) if lock else None
                )
            )
        return entries

    def _find(self, entries: list[_Entry]) -> _Entry | None:
        """The VM with our name; None when there is none; an error when there are several.

        A clone in progress has no name yet (its config is Proxmox's temporary `lock: clone`
        file): an interrupted run's clone may be ours, so those are waited for first.
        """
        name = self.name
        deadline = self.clock() + self.limits.wait
        while True:
            named = [entry for entry in entries if entry.name == name]
            if len(named) > 1:
                where = ", ".join(f"vmid {e.vmid} on {e.node}" for e in named)
                raise ProvisionError(
                    f"{len(named)} VMs are named {name}: {where}",
                    hints=["remove or rename the extra ones; ctl does not guess which is the node"],
                )
            cloning = [e for e in entries if e.name is None and e.lock in TRANSIENT_LOCKS]
            if named or not cloning:
                return named[0] if named else None
            if self.clock() >= deadline:
                return None
            self.reporter.step(
                "waiting for clones in progress to get their names: vmid "
                + ", ".join(str(e.vmid) for e in cloning)
            )
            self.sleep(self.limits.poll_max)
            entries = self._entries()

    def _poll(self, what: str, probe: Callable[[_Poll], T | None], limit: float) -> T:
        """Call `probe` until it returns something, backing off, for `limit` seconds at most.

        A missing answer (UnreachableError: a lost or refused connection, a timeout, or
        pveproxy's 595–599 when it cannot reach the node) is a blip while waiting: it is
        retried, not fatal. Giving up when the last try got no answer is `no_answer`.
        """
        state = _Poll()
        start = self.clock()
        delay = self.limits.poll_first
        next_report = start + self.limits.report_every
        while True:
            try:
                result = probe(state)
                state.unanswered = False
            except UnreachableError as problem:
                state.last_problem = str(problem)
                state.unanswered = True
                if not state.warned:
                    self.reporter.warn(f"{problem}; retrying while {what}")
                    state.warned = True
                result = None
            if result is not None:
                return result
            now = self.clock()
            if now - start >= limit:
                detail = f" (last: {state.last_problem})" if state.last_problem else ""
                gave_up = ProvisionError(f"gave up after {limit:.0f} s {what}{detail}")
                gave_up.no_answer = state.unanswered
                raise gave_up
            if now >= next_report:
                self.reporter.waiting(what, now - start, limit)
                next_report += self.limits.report_every
            self.sleep(min(delay, max(0.0, start + limit - now)))
            delay = min(delay * 1.5, self.limits.poll_max)

    def _task(
        self, upid: str, what: str, *, node: str | None = None, limit: float | None = None
    ) -> str:
        """Wait for a task to stop; its exitstatus when it succeeded, else _TaskFailedError."""
        parsed = plan.parse_upid(upid)
        task_node = parsed.node if parsed else (node or self.node)
        self.reporter.step(f"waiting for {what} ({upid})")

        def probe(_state: _Poll) -> str | None:
            status = self._call_dict(plan.task_status_call(task_node, upid))
            if status.get("status") != "stopped":
                return None
            return str(status.get("exitstatus", ""))

        exitstatus = self._poll(
            f"waiting for {what}", probe, self.limits.wait if limit is None else limit
        )
        if not plan.exit_ok(exitstatus):
            if what != "the clone":
                raise ProvisionError(
                    _failed(what, exitstatus), details=self._log_tail(upid, task_node)
                )
            raise _TaskFailedError(exitstatus)
        if exitstatus != "OK":
            self.reporter.warn(f"{what} ended with {exitstatus} (success)")
        return exitstatus

    def _log_tail(self, upid: str, node: str) -> list[str]:
        parsed = plan.parse_upid(upid)
        try:
            lines = self.api.call(plan.task_log_call(parsed.node if parsed else node, upid))
        except ProxmoxError as problem:
            return [f"(the task log could not be read: {problem})"]
        texts = (
            [str(line.get("t", "")) for line in lines if isinstance(line, Mapping)]
            if isinstance(lines, list)
            else []
        )
        return [f"task log: {text}" for text in texts[-LOG_TAIL:]]

    def _wait_unlocked(self, vm: VmRef, *, missing_ok: bool = False) -> None:
        def probe(state: _Poll) -> bool | None:
            if missing_ok:
                found = self._config_or_none(vm.node, vm.vmid)
                if found is None:
                    return True
                config = found
            else:
                config = self._call_dict(plan.config_get_call(vm.node, vm.vmid))
            lock = config.get("lock")
            if not lock:
                return True
            if str(lock) not in TRANSIENT_LOCKS:
                raise ProvisionError(
                    f"vmid {vm.vmid} is locked ({lock}): run this again once it is unlocked"
                )
            if not state.notes:
                self.reporter.step(f"vmid {vm.vmid} is locked ({lock}): waiting for it to clear")
                state.notes.append(str(lock))
            return None

        self._poll(f"waiting for the lock on vmid {vm.vmid} to clear", probe, self.limits.wait)

    def _call_dict(self, call: plan.ApiCall) -> dict[str, Any]:
        data = self.api.call(call)
        return dict(data) if isinstance(data, Mapping) else {}

    def _config_or_none(self, node: str, vmid: int) -> dict[str, Any] | None:
        try:
            return self._call_dict(plan.config_get_call(node, vmid))
        except ApiError as error:
            if "does not exist" in error.message:
                return None
            raise

    def _running(self, vm: VmRef) -> bool:
        return self._call_dict(plan.vm_status_call(vm.node, vm.vmid)).get("status") == "running"


class Provisioner(ProxmoxSteps):
    def __init__(
        self,
        api: Api,
        options: ProvisionOptions,
        reporter: Reporter,
        *,
        limits: Limits = Limits(),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        run_id: str | None = None,
    ) -> None:
        super().__init__(
            api, options.name, options.node, reporter, limits=limits, clock=clock, sleep=sleep
        )
        self.run_id = run_id or secrets.token_hex(6)
        self.marker = plan.run_marker(self.run_id)
        self.options = options
        self._made: _Made | None = None

    # --- the whole run ---------------------------------------------------------------------

    def run(self) -> Outcome:
        try:
            return self._run()
        except KeyboardInterrupt:
            error = ProvisionError("interrupted")
        except ProvisionError as failure:
            error = failure
        except ProxmoxError as problem:
            error = explain(problem)
        if self._made is not None:
            if error.no_answer:
                self._unanswered(self._made, error)
            else:
                self._discard(self._made, error)
        raise error

    def _run(self) -> Outcome:
        options = self.options
        self.reporter.step(f"looking for a VM named {options.name} on {self.api.endpoint}")
        entries = self._entries()
        found = self._find(entries)
        if found is None:
            template = self._template(entries)
            vm = self._clone(template)
            created = True
        else:
            vm = VmRef(found.vmid, found.node, found.name)
            created = False
            if found.template:
                raise ProvisionError(
                    f"{options.name} (vmid {vm.vmid}) is a template, not a node", code=2
                )
            self._wait_unlocked(vm)
        config = self._call_dict(plan.config_get_call(vm.node, vm.vmid))
        if not created:
            self._prove_provisioned(vm, config)
            self.reporter.step(
                f"{options.name} exists: vmid {vm.vmid} on {vm.node}; going on from where it stands"
            )
        running = self._running(vm)
        self._configure(vm, config, running, created)
        self._resize(vm, config, created)
        if running:
            self.reporter.step(f"vmid {vm.vmid} is running already")
        else:
            self.reporter.step(f"starting vmid {vm.vmid}")
            self._task(self.api.call(plan.start_call(vm.node, vm.vmid)), "the start")
        address = self._address(vm)
        return Outcome(options.name, vm.vmid, vm.node, address, created)

    # --- finding ---------------------------------------------------------------------------

    def _prove_provisioned(self, vm: VmRef, config: Mapping[str, Any]) -> None:
        """Raise (exit 1, nothing sent but reads) unless `config` is a VM ctl cloned under this
        name: a same-named VM without the run marker is someone else's, never adopted."""
        why = plan.not_provisioned(config, self.options.name)
        if why is not None:
            raise ProvisionError(
                f"vmid {vm.vmid} on node {vm.node} is named {self.options.name} but is not a VM"
                f" ctl provisioned: {why} (found: {plan.found_text(config)}); nothing was"
                " changed",
                hints=[
                    "provision under another name, or rename or remove that VM in Proxmox if"
                    " it is not needed"
                ],
            )

    def _template(self, entries: list[_Entry]) -> VmRef:
        wanted = self.options.template
        if self.options.template_vmid is not None:
            matches = [e for e in entries if e.vmid == self.options.template_vmid]
            what = f"vmid {wanted}"
        else:
            matches = [e for e in entries if e.name == wanted]
            what = f"VM named {wanted}"
        if not matches:
            raise ProvisionError(f"no template: the cluster has no {what}", code=2)
        if len(matches) > 1:
            where = ", ".join(f"vmid {e.vmid} on {e.node}" for e in matches)
            raise ProvisionError(
                f"several VMs are named {wanted}: {where}", hints=["pass --template VMID"], code=2
            )
        entry = matches[0]
        if not entry.template:
            self.reporter.warn(f"vmid {entry.vmid} is not a template; cloning it all the same")
        return VmRef(entry.vmid, entry.node, entry.name)

    # --- cloning ---------------------------------------------------------------------------

    def _clone(self, template: VmRef) -> VmRef:
        options = self.options
        label = template.name or f"vmid {template.vmid}"
        source = f"{label} (vmid {template.vmid} on {template.node})"
        for _attempt in range(self.limits.clone_attempts):
            try:
                newid = plan.parse_nextid(self.api.call(plan.nextid_call()))
            except ValueError as error:
                raise ProvisionError(str(error)) from None
            self.reporter.step(
                f"cloning {source} to vmid {newid} on {options.node} (full clone, "
                f"marked {self.marker})"
            )
            self._made = _Made(newid, options.node)
            call = plan.clone_call(options, template.node, template.vmid, newid, self.marker)
            try:
                upid = self.api.call(call)
            except ApiError as error:
                self._made = None  # refused before its worker started: nothing was made
                if plan.vmid_taken(error.message, newid):
                    self._retry_note(newid)
                    continue
                raise
            self._made.upid = str(upid)
            try:
                self._task(str(upid), "the clone", node=template.node)
            except _TaskFailedError as failed:
                self._made.clone_over = True
                if plan.vmid_taken(failed.exitstatus, newid):
                    self._made = None  # the other VM is not ours to touch
                    self._retry_note(newid)
                    continue
                raise ProvisionError(
                    _failed("the clone", failed.exitstatus),
                    details=self._log_tail(str(upid), template.node),
                ) from None
            self._made.clone_over = True
            return VmRef(newid, options.node, options.name)
        raise ProvisionError(
            f"every vmid /cluster/nextid offered was taken before the clone "
            f"({self.limits.clone_attempts} attempts): something else is creating VMs fast"
        )

    def _retry_note(self, newid: int) -> None:
        self.reporter.warn(
            f"vmid {newid} was taken between /cluster/nextid and the clone "
            "(nextid reserves nothing); asking for another"
        )

    # --- configuring, resizing -------------------------------------------------------------

    def _configure(
        self, vm: VmRef, config: Mapping[str, Any], running: bool, created: bool
    ) -> None:
        changes = plan.config_changes(config, plan.desired_config(self.options))
        if not changes:
            self.reporter.step(f"vmid {vm.vmid} is configured as asked")
            return
        keys = ", ".join(sorted(changes))
        if running and not created:
            self.reporter.warn(
                f"vmid {vm.vmid} is running and its config differs ({keys}): left as is; "
                "shut it down and run this again to apply"
            )
            return
        self.reporter.step(f"configuring vmid {vm.vmid}: {keys}")
        self.api.call(plan.config_set_call(vm.node, vm.vmid, changes))

    def _resize(self, vm: VmRef, config: Mapping[str, Any], created: bool) -> None:
        disk = self.options.disk
        key = plan.boot_disk(config)
        if key is None:
            self.reporter.warn(f"vmid {vm.vmid} has no boot disk ctl can tell: not resized")
            return
        size = plan.drive_size(str(config[key]))
        if size is None:
            self.reporter.warn(f"the size of {key} is not in its config: not resized")
            return
        if disk.relative:
            if not created:
                self.reporter.step(
                    f"{key} is {plan.human_size(size)}; --disk {disk.text} is relative to the "
                    "template, so it is applied only by the run that clones"
                )
                return
            target = size + disk.bytes
        else:
            target = disk.bytes
        if size >= target:
            more = " (disks do not shrink)" if size > target else ""
            self.reporter.step(f"{key} is {plan.human_size(size)} already{more}")
            return
        self.reporter.step(
            f"growing {key} from {plan.human_size(size)} to {plan.human_size(target)}"
        )
        answer = self.api.call(plan.resize_call(vm.node, vm.vmid, key, disk.text))
        if answer:  # a UPID since qemu-server 8 made resize a task; null before
            self._task(str(answer), "the resize")

    # --- waiting ---------------------------------------------------------------------------

    def _address(self, vm: VmRef) -> str:
        self.reporter.step(
            f"waiting for the guest agent of vmid {vm.vmid} to report an address "
            f"(up to {self.limits.wait:.0f} s)"
        )

        def probe(state: _Poll) -> str | None:
            try:
                data = self.api.call(plan.agent_interfaces_call(vm.node, vm.vmid))
            except ApiError as error:
                if AGENT_NOT_RUNNING in error.message:
                    state.last_problem = error.message
                    return None  # booting: "not yet"
                if NO_AGENT in error.message:
                    raise ProvisionError(
                        f"vmid {vm.vmid}: {error.message}",
                        hints=["enable it (agent=1) and install qemu-guest-agent in the template"],
                    ) from None
                raise
            address = plan.pick_address(data)
            if address is None:
                state.last_problem = "the agent reports no usable address yet"
            return address

        return self._poll("waiting for the guest agent's address", probe, self.limits.wait)

    # --- cleanup ---------------------------------------------------------------------------

    def _discard(self, made: _Made, error: ProvisionError) -> None:
        """Stop and destroy the VM this run made; say what became of it in `error.cleanup`."""
        try:
            if made.upid is not None and not made.clone_over:
                self.reporter.step(
                    f"the clone to vmid {made.vmid} keeps running on Proxmox: waiting for it "
                    "to end before removing the VM"
                )
                with contextlib.suppress(_TaskFailedError):
                    self._task(made.upid, "the clone")
                made.clone_over = True
            if made.upid is None:  # the clone request was interrupted: wait for a clone
                self._wait_unlocked(VmRef(made.vmid, made.node), missing_ok=True)
            if not self._ours(made, error):
                return
            self.reporter.step(f"removing the half-made VM: vmid {made.vmid}")
            if self._running(VmRef(made.vmid, made.node)):
                if not self._ours(made, error):
                    return
                self._task(self.api.call(plan.stop_call(made.node, made.vmid)), "the stop")
            if not self._ours(made, error):
                return
            self._task(self.api.call(plan.destroy_call(made.node, made.vmid)), "the destroy")
            error.cleanup.append(f"removed the half-made VM (vmid {made.vmid})")
        except KeyboardInterrupt:
            self._left(made, error, "interrupted while removing it")
        except (ProvisionError, _TaskFailedError, ProxmoxError) as problem:
            reason = problem.message if isinstance(problem, ProvisionError) else str(problem)
            if isinstance(problem, ProvisionError) and problem.details:
                reason += "\n" + "\n".join(problem.details)
            self._left(made, error, f"could not remove it: {reason}")

    def _ours(self, made: _Made, error: ProvisionError) -> bool:
        """Read the config back now: True when it holds this run's marker.

        Otherwise say what became of the vmid in `error.cleanup`: gone, or someone else's
        (left alone, with what it holds; exit 1).
        """
        config = self._config_or_none(made.node, made.vmid)
        if config is None:
            error.cleanup.append(f"nothing is left of vmid {made.vmid}: Proxmox removed it")
            return False
        if plan.marked(config, self.marker):
            return True
        error.code = 1
        error.cleanup.append(
            f"vmid {made.vmid} on node {made.node} is not the VM this run made: its description "
            f"lacks {self.marker} (found: {plan.found_text(config)}); left alone"
        )
        return False

    def _unanswered(self, made: _Made, error: ProvisionError) -> None:
        """No answer from Proxmox is not a refusal: the VM is left as it is, never destroyed."""
        error.left_over = made.vmid
        if made.upid is None:
            error.cleanup.append(
                f"vmid {made.vmid} ({self.options.name}) may have been made on node "
                f"{made.node}: the clone got no answer, so ctl removed nothing"
            )
        else:
            error.cleanup.append(
                f"vmid {made.vmid} ({self.options.name}) is left on node {made.node}: Proxmox "
                "did not answer, so ctl removed nothing"
            )
        error.cleanup.append("run the same command again to go on from where it stands")
        error.cleanup += plan.removal_commands(made.node, made.vmid)

    def _left(self, made: _Made, error: ProvisionError, why: str) -> None:
        error.left_over = made.vmid
        error.cleanup.append(
            f"vmid {made.vmid} ({self.options.name}) is left on node {made.node}; {why}"
        )
        error.cleanup += plan.removal_commands(made.node, made.vmid)

    # --- small helpers ---------------------------------------------------------------------


def _failed(what: str, exitstatus: str) -> str:
    """`the clone failed: …`, without Proxmox's own "clone failed: " in front of the reason."""
    noun = what.removeprefix("the ")
    return f"{what} failed: {exitstatus.removeprefix(f'{noun} failed: ')}"

"""The provisioning steps against the fake Proxmox, over HTTPS through proxmoxer, in process.

Each scenario is one of the issue's: the happy path with GPUs, a rerun for a VM that
exists, the vmid race (both ways Proxmox reports it), a clone task that fails, a failure
after the clone and its cleanup (or the vmid left when the destroy fails too), a slow
guest agent, a raw PCI device, Ctrl-C while the clone runs on the server.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pytest

from cli.ops.provision import Limits, Outcome, Provisioner, ProvisionError
from cli.provision.plan import ProvisionOptions, build_options, encode_sshkeys
from cli.provision.proxmox import ProxmoxClient, Token
from tests.fakes.proxmox import Call, FakeProxmox, Fault, Knobs, Running, running_fake

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPC/9GoZa7DDp4N7+XqtKkpIlxUhP0baYbO0YN9ruu6c ops"
FAST = Limits(wait=15.0, poll_first=0.05, poll_max=0.2, report_every=0.3)
RUN_ID = "3f9ac1d2e4b5"


@dataclass
class Recorder:
    """A Reporter that keeps what was said, and can press Ctrl-C at a given step."""

    steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)
    interrupt_at: str | None = None

    def step(self, text: str) -> None:
        self.steps.append(text)
        if self.interrupt_at is not None and self.interrupt_at in text:
            self.interrupt_at = None
            raise KeyboardInterrupt

    def waiting(self, text: str, elapsed: float, limit: float) -> None:
        self.waits.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)


@pytest.fixture
def pve(tmp_path: Path) -> Iterator[Running]:
    yield from running_fake(
        tmp_path, Knobs(auth_failure_delay=0.0, clone_seconds=0.3, agent_delay=0.3)
    )


def options(**changes: object) -> ProvisionOptions:
    values: dict[str, object] = {
        "name": "gpu-7",
        "node": "pve",
        "template": "ubuntu-2404-cloud",
        "cores": 8,
        "memory_mib": 65536,
        "disk": "100G",
        "storage": None,
        "ip": "dhcp",
        "gateway": None,
        "key_files": [("ops.pub", KEY)],
        "user": "llm",
        "gpus": ["h100-a", "h100-b"],
    }
    values.update(changes)
    return build_options(**values)  # type: ignore[arg-type]


def provision(
    pve: Running, opts: ProvisionOptions | None = None, reporter: Recorder | None = None
) -> Outcome:
    knobs = pve.knobs
    client = ProxmoxClient(
        "127.0.0.1",
        pve.port,
        Token(knobs.token_id, knobs.token_secret),
        ca_cert=pve.ca_file,
        timeout=5,
    )
    return Provisioner(
        client, opts or options(), reporter or Recorder(), limits=FAST, run_id=RUN_ID
    ).run()


def failure(
    pve: Running, opts: ProvisionOptions | None = None, reporter: Recorder | None = None
) -> ProvisionError:
    with pytest.raises(ProvisionError) as raised:
        provision(pve, opts, reporter)
    return raised.value


def test_a_new_vm_with_gpus_is_cloned_configured_grown_started_and_found(pve: Running) -> None:
    outcome = provision(pve)
    assert outcome == Outcome("gpu-7", 100, "pve", "192.0.2.10", created=True)
    vm = pve.fake.vm(100)
    assert vm is not None and vm.running
    config = vm.config
    assert config["name"] == "gpu-7"
    assert (config["cores"], config["memory"], config["ciuser"]) == ("8", "65536", "llm")
    assert unquote(config["sshkeys"]) == KEY
    assert config["machine"] == "q35"
    assert (config["hostpci0"], config["hostpci1"]) == (
        "mapping=h100-a,pcie=1",
        "mapping=h100-b,pcie=1",
    )
    assert config["ipconfig0"] == "ip=dhcp"
    assert config["agent"] == "1"
    assert config["tags"] == "modelfleet"
    assert config["scsi0"] == "local-lvm:vm-100-disk-0,size=100G"
    clone = pve.fake.calls_to("POST", "/nodes/pve/qemu/9000/clone")
    assert [c.params for c in clone] == [
        {"newid": "100", "name": "gpu-7", "full": "1", "description": "modelfleet-run-3f9ac1d2e4b5"}
    ]
    assert config["description"] == "modelfleet-run-3f9ac1d2e4b5"
    # The one parameter Proxmox wants encoded twice arrives, decoded once, still encoded.
    (put,) = pve.fake.calls_to("PUT", "/nodes/pve/qemu/100/config")
    assert put.params["sshkeys"] == encode_sshkeys([KEY])


def test_a_static_address_is_what_the_agent_reports(pve: Running) -> None:
    outcome = provision(pve, options(ip="198.51.100.7/24", gateway="198.51.100.1", gpus=[]))
    assert outcome.address == "198.51.100.7"
    vm = pve.fake.vm(outcome.vmid)
    assert vm is not None and "machine" not in vm.config


def test_a_rerun_finds_the_vm_by_name_and_changes_nothing(pve: Running) -> None:
    first = provision(pve)
    calls = len(pve.fake.calls)
    reporter = Recorder()
    again = provision(pve, reporter=reporter)
    assert again == Outcome("gpu-7", first.vmid, "pve", first.address, created=False)
    changing = [c for c in pve.fake.calls[calls:] if c.method != "GET"]
    assert changing == []
    assert "gpu-7 exists: vmid 100 on pve; going on from where it stands" in reporter.steps
    assert "vmid 100 is configured as asked" in reporter.steps


def test_a_rerun_goes_on_where_an_earlier_run_stopped(pve: Running) -> None:
    """A VM cloned but never configured nor started (the earlier run died) is finished: its
    clone wrote the earlier run's marker, the proof that it is ours (no tag yet)."""
    pve.fake.add_vm(
        140,
        "gpu-7",
        {
            "scsi0": "local-lvm:vm-140-disk-0,size=3584M",
            "boot": "order=scsi0",
            "description": "modelfleet-run-0123456789ab",
        },
    )
    outcome = provision(pve)
    assert (outcome.vmid, outcome.created) == (140, False)
    vm = pve.fake.vm(140)
    assert vm is not None and vm.running and vm.config["scsi0"].endswith("size=100G")
    assert pve.fake.calls_to("POST", r".*/clone") == []


def test_a_same_named_vm_ctl_did_not_make_is_refused_and_nothing_is_sent_to_it(
    pve: Running,
) -> None:
    """Issue 25 item 2: a stranger's gpu-7 (no run marker) is never configured, grown or
    started: only reads reach Proxmox, and its config stays as it was, byte for byte."""
    foreign = {
        "scsi0": "local-lvm:vm-140-disk-0,size=32G",
        "boot": "order=scsi0",
        "cores": "4",
        "memory": "8192",
        "ciuser": "alice",
        "sshkeys": encode_sshkeys(["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ alice"]),
        "description": "alice's build box\nmodelfleet-run-not-a-marker",
    }
    pve.fake.add_vm(140, "gpu-7", foreign)
    before = pve.fake.vm(140)
    assert before is not None
    error = failure(pve)
    assert error.message == (
        "vmid 140 on node pve is named gpu-7 but is not a VM ctl provisioned: no "
        "modelfleet-run-… line in its description names it as made by ctl (found: named "
        'gpu-7, description "alice\'s build box"); nothing was changed'
    )
    assert (error.code, error.cleanup) == (1, [])
    assert [c for c in pve.fake.calls if c.method != "GET"] == []
    assert {(c.method, c.path) for c in pve.fake.calls if "/qemu/140" in c.path} == {
        ("GET", "/nodes/pve/qemu/140/config")
    }
    assert pve.fake.vm(140) == before


def test_a_same_named_vm_made_by_another_tool_with_a_marker_like_line_is_refused(
    pve: Running,
) -> None:
    """Only a whole description line `modelfleet-run-` + 12 hex digits is the marker."""
    pve.fake.add_vm(140, "gpu-7", {"description": "made by modelfleet-run-3f9ac1d2e4b5 once"})
    error = failure(pve)
    assert error.message.startswith("vmid 140 on node pve is named gpu-7 but is not a VM ctl")
    assert [c for c in pve.fake.calls if c.method != "GET"] == []


def test_a_running_vm_with_another_config_is_left_as_is_and_said(pve: Running) -> None:
    provision(pve)
    reporter = Recorder()
    provision(pve, options(cores=16), reporter)
    assert any("running and its config differs (cores)" in w for w in reporter.warnings)
    vm = pve.fake.vm(100)
    assert vm is not None and vm.config["cores"] == "8"


def test_several_vms_with_the_name_is_an_error_naming_them(pve: Running) -> None:
    pve.fake.add_vm(120, "gpu-7")
    pve.fake.add_vm(121, "gpu-7")
    error = failure(pve)
    assert error.message == "2 VMs are named gpu-7: vmid 120 on pve, vmid 121 on pve"
    assert error.cleanup == []
    assert [c for c in pve.fake.calls if c.method != "GET"] == []


def test_a_missing_template_is_bad_input(pve: Running) -> None:
    error = failure(pve, options(template="debian-13"))
    assert (error.message, error.code) == (
        "no template: the cluster has no VM named debian-13",
        2,
    )
    assert failure(pve, options(template="9999")).message == (
        "no template: the cluster has no vmid 9999"
    )


def test_a_vmid_taken_between_nextid_and_the_clone_is_retried(pve: Running) -> None:
    pve.knobs.race_nextid = 2
    reporter = Recorder()
    outcome = provision(pve, reporter=reporter)
    assert outcome.vmid == 102
    assert [w.split(" was")[0] for w in reporter.warnings] == ["vmid 100", "vmid 101"]
    for other in (100, 101):
        vm = pve.fake.vm(other)
        assert vm is not None and vm.config["name"] == "someone-else"


def test_a_vmid_taken_inside_the_clone_worker_is_retried_and_the_other_vm_left_alone(
    pve: Running,
) -> None:
    pve.knobs.race_in_worker = 1
    outcome = provision(pve)
    assert outcome.vmid == 101
    other = pve.fake.vm(100)
    assert other is not None and other.config["name"] == "someone-else"
    assert pve.fake.calls_to("DELETE", r".*") == []


def test_a_failed_clone_shows_its_log_and_nothing_is_left(pve: Running) -> None:
    pve.knobs.fail_clone = "lvcreate 'pve/vm-100-disk-0' error: insufficient free space"
    error = failure(pve)
    assert error.message == (
        "the clone failed: lvcreate 'pve/vm-100-disk-0' error: insufficient free space"
    )
    assert error.details[-1] == (
        "task log: TASK ERROR: clone failed: lvcreate 'pve/vm-100-disk-0' error: insufficient "
        "free space"
    )
    assert error.cleanup == ["nothing is left of vmid 100: Proxmox removed it"]
    assert pve.fake.vm(100) is None


def test_a_failure_after_the_clone_stops_and_destroys_the_vm(pve: Running) -> None:
    pve.knobs.fail_start = "QEMU exited with code 1"
    error = failure(pve)
    assert error.message == "the start failed: QEMU exited with code 1"
    assert error.cleanup == ["removed the half-made VM (vmid 100)"]
    assert error.left_over is None
    assert pve.fake.vm(100) is None
    (destroy,) = pve.fake.calls_to("DELETE", "/nodes/pve/qemu/100")
    assert destroy.params == {"purge": "1", "destroy-unreferenced-disks": "1"}


def test_when_the_destroy_fails_too_the_vmid_and_the_commands_are_given(pve: Running) -> None:
    pve.knobs.fail_start = "QEMU exited with code 1"
    pve.knobs.fail_destroy = "lvremove 'pve/vm-100-disk-0' error: device busy"
    error = failure(pve)
    assert error.left_over == 100
    assert error.cleanup[0].startswith("vmid 100 (gpu-7) is left on node pve; could not remove")
    assert "lvremove 'pve/vm-100-disk-0' error: device busy" in error.cleanup[0]
    assert any("qm destroy 100 --purge" in line for line in error.cleanup)
    assert any("pvesh delete /nodes/pve/qemu/100" in line for line in error.cleanup)
    assert pve.fake.vm(100) is not None


def test_an_agent_that_never_comes_up_times_out_and_the_vm_is_removed(pve: Running) -> None:
    pve.knobs.agent_never = True
    opts = options()
    knobs = pve.knobs
    client = ProxmoxClient(
        "127.0.0.1", pve.port, Token(knobs.token_id, knobs.token_secret), ca_cert=pve.ca_file
    )
    limits = Limits(wait=1.0, poll_first=0.05, poll_max=0.2, report_every=0.3)
    with pytest.raises(ProvisionError) as raised:
        Provisioner(client, opts, Recorder(), limits=limits).run()
    error = raised.value
    assert error.message.startswith("gave up after 1 s waiting for the guest agent's address")
    assert "QEMU guest agent is not running" in error.message
    assert error.cleanup == ["removed the half-made VM (vmid 100)"]


def test_a_slow_agent_is_waited_for_with_progress(pve: Running) -> None:
    pve.knobs.agent_delay = 1.5
    reporter = Recorder()
    outcome = provision(pve, reporter=reporter)
    assert outcome.address == "192.0.2.10"
    assert "waiting for the guest agent's address" in reporter.waits
    not_yet = pve.fake.calls_to("GET", r".*/agent/network-get-interfaces")
    assert [c.status for c in not_yet][-1] == 200
    assert {c.status for c in not_yet[:-1]} == {500}


def test_a_raw_pci_device_gets_proxmoxs_error_a_hint_and_the_cleanup(pve: Running) -> None:
    error = failure(pve, options(gpus=["0000:41:00.0"]))
    assert error.message == (
        "Proxmox refused the GPU: only root can set 'hostpci0' config for non-mapped devices"
    )
    assert "resource mapping" in error.hints[0] and "--gpu NAME" in error.hints[0]
    assert error.cleanup == ["removed the half-made VM (vmid 100)"]


def test_ctrl_c_while_the_clone_runs_waits_for_it_then_removes_the_vm(pve: Running) -> None:
    pve.knobs.clone_seconds = 1.0
    reporter = Recorder(interrupt_at="waiting for the clone")
    error = failure(pve, reporter=reporter)
    assert error.message == "interrupted"
    assert any("keeps running on Proxmox" in step for step in reporter.steps)
    assert error.cleanup == ["removed the half-made VM (vmid 100)"]
    assert pve.fake.vm(100) is None
    (clone_task,) = [t for t in pve.fake.tasks.values() if t.type == "qmclone"]
    assert clone_task.exitstatus == "OK"  # Proxmox finished it; ctl then removed the VM


def test_ctrl_c_during_the_cleanup_leaves_the_vmid_and_the_commands(pve: Running) -> None:
    pve.knobs.fail_start = "QEMU exited with code 1"
    reporter = Recorder(interrupt_at="removing the half-made VM")
    error = failure(pve, reporter=reporter)
    assert error.left_over == 100
    assert "interrupted while removing it" in error.cleanup[0]


def test_a_rerun_waits_for_a_clone_still_running_from_an_interrupted_run(pve: Running) -> None:
    """The interrupted clone has no name yet (Proxmox's temporary config): wait, then find."""
    pve.knobs.clone_seconds = 1.0
    first = Recorder(interrupt_at="waiting for the clone")
    # Interrupted, and its cleanup interrupted too: the clone keeps running, unnamed.
    first_limits = Limits(wait=0.01, poll_first=0.01, poll_max=0.01)
    knobs = pve.knobs
    client = ProxmoxClient(
        "127.0.0.1", pve.port, Token(knobs.token_id, knobs.token_secret), ca_cert=pve.ca_file
    )
    with pytest.raises(ProvisionError) as raised:
        Provisioner(client, options(), first, limits=first_limits).run()
    assert raised.value.left_over == 100
    reporter = Recorder()
    outcome = provision(pve, reporter=reporter)
    assert (outcome.vmid, outcome.created) == (100, False)
    assert any(s.startswith("waiting for clones in progress") for s in reporter.steps)
    assert len(pve.fake.named("gpu-7")) == 1


def test_a_relative_disk_size_is_applied_once_by_the_run_that_clones(pve: Running) -> None:
    provision(pve, options(disk="+20G"))
    vm = pve.fake.vm(100)
    assert vm is not None and vm.config["scsi0"].endswith("size=24064M")  # 3584M + 20G
    reporter = Recorder()
    provision(pve, options(disk="+20G"), reporter)
    assert any("applied only by the run that clones" in s for s in reporter.steps)
    vm = pve.fake.vm(100)
    assert vm is not None and vm.config["scsi0"].endswith("size=24064M")


def test_an_older_proxmox_whose_resize_is_not_a_task(pve: Running) -> None:
    pve.knobs.resize_returns_task = False
    provision(pve)
    vm = pve.fake.vm(100)
    assert vm is not None and vm.config["scsi0"].endswith("size=100G")


def test_a_wrong_token_is_refused_before_anything_is_made(pve: Running) -> None:
    client = ProxmoxClient(
        "127.0.0.1", pve.port, Token(pve.knobs.token_id, "wrong"), ca_cert=pve.ca_file
    )
    with pytest.raises(ProvisionError) as raised:
        Provisioner(client, options(), Recorder(), limits=FAST).run()
    assert (raised.value.message, raised.value.code) == (
        "Proxmox refused the API token: invalid token value!",
        2,
    )
    assert pve.fake.vm(100) is None


# --- whose VM it is, the rename race, answers that never came --------------------------------


def cluster_knobs(**changes: object) -> Knobs:
    """Two nodes; the template on pve-a, its disks on storage both nodes see."""
    values: dict[str, object] = {
        "auth_failure_delay": 0.0,
        "clone_seconds": 0.3,
        "agent_delay": 0.3,
        "nodes": ("pve-a", "pve-b"),
        "template_storage": "ceph-vm",
        "shared_storages": ("ceph-vm",),
    }
    values.update(changes)
    return Knobs(**values)  # type: ignore[arg-type]


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Running]:
    yield from running_fake(tmp_path, cluster_knobs())


def test_a_template_on_another_node_is_cloned_there_with_target(two_nodes: Running) -> None:
    outcome = provision(two_nodes, options(node="pve-b"))
    assert outcome == Outcome("gpu-7", 100, "pve-b", "192.0.2.10", created=True)
    (clone,) = two_nodes.fake.calls_to("POST", "/nodes/pve-a/qemu/9000/clone")
    assert clone.params["target"] == "pve-b"
    vm = two_nodes.fake.vm(100)
    assert vm is not None and vm.node == "pve-b" and vm.running
    assert vm.config["scsi0"] == "ceph-vm:vm-100-disk-0,size=100G"


@pytest.mark.parametrize("knob", ["race_nextid", "race_in_worker"])
def test_the_rename_race_on_the_target_node_is_a_taken_vmid_never_cleaned_up(
    two_nodes: Running, knob: str
) -> None:
    """A VM made on pve-b after nextid: the clone on pve-a fails as pmxcfs refuses the rename."""
    setattr(two_nodes.knobs, knob, 1)
    two_nodes.knobs.race_node = "pve-b"
    reporter = Recorder()
    outcome = provision(two_nodes, options(node="pve-b"), reporter)
    assert (outcome.vmid, outcome.node) == (101, "pve-b")
    assert reporter.warnings == [
        "vmid 100 was taken between /cluster/nextid and the clone (nextid reserves nothing); "
        "asking for another"
    ]
    (lost,) = [t for t in two_nodes.fake.tasks.values() if t.type == "qmclone"][:1]
    assert lost.exitstatus == (
        "close (rename) atomic file '/etc/pve/nodes/pve-a/qemu-server/100.conf' failed: File exists"
    )
    other = two_nodes.fake.vm(100)
    assert other is not None and other.node == "pve-b" and other.config["name"] == "someone-else"
    touched = [c for c in two_nodes.fake.calls if c.method != "GET" and "/qemu/100" in c.path]
    assert touched == []


def test_a_vm_that_is_not_ours_at_the_vmid_is_never_stopped_or_destroyed(pve: Running) -> None:
    """Ours was replaced by another's (same vmid) before the cleanup: it is left, and said."""

    def replace_ours(fake: FakeProxmox, call: Call) -> None:
        if call.method == "POST" and call.path == "/nodes/pve/qemu/100/status/start":
            vm = fake.vms[100]
            vm.config = {"name": "web-3", "description": "prod web\nowner: ops", "scsi0": "x"}
            vm.running = True
            vm.booted_at = time.monotonic()

    pve.knobs.after_call = replace_ours
    error = failure(pve)  # the start finds the other VM running: a task failure
    assert error.message == "the start failed: VM 100 already running"
    assert error.code == 1
    assert error.cleanup == [
        "vmid 100 on node pve is not the VM this run made: its description lacks "
        "modelfleet-run-3f9ac1d2e4b5 (found: named web-3, description 'prod web'); left alone"
    ]
    assert error.left_over is None
    vm = pve.fake.vm(100)
    assert vm is not None and vm.running and vm.config["name"] == "web-3"
    assert pve.fake.calls_to("POST", r".*/status/stop") == []
    assert pve.fake.calls_to("DELETE", r".*") == []


def test_the_marker_is_read_back_right_before_the_destroy(pve: Running) -> None:
    """Replaced between the stop and the destroy: the second read-back catches it."""

    def replace_after_stop(fake: FakeProxmox, call: Call) -> None:
        if call.method == "POST" and call.path.endswith("/status/stop"):
            fake.vms[100].config["description"] = "someone else's now"

    pve.knobs.agent_never = True
    pve.knobs.after_call = replace_after_stop
    knobs = pve.knobs
    client = ProxmoxClient(
        "127.0.0.1", pve.port, Token(knobs.token_id, knobs.token_secret), ca_cert=pve.ca_file
    )
    limits = Limits(wait=1.0, poll_first=0.05, poll_max=0.2, report_every=0.3)
    with pytest.raises(ProvisionError) as raised:
        Provisioner(client, options(), Recorder(), limits=limits, run_id=RUN_ID).run()
    assert raised.value.cleanup == [
        "vmid 100 on node pve is not the VM this run made: its description lacks "
        'modelfleet-run-3f9ac1d2e4b5 (found: named gpu-7, description "someone else\'s now", '
        "tags modelfleet); left alone"
    ]
    assert pve.fake.calls_to("DELETE", r".*") == []
    assert pve.fake.vm(100) is not None


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        (r"/nodes/pve/tasks/.*:qmclone:.*/status", 595, "No route to host"),
        (r"/nodes/pve/tasks/.*:qmstart:.*/status", 595, "Connection refused"),
        (r"/nodes/pve/qemu/100/agent/network-get-interfaces", 596, "Broken pipe"),
        (r"/nodes/pve/qemu/100/agent/network-get-interfaces", 597, "Connection reset by peer"),
        (r"/nodes/pve/tasks/.*:resize:.*/status", 599, "Too many redirections"),
    ],
)
def test_pveproxys_59x_while_waiting_is_retried_never_a_refusal(
    pve: Running, path: str, status: int, reason: str
) -> None:
    pve.knobs.faults = [Fault("GET", path, status, reason, times=3)]
    reporter = Recorder()
    outcome = provision(pve, reporter=reporter)
    assert (outcome.vmid, outcome.address, outcome.created) == (100, "192.0.2.10", True)
    assert [c.status for c in pve.fake.calls if re.fullmatch(path, c.path)][:3] == [status] * 3
    (warning,) = [w for w in reporter.warnings if "pveproxy could not relay" in w]
    assert f": {status} {reason} (pveproxy could not relay the call to the node); retrying" in (
        warning
    )
    assert pve.fake.calls_to("DELETE", r".*") == []


def test_a_connection_dropped_while_waiting_is_retried(pve: Running) -> None:
    pve.knobs.faults = [
        Fault("GET", r".*/agent/network-get-interfaces", None, times=2),
        Fault("GET", r"/nodes/pve/tasks/.*:qmstart:.*/status", None, times=1),
    ]
    outcome = provision(pve)
    assert outcome.address == "192.0.2.10"
    dropped = [c for c in pve.fake.calls if c.status == 0]
    assert len(dropped) == 3
    assert pve.fake.calls_to("DELETE", r".*") == []


def short_run(pve: Running, reporter: Recorder | None = None) -> ProvisionError:
    knobs = pve.knobs
    client = ProxmoxClient(
        "127.0.0.1", pve.port, Token(knobs.token_id, knobs.token_secret), ca_cert=pve.ca_file
    )
    limits = Limits(wait=1.0, poll_first=0.05, poll_max=0.2, report_every=0.3)
    with pytest.raises(ProvisionError) as raised:
        Provisioner(client, options(), reporter or Recorder(), limits=limits, run_id=RUN_ID).run()
    return raised.value


@pytest.mark.parametrize("status", [595, None])
def test_no_answer_for_the_whole_wait_leaves_the_vm_and_destroys_nothing(
    pve: Running, status: int | None
) -> None:
    pve.knobs.faults = [Fault("GET", r".*/agent/network-get-interfaces", status, times=10**6)]
    error = short_run(pve)
    assert error.message.startswith("gave up after 1 s waiting for the guest agent's address")
    assert error.code == 1 and error.left_over == 100
    assert error.cleanup[:2] == [
        "vmid 100 (gpu-7) is left on node pve: Proxmox did not answer, so ctl removed nothing",
        "run the same command again to go on from where it stands",
    ]
    assert "qm destroy 100 --purge" in error.cleanup[2]
    vm = pve.fake.vm(100)
    assert vm is not None and vm.running
    assert pve.fake.calls_to("POST", r".*/status/stop") == []
    assert pve.fake.calls_to("DELETE", r".*") == []
    # Once Proxmox answers again, the same command goes on from where it stood.
    pve.knobs.faults = []
    again = provision(pve)
    assert (again.vmid, again.created, again.address) == (100, False, "192.0.2.10")


def test_a_clone_whose_answer_was_lost_is_left_and_a_rerun_finds_it(pve: Running) -> None:
    pve.knobs.faults = [Fault("POST", r".*/clone", None, after=True)]
    error = failure(pve)
    assert error.left_over == 100
    assert error.cleanup[0] == (
        "vmid 100 (gpu-7) may have been made on node pve: the clone got no answer, "
        "so ctl removed nothing"
    )
    assert pve.fake.calls_to("DELETE", r".*") == []
    again = provision(pve)
    assert (again.vmid, again.created) == (100, False)


def test_a_real_refusal_while_configuring_still_removes_the_vm(pve: Running) -> None:
    pve.knobs.faults = [
        Fault("PUT", r"/nodes/pve/qemu/100/config", 403, "Permission check failed (/vms/100)")
    ]
    error = failure(pve)
    assert error.message == (
        "Proxmox refused: PUT /nodes/pve/qemu/100/config: 403 Permission check failed (/vms/100)"
    )
    assert error.cleanup == ["removed the half-made VM (vmid 100)"]
    assert pve.fake.vm(100) is None

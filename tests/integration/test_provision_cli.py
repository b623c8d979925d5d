"""`ctl provision-node` as an operator runs it: a subprocess against the fake Proxmox over TLS.

The fake listens on 127.0.0.1 with a certificate from a CA made for the test; ctl is given
that CA with --ca-cert, since it verifies TLS by default. Nothing leaves the machine: guest
addresses are TEST-NET data.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.ctl import ROOT, ctl_environment
from tests.fakes.proxmox import (
    Call,
    FakeProxmox,
    Fault,
    Knobs,
    Running,
    ThrowawayCA,
    running_fake,
)

DOCS = ROOT / "docs" / "provisioning.md"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPC/9GoZa7DDp4N7+XqtKkpIlxUhP0baYbO0YN9ruu6c ops"

# Runs ctl with every logger at DEBUG into a file (proxmoxer's and urllib3's included), so
# the test can look for the token in what the libraries would log too.
LOGGED = """
import logging, runpy, sys
import proxmoxer.core, proxmoxer.backends.https
logging.basicConfig(filename=sys.argv[1], level=logging.DEBUG)
for name in ("proxmoxer", "proxmoxer.core", "proxmoxer.backends.https", "urllib3"):
    logging.getLogger(name).setLevel(logging.DEBUG)
sys.argv = ["ctl", *sys.argv[2:]]
runpy.run_module("cli", run_name="__main__")
"""


@pytest.fixture
def pve(tmp_path: Path) -> Iterator[Running]:
    knobs = Knobs(auth_failure_delay=0.2, clone_seconds=0.3, agent_delay=0.3)
    yield from running_fake(tmp_path, knobs)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "ops.pub"
    path.write_text(KEY + "\n", encoding="utf-8")
    return path


def environment(pve: Running | None, *, token: bool = True) -> dict[str, str]:
    env = ctl_environment()
    if token and pve is not None:
        env["PROXMOX_TOKEN_ID"] = pve.knobs.token_id
        env["PROXMOX_TOKEN_SECRET"] = pve.knobs.token_secret
    return env


def arguments(pve: Running, key_file: Path, *extra: str, ca: bool = True) -> list[str]:
    args = [
        "provision-node",
        "gpu-7",
        "--node",
        "pve",
        "--template",
        "ubuntu-2404-cloud",
        "--ssh-key",
        str(key_file),
        "--disk",
        "100G",
        "--proxmox-host",
        "127.0.0.1",
        "--proxmox-port",
        str(pve.port),
        "--step-timeout",
        "20",
    ]
    if ca:
        args += ["--ca-cert", str(pve.ca_file)]
    return [*args, *extra]


def ctl(
    args: list[str], env: dict[str, str], *, log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cli", *args]
    if log is not None:
        command = [sys.executable, "-c", LOGGED, str(log), *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=120
    )


def test_a_node_with_gpus_from_nothing_to_its_address(pve: Running, key_file: Path) -> None:
    result = ctl(arguments(pve, key_file, "--gpu", "h100-a", "--gpu", "h100-b"), environment(pve))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "gpu-7: vmid 100 on node pve (created), address 192.0.2.10",
        "next: ctl onboard-node gpu-7 --host 192.0.2.10",
    ]
    for step in (
        "looking for a VM named gpu-7 on https://127.0.0.1:",
        "cloning ubuntu-2404-cloud (vmid 9000 on pve) to vmid 100 on pve (full clone, marked "
        "modelfleet-run-",
        "waiting for the clone (UPID:pve:",
        "configuring vmid 100: agent, ciuser, cores, hostpci0, hostpci1, ipconfig0, machine, "
        "memory, sshkeys, tags",
        "growing scsi0 from 3.5 GiB to 100 GiB",
        "starting vmid 100",
        "waiting for the guest agent of vmid 100 to report an address",
    ):
        assert step in result.stderr
    vm = pve.fake.vm(100)
    assert vm is not None and vm.running
    assert vm.config["hostpci1"] == "mapping=h100-b,pcie=1" and vm.config["machine"] == "q35"
    marker = re.search(r"marked (modelfleet-run-[0-9a-f]{12})\)", result.stderr)
    assert marker is not None and vm.config["description"] == marker.group(1)


def test_a_rerun_reports_the_vm_and_changes_nothing(pve: Running, key_file: Path) -> None:
    assert ctl(arguments(pve, key_file), environment(pve)).returncode == 0
    before = len(pve.fake.calls)
    again = ctl(arguments(pve, key_file), environment(pve))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == (
        "gpu-7: vmid 100 on node pve (existed), address 192.0.2.10"
    )
    assert "gpu-7 exists: vmid 100 on pve; going on from where it stands" in again.stderr
    assert [c for c in pve.fake.calls[before:] if c.method != "GET"] == []


def test_the_vmid_race_is_retried(pve: Running, key_file: Path) -> None:
    pve.knobs.race_nextid = 1
    result = ctl(arguments(pve, key_file), environment(pve))
    assert result.returncode == 0, result.stderr
    assert "warning: vmid 100 was taken between /cluster/nextid and the clone" in result.stderr
    assert result.stdout.startswith("gpu-7: vmid 101 on node pve (created)")


def test_a_failed_clone_shows_the_task_log(pve: Running, key_file: Path) -> None:
    pve.knobs.fail_clone = "lvcreate 'pve/vm-100-disk-0' error: insufficient free space"
    result = ctl(arguments(pve, key_file), environment(pve))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "error: the clone failed: lvcreate" in result.stderr
    assert "task log: TASK ERROR: clone failed: lvcreate" in result.stderr
    assert "cleanup: nothing is left of vmid 100: Proxmox removed it" in result.stderr


def test_a_failure_after_the_clone_removes_the_vm(pve: Running, key_file: Path) -> None:
    pve.knobs.fail_start = "QEMU exited with code 1"
    result = ctl(arguments(pve, key_file), environment(pve))
    assert result.returncode == 1
    assert "error: the start failed: QEMU exited with code 1" in result.stderr
    assert "cleanup: removed the half-made VM (vmid 100)" in result.stderr
    assert pve.fake.vm(100) is None


def test_when_the_cleanup_fails_the_vmid_and_how_to_remove_it_are_printed(
    pve: Running, key_file: Path
) -> None:
    pve.knobs.fail_start = "QEMU exited with code 1"
    pve.knobs.fail_destroy = "lvremove 'pve/vm-100-disk-0' error: device busy"
    result = ctl(arguments(pve, key_file), environment(pve))
    assert result.returncode == 1
    assert "cleanup: vmid 100 (gpu-7) is left on node pve; could not remove it" in result.stderr
    assert "qm destroy 100 --purge" in result.stderr
    assert "pvesh delete /nodes/pve/qemu/100 --purge 1" in result.stderr
    assert pve.fake.vm(100) is not None


def test_a_slow_guest_agent_is_waited_for(pve: Running, key_file: Path) -> None:
    pve.knobs.agent_delay = 2.5
    result = ctl(arguments(pve, key_file), environment(pve))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == "next: ctl onboard-node gpu-7 --host 192.0.2.10"
    answers = [c.status for c in pve.fake.calls_to("GET", r".*/agent/network-get-interfaces")]
    assert answers[-1] == 200 and answers.count(500) >= 2


def test_a_raw_pci_device_gets_proxmoxs_error_and_a_hint(pve: Running, key_file: Path) -> None:
    result = ctl(arguments(pve, key_file, "--gpu", "0000:41:00.0"), environment(pve))
    assert result.returncode == 1
    assert "warning: --gpu 0000:41:00.0 is a raw PCI device" in result.stderr
    assert (
        "error: Proxmox refused the GPU: only root can set 'hostpci0' config for non-mapped "
        "devices" in result.stderr
    )
    assert "hint: only root@pam may pass a raw PCI device" in result.stderr
    assert "--gpu NAME" in result.stderr
    assert "cleanup: removed the half-made VM (vmid 100)" in result.stderr


def test_tls_is_verified_by_default(pve: Running, key_file: Path) -> None:
    result = ctl(arguments(pve, key_file, ca=False), environment(pve))
    assert result.returncode == 1
    assert (
        f"error: TLS: the certificate of https://127.0.0.1:{pve.port} is not trusted"
        in result.stderr
    )
    assert "pass it with --ca-cert" in result.stderr
    assert pve.fake.calls == [] and pve.fake.tls_failures >= 1


def test_a_certificate_from_another_ca_is_refused(
    pve: Running, key_file: Path, tmp_path: Path
) -> None:
    other = ThrowawayCA.create("another CA").write(tmp_path / "other-ca.pem")
    args = [*arguments(pve, key_file, ca=False), "--ca-cert", str(other)]
    result = ctl(args, environment(pve))
    assert result.returncode == 1
    assert f"it is not signed by --ca-cert {other}" in result.stderr
    assert pve.fake.calls == []


def test_dry_run_contacts_nothing_and_needs_no_token(pve: Running, key_file: Path) -> None:
    result = ctl(
        arguments(pve, key_file, "--gpu", "h100-a", "--dry-run"), environment(pve, token=False)
    )
    assert result.returncode == 0, result.stderr
    assert pve.fake.connections == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "# --dry-run: nothing is sent. The calls for a new VM named gpu-7:"
    assert " 1. GET    /cluster/resources type=vm" in lines
    assert (
        " 3. POST   /nodes/pve/qemu/<vmid of ubuntu-2404-cloud>/clone newid=<vmid> name=gpu-7 "
        "full=1 description=modelfleet-run-<run id>" in lines
    )
    put = next(line for line in lines if "PUT    /nodes/pve/qemu/<vmid>/config" in line)
    assert f"sshkeys={quote(KEY, safe='')}" in put
    assert "hostpci0=mapping=h100-a,pcie=1" in put and "machine=q35" in put
    assert "    DELETE /nodes/pve/qemu/<vmid> purge=1 destroy-unreferenced-disks=1" in lines


def test_bad_input_is_exit_2_and_contacts_nothing(pve: Running, key_file: Path) -> None:
    result = ctl(arguments(pve, key_file, "--ip", "10.0.0.5", "--gpu", "x y"), environment(pve))
    assert result.returncode == 2
    assert "error: --ip: '10.0.0.5' is neither dhcp nor a CIDR" in result.stderr
    assert "error: --gpu: 'x y' is neither" in result.stderr
    missing = ctl(arguments(pve, key_file), environment(pve, token=False))
    assert missing.returncode == 2
    assert "error: no Proxmox API token: set PROXMOX_TOKEN_ID" in missing.stderr
    assert pve.fake.connections == 0


def test_every_option_is_documented(pve: Running) -> None:
    result = ctl(["provision-node", "--help"], environment(None))
    options = set(re.findall(r"--[a-z][a-z-]*", result.stdout)) - {"--help"}
    documented = set(re.findall(r"^\| `(--[a-z-]+)", DOCS.read_text(encoding="utf-8"), re.M))
    assert options == documented


def test_the_token_is_never_on_the_command_line(pve: Running) -> None:
    result = ctl(["provision-node", "--help"], environment(None))
    assert "--token-file" in result.stdout
    options = set(re.findall(r"--[a-z][a-z-]*", result.stdout))
    assert {o for o in options if "token" in o or "secret" in o} == {"--token-file"}


def test_the_token_appears_in_no_output_and_no_log(
    pve: Running, key_file: Path, tmp_path: Path
) -> None:
    secret = pve.knobs.token_secret
    token_file = tmp_path / "token"
    token_file.write_text(f"{pve.knobs.token_id}={secret}\n", encoding="utf-8")
    token_file.chmod(0o600)
    runs = [
        (arguments(pve, key_file, "--gpu", "h100-a"), environment(pve)),  # success
        (arguments(pve, key_file, "--token-file", str(token_file)), environment(None)),  # rerun
        (arguments(pve, key_file, "--gpu", "0000:41:00.0"), environment(pve)),  # refused
        (arguments(pve, key_file, ca=False), environment(pve)),  # TLS refused
        (arguments(pve, key_file, "--dry-run"), environment(pve)),
    ]
    texts: list[str] = []
    for number, (args, env) in enumerate(runs):
        log = tmp_path / f"ctl-{number}.log"
        result = ctl(args, env, log=log)
        texts += [result.stdout, result.stderr, log.read_text(encoding="utf-8")]
    outcomes = texts[0::3]
    assert outcomes[0].startswith("gpu-7: vmid 100") and outcomes[1].startswith("gpu-7: vmid 100")
    assert "GET /api2/json/cluster/resources?type=vm" in texts[2]  # the logs did capture calls
    texts.append(pve.access_log.read_text(encoding="utf-8"))
    assert "automation@pve!ctl" in texts[-1]  # pveproxy logs who, never the secret
    forms = {secret, quote(secret, safe=""), quote(quote(secret, safe=""), safe="")}
    for text in texts:
        for form in forms:
            assert form not in text


def test_a_token_file_others_can_read_is_warned_about(
    pve: Running, key_file: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{pve.knobs.token_id}={pve.knobs.token_secret}\n", encoding="utf-8")
    token_file.chmod(0o644)
    result = ctl(arguments(pve, key_file, "--token-file", str(token_file)), environment(None))
    assert result.returncode == 0, result.stderr
    assert f"warning: {token_file} can be read by others (mode 0644): chmod 600" in result.stderr
    bad = tmp_path / "bad-token"
    bad.write_text("just-a-secret\n", encoding="utf-8")
    wrong = ctl(arguments(pve, key_file, "--token-file", str(bad)), environment(None))
    assert wrong.returncode == 2
    assert "expected one line, user@realm!name=secret" in wrong.stderr
    assert "just-a-secret" not in wrong.stderr


def test_ctrl_c_during_the_clone_waits_for_it_and_removes_the_vm(
    pve: Running, key_file: Path
) -> None:
    pve.knobs.clone_seconds = 3.0
    # As from an operator's terminal: a suite started in the background by a non-interactive
    # shell ignores SIGINT, ctl would inherit that, and Python then never turns Ctrl-C into
    # KeyboardInterrupt (the run went on to the end, exit 0). A handler, unlike an ignored
    # signal, is reset to the default by exec.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", *arguments(pve, key_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(pve),
            cwd=ROOT,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert process.stderr is not None
    seen: list[str] = []
    waiting = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if "waiting for the clone" in line:
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert waiting.wait(30), "".join(seen)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    reader.join(timeout=10)
    stderr = "".join(seen)
    assert process.returncode == 1, stderr
    assert "the clone to vmid 100 keeps running on Proxmox: waiting for it to end" in stderr
    assert "error: interrupted" in stderr
    assert "cleanup: removed the half-made VM (vmid 100)" in stderr
    assert pve.fake.vm(100) is None


# --- whose VM it is, the rename race, answers that never came --------------------------------


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Running]:
    """The template on pve-a with its disks on storage both nodes share; ctl asks for pve-b."""
    knobs = Knobs(
        auth_failure_delay=0.2,
        clone_seconds=0.3,
        agent_delay=0.3,
        nodes=("pve-a", "pve-b"),
        template_storage="ceph-vm",
        shared_storages=("ceph-vm",),
    )
    yield from running_fake(tmp_path, knobs)


def on_node(args: list[str], node: str) -> list[str]:
    changed = list(args)
    changed[changed.index("--node") + 1] = node
    return changed


def test_the_rename_race_on_the_target_node_is_retried_and_the_other_vm_untouched(
    two_nodes: Running, key_file: Path
) -> None:
    two_nodes.knobs.race_nextid = 1
    two_nodes.knobs.race_node = "pve-b"
    result = ctl(on_node(arguments(two_nodes, key_file), "pve-b"), environment(two_nodes))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "gpu-7: vmid 101 on node pve-b (created), address 192.0.2.10"
    )
    assert "warning: vmid 100 was taken between /cluster/nextid and the clone" in result.stderr
    assert "cloning ubuntu-2404-cloud (vmid 9000 on pve-a) to vmid 100 on pve-b" in result.stderr
    assert "cleanup" not in result.stderr
    other = two_nodes.fake.vm(100)
    assert other is not None and other.node == "pve-b" and other.config["name"] == "someone-else"
    assert [c for c in two_nodes.fake.calls if c.method != "GET" and "/qemu/100" in c.path] == []


def test_a_59x_while_waiting_is_retried(pve: Running, key_file: Path) -> None:
    pve.knobs.faults = [
        Fault("GET", r".*/agent/network-get-interfaces", 595, "No route to host", times=3)
    ]
    result = ctl(arguments(pve, key_file), environment(pve))
    assert result.returncode == 0, result.stderr
    assert (
        "warning: GET /nodes/pve/qemu/100/agent/network-get-interfaces: 595 No route to host "
        "(pveproxy could not relay the call to the node); retrying while waiting for the guest "
        "agent's address" in result.stderr
    )
    assert result.stdout.startswith("gpu-7: vmid 100 on node pve (created)")


def test_no_answer_for_the_whole_step_leaves_the_vm_and_says_how_to_go_on(
    pve: Running, key_file: Path
) -> None:
    pve.knobs.faults = [Fault("GET", r".*/agent/network-get-interfaces", 596, "Broken pipe", 10**6)]
    args = arguments(pve, key_file)
    args[args.index("--step-timeout") + 1] = "2"
    result = ctl(args, environment(pve))
    assert result.returncode == 1
    assert "error: gave up after 2 s waiting for the guest agent's address" in result.stderr
    assert (
        "cleanup: vmid 100 (gpu-7) is left on node pve: Proxmox did not answer, so ctl removed "
        "nothing\ncleanup: run the same command again to go on from where it stands\n"
        in result.stderr
    )
    assert "cleanup: remove it on node pve: qm stop 100; qm destroy 100 --purge" in result.stderr
    vm = pve.fake.vm(100)
    assert vm is not None and vm.running
    assert pve.fake.calls_to("DELETE", r".*") == []


def test_a_vm_that_is_not_ours_is_left_alone_and_reported(pve: Running, key_file: Path) -> None:
    def replace_ours(fake: FakeProxmox, call: Call) -> None:
        if call.method == "POST" and call.path == "/nodes/pve/qemu/100/status/start":
            vm = fake.vms[100]
            vm.config = {"name": "web-3", "description": "prod web", "scsi0": "x"}
            vm.running = True
            vm.booted_at = time.monotonic()

    pve.knobs.after_call = replace_ours
    result = ctl(arguments(pve, key_file), environment(pve))
    assert result.returncode == 1
    assert "error: the start failed: VM 100 already running" in result.stderr
    assert re.search(
        r"^cleanup: vmid 100 on node pve is not the VM this run made: its description lacks "
        r"modelfleet-run-[0-9a-f]{12} \(found: named web-3, description 'prod web'\); "
        r"left alone$",
        result.stderr,
        re.M,
    ), result.stderr
    vm = pve.fake.vm(100)
    assert vm is not None and vm.running and vm.config["name"] == "web-3"
    assert pve.fake.calls_to("POST", r".*/status/stop") == []
    assert pve.fake.calls_to("DELETE", r".*") == []


def test_a_strangers_vm_with_the_name_is_refused_and_left_byte_for_byte(
    pve: Running, key_file: Path
) -> None:
    """Issue 25 item 2: `ctl provision-node gpu-9` when someone else's gpu-9 exists (no run
    marker): exit 1 naming the vmid and the Proxmox node, and not one write to that VM."""
    pve.fake.add_vm(
        230,
        "gpu-9",
        {
            "scsi0": "local-lvm:vm-230-disk-0,size=32G",
            "boot": "order=scsi0",
            "cores": "2",
            "memory": "4096",
            "machine": "pc",
            "description": "bob's test VM",
        },
    )
    before = pve.fake.vm(230)
    args = arguments(pve, key_file, "--gpu", "h100-a")
    args[1] = "gpu-9"
    result = ctl(args, environment(pve))
    assert result.returncode == 1, result.stderr
    assert (
        "error: vmid 230 on node pve is named gpu-9 but is not a VM ctl provisioned: no "
        "modelfleet-run-… line in its description names it as made by ctl (found: named gpu-9, "
        'description "bob\'s test VM"); nothing was changed'
    ) in result.stderr
    assert (
        "hint: provision under another name, or rename or remove that VM in Proxmox if it is "
        "not needed"
    ) in result.stderr
    assert result.stdout == ""
    assert [c for c in pve.fake.calls if c.method != "GET"] == []
    assert pve.fake.vm(230) == before

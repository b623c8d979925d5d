"""The controller's systemd unit (examples/systemd/, docs/controller.md) run for real: a
test-fleet node acts as the control host, with ctl installed there from this tree's wheel,
its runtime dependencies copied from the test environment (offline, as every test is), and
the fleet's own inventory; systemd starts the unit, and `systemctl stop` stops it mid-pass.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from tests.ctl import ROOT
from tests.integration.conftest import LiveFleet
from tests.integration.test_controller import SYSTEMD
from tests.sshd import silent_listener

pytestmark = pytest.mark.fleet

HOST = "node-3"  # the control host: it has python3-venv (the router playbook installs it)
VENV = "/opt/modelfleet/venv"
UNIT = "modelfleet-controller.service"


def closure(name: str) -> set[str]:
    """The distribution `name` and every one it needs at run time, by their metadata."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = metadata.distribution(todo.pop())
        key = current.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for requirement in current.requires or ():
            if "extra ==" in requirement:
                continue
            dependency = requirement.split(";")[0].split("[")[0]
            for stop in "<>=!~ (":
                dependency = dependency.split(stop)[0]
            try:
                metadata.distribution(dependency.strip())
            except metadata.PackageNotFoundError:
                continue  # a marker for another platform
            todo.append(dependency.strip())
    return seen


def runtime_tar(wheel_site: Path) -> bytes:
    """site-packages for the node: ctl from the wheel, its dependencies from here."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(wheel_site, arcname=".")
        for name in closure("modelfleet") - {"modelfleet"}:
            dist = metadata.distribution(name)
            for file in dist.files or ():
                path = Path(str(dist.locate_file(file)))
                if path.is_file() and "__pycache__" not in file.parts and ".." not in file.parts:
                    archive.add(path, arcname=str(file))
    return buffer.getvalue()


def on(fleet: LiveFleet, *command: str, stdin: bytes | None = None, timeout: float = 120) -> str:
    # ssh hands the remote shell one line: each word quoted, as the list means it.
    done = subprocess.run(
        fleet.ssh_command(HOST, shlex.join(command)), input=stdin, capture_output=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout.decode()


@pytest.fixture
def control_host(fleet_exclusive: LiveFleet, tmp_path: Path) -> Iterator[LiveFleet]:
    fleet = fleet_exclusive
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("modelfleet-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
         "--target", str(site), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    on(fleet, "sh", "-c", f"rm -rf {VENV} && python3 -m venv --without-pip {VENV}")
    packages = on(fleet, f"{VENV}/bin/python3", "-c",
                  "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()  # fmt: skip
    on(fleet, "tar", "x", "-C", packages, stdin=runtime_tar(site), timeout=300)
    scripts = {
        "ctl": "from cli.app import main",
        "ansible-playbook": "from ansible.cli.playbook import main",
        "ansible-inventory": "from ansible.cli.inventory import main",
    }
    for command, source in scripts.items():
        text = f"#!{VENV}/bin/python3\nimport sys\n{source}\nsys.exit(main())\n"
        on(fleet, "sh", "-c", f"cat > {VENV}/bin/{command} && chmod 755 {VENV}/bin/{command}",
           stdin=text.encode())  # fmt: skip
    # The fleet's inventory, key and known_hosts at the paths the inventory names.
    state = fleet.state_dir
    files = io.BytesIO()
    with tarfile.open(fileobj=files, mode="w") as archive:
        for part in ("inventory", "client", "known_hosts"):
            archive.add(state / part, arcname=str((state / part).relative_to("/")))
    on(fleet, "tar", "x", "-C", "/", stdin=files.getvalue())
    try:
        yield fleet
    finally:
        subprocess.run(
            fleet.ssh_command(HOST,
                              f"systemctl stop {UNIT}; rm -f /etc/systemd/system/{UNIT};"
                              " systemctl daemon-reload; systemctl reset-failed;"
                              " rm -rf /etc/modelfleet/controller.env /etc/modelfleet/catalog.yaml"
                              f" /var/lib/modelfleet/last-pass.json {VENV} {state}"),
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip


EXTRA = """\
  extra:
    source: file:///srv/models/qwen2.5-0.5b-instruct-q8_0.gguf
    replicas: {min: 1}
    profiles:
      - {name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 2, threads: 1}
"""


def test_the_unit_runs_under_systemd_and_a_stop_mid_pass_finishes_the_step(
    control_host: LiveFleet,
) -> None:
    fleet = control_host
    catalog = (ROOT / "examples" / "testfleet" / "catalog.yaml").read_text() + EXTRA
    on(fleet, "sh", "-c", "mkdir -p /etc/modelfleet && cat > /etc/modelfleet/catalog.yaml",
       stdin=catalog.encode())  # fmt: skip
    with silent_listener() as hung_port:  # a node that holds the gather for its timeout
        inventory = fleet.state_dir / "inventory" / "hosts.yml"
        hosts = inventory.read_text().replace(
            "  children:",
            f"    hung:\n      ansible_host: 127.0.0.1\n      ansible_port: {hung_port}\n"
            "  children:",
            1,
        )
        on(fleet, "sh", "-c", f"cat > {inventory}", stdin=hosts.encode())
        env = (SYSTEMD / "controller.env").read_text()
        env = env.replace("/etc/modelfleet/inventory", str(fleet.state_dir / "inventory"))
        env += "MODELFLEET_TIMEOUT=10\n"
        on(fleet, "sh", "-c", "cat > /etc/modelfleet/controller.env", stdin=env.encode())
        on(fleet, "sh", "-c", f"cat > /etc/systemd/system/{UNIT}",
           stdin=(SYSTEMD / UNIT).read_bytes())  # fmt: skip
        on(fleet, "sh", "-c", f"systemctl daemon-reload && systemctl start {UNIT}")
        deadline = time.monotonic() + 120
        while "pass 1 started" not in (journal := on(fleet, "journalctl", "-u", UNIT, "-o", "cat")):
            assert time.monotonic() < deadline, journal
            time.sleep(0.5)
        time.sleep(2)  # mid-gather: the hung node holds it for 10 s
        on(fleet, "systemctl", "stop", UNIT, timeout=300)
    shown = on(fleet, "systemctl", "show", UNIT, "-p", "Result", "-p", "ExecMainStatus")
    assert shown.split() == ["Result=success", "ExecMainStatus=0"], shown
    journal = on(fleet, "journalctl", "-u", UNIT, "-o", "cat")
    assert "SIGTERM received: stopping once the step under way is done" in journal, journal
    assert "controller stopped on SIGTERM after 1 pass(es)" in journal, journal
    last = json.loads(on(fleet, "cat", "/var/lib/modelfleet/last-pass.json"))
    # The plan was made (the step under way, the gather, finished) and none of it begun:
    # what else it holds depends on what the fleet runs now.
    (undone,) = last["left_undone"]
    assert "start extra-1" in undone.split(", "), last
    assert last["did"] == [], last
    assert any(line.startswith("hung: not reached") for line in last["could_not"]), last
    assert not [line for line in journal.splitlines() if "Traceback" in line]

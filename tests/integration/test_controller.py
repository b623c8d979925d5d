"""`ctl reconcile --watch` as the controller that runs for months (issue 28, docs/controller.md),
tested the way its life goes: a real `ctl` process, real signals, a catalog edited badly while
it runs, a node that hangs beside one that answers (a real sshd), a state directory it
cannot write.
"""

from __future__ import annotations

import configparser
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.ctl import ROOT, ctl, ctl_environment
from tests.sshd import Sshd, missing_reason, running_sshd, silent_listener

EXAMPLES = ROOT / "examples"


class Controller:
    """A `ctl reconcile --watch` process, its stdout read line by line."""

    def __init__(self, state: Path, *args: str) -> None:
        self.state = state
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, cwd=ROOT, env=ctl_environment({"XDG_STATE_HOME": str(state)}),
        )  # fmt: skip
        self.lines: list[str] = []

    @property
    def stdout(self) -> IO[str]:
        assert self.process.stdout is not None
        return self.process.stdout

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """The first line from now on holding `text` (fails after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if text in line:
                return line
        self.process.kill()
        raise AssertionError(f"no line with {text!r}; got {self.lines}")

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, "".join(self.lines) + out, err

    def last_pass(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(
            (self.state / "modelfleet" / "last-pass.json").read_text()
        )
        return document

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    shutil.copy(EXAMPLES / "catalog.yaml", path)
    return path


def dry_watch(tmp_path: Path, catalog: Path, *options: str) -> Controller:
    return Controller(
        tmp_path / "state", "reconcile", "--watch", "--dry-run", "--interval", "1s",
        "--catalog", str(catalog), "--inventory", str(EXAMPLES / "inventory"),
        "--facts", str(EXAMPLES / "facts"), *options,
    )  # fmt: skip


def test_a_catalog_edited_badly_is_said_and_the_next_good_edit_is_picked_up(
    tmp_path: Path, catalog_file: Path
) -> None:
    good = catalog_file.read_text()
    controller = dry_watch(tmp_path, catalog_file)
    try:
        controller.wait_for("pass 1 done")
        first = controller.last_pass()
        assert first["error"] is None and first["dry_run"] is True
        assert "would start llama-3.1-70b-1: 0 of 2 running" in first["did"]
        # Started by hand on a GPU the catalog's H100 models want: reported, never stopped.
        assert (
            "hgx-2 GPU 5: pid 4121 python3 is not ctl's: left running, the GPU not used"
            in (first["could_not"])
        )
        assert not [line for line in first["did"] if "4121" in line]
        catalog_file.write_text(good + "models: {}\n")  # a second `models:`: no catalog
        bad = controller.wait_for("error:")
        assert f"error: {catalog_file}:" in bad and "duplicate key" in bad, bad
        assert controller.last_pass()["did"] == []
        assert controller.last_pass()["exit_code"] == 2
        # The next valid edit: a model fewer, read at the next pass.
        catalog_file.write_text(good.replace("llama-3.1-70b:", "llama-3.1-70c:"))
        line = controller.wait_for("would start llama-3.1-70c-1")
        assert "pass" in line and "error" not in line
        controller.process.send_signal(signal.SIGTERM)
        code, out, err = controller.finish()
    finally:
        controller.kill()
    assert code == 0, err
    assert "controller stopped on SIGTERM" in out
    assert "Traceback" not in err
    assert f"error: {catalog_file}:" in err and "nothing changed" in err


def test_json_log_is_one_object_a_line_and_nothing_else(tmp_path: Path, catalog_file: Path) -> None:
    controller = dry_watch(tmp_path, catalog_file, "--log-format", "json")
    try:
        controller.wait_for('"event": "pass"')
        controller.process.send_signal(signal.SIGINT)
        code, out, err = controller.finish()
    finally:
        controller.kill()
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [event["event"] for event in events]
    assert kinds[:2] == ["pass-started", "pass"] and kinds[-2:] == ["stopping", "stopped"]
    (done,) = [event for event in events if event["event"] == "pass"][:1]
    assert done["format"] == "modelfleet.last-pass/v1" and done["pass"] == 1
    assert "deepseek-v3: not placed" in done["could_not"]
    assert events[-1]["signal"] == "SIGINT"


def test_a_state_directory_it_cannot_write_is_one_clear_error(
    tmp_path: Path, catalog_file: Path
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    result = ctl(
        "reconcile", "--watch", "--dry-run", "--catalog", str(catalog_file),
        "--inventory", str(EXAMPLES / "inventory"), "--facts", str(EXAMPLES / "facts"),
        env={"XDG_STATE_HOME": str(blocked)},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        f"error: state directory {blocked}/modelfleet is not writable: Not a directory;"
        " point XDG_STATE_HOME at a directory ctl may write\n"
    )
    assert result.stdout == ""


needs_sshd = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

CHAT = """\
models:
  chat:
    source: file:///srv/models/chat.gguf
    profiles:
      - {name: cpu, priority: 1, engine: llama.cpp}
"""


@pytest.fixture
def answering_and_hung(tmp_path: Path) -> Iterator[tuple[Sshd, int]]:
    """A node that answers (a real sshd, its shards in a temporary directory) and one that
    accepts and never answers."""
    shards = tmp_path / "shards"
    shards.mkdir()
    with (
        running_sshd(tmp_path / "sshd", environment={"MODELFLEET_SHARD_DIR": str(shards)})
        as server,
        silent_listener() as hung_port,
    ):  # fmt: skip
        yield server, hung_port


def two_node_inventory(tmp_path: Path, server: Sshd, hung_port: int) -> Path:
    directory = tmp_path / "inventory"
    directory.mkdir()
    node = f"      ansible_user: root\n      ansible_ssh_private_key_file: {server.client_key}\n"
    (directory / "hosts.yml").write_text(
        "all:\n  hosts:\n"
        f"    local:\n      ansible_host: {server.address}\n      ansible_port: {server.port}\n"
        + node
        + f"    hung:\n      ansible_host: 127.0.0.1\n      ansible_port: {hung_port}\n"
        + node
    )
    (directory / ".known_hosts").write_text(server.known_hosts_line())
    return directory


def watch_fleet(tmp_path: Path, inventory: Path) -> Controller:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CHAT)
    return Controller(
        tmp_path / "state", "--timeout", "4", "reconcile", "--watch", "--interval", "1s",
        "--catalog", str(catalog), "--inventory", str(inventory),
    )  # fmt: skip


@needs_sshd
def test_sigterm_mid_pass_finishes_the_step_says_what_is_left_and_exits_0(
    tmp_path: Path, answering_and_hung: tuple[Sshd, int]
) -> None:
    inventory = two_node_inventory(tmp_path, *answering_and_hung)
    controller = watch_fleet(tmp_path, inventory)
    try:
        controller.wait_for("pass 1 started")
        time.sleep(1)  # the gather is under way: the hung node holds it for its timeout
        began = time.monotonic()
        controller.process.send_signal(signal.SIGTERM)
        code, out, err = controller.finish()
        took = time.monotonic() - began
    finally:
        controller.kill()
    assert code == 0, err
    assert "SIGTERM received: stopping once the step under way is done" in out
    last = controller.last_pass()
    # The gather finished (the hung node noted, the answering one planned on); the start
    # it planned was not begun: left undone, and no shard was written on the node.
    assert last["left_undone"] == ["start chat-1"], last
    assert any(line.startswith("hung: not reached: ") for line in last["could_not"]), last
    assert last["did"] == [] and last["exit_code"] == 1
    assert "left undone: start chat-1" in out
    assert "controller stopped on SIGTERM after 1 pass(es)" in out
    assert list((tmp_path / "shards").iterdir()) == []
    assert took < 30, took
    assert "Traceback" not in err


@needs_sshd
def test_a_second_signal_aborts_at_once(
    tmp_path: Path, answering_and_hung: tuple[Sshd, int]
) -> None:
    inventory = two_node_inventory(tmp_path, *answering_and_hung)
    controller = watch_fleet(tmp_path, inventory)
    try:
        controller.wait_for("pass 1 started")
        time.sleep(0.5)
        controller.process.send_signal(signal.SIGTERM)
        controller.wait_for("stopping")
        controller.process.send_signal(signal.SIGTERM)
        code, out, err = controller.finish()
    finally:
        controller.kill()
    assert code == 128 + signal.SIGTERM, err
    assert "a second SIGTERM: aborted at once" in out
    assert "pass 1 done" not in out  # the pass was not finished
    assert not (tmp_path / "state" / "modelfleet" / "last-pass.json").exists()
    assert "Traceback" not in err
    assert list((tmp_path / "shards").iterdir()) == []


SYSTEMD = EXAMPLES / "systemd"


def systemd_example() -> tuple[configparser.ConfigParser, dict[str, str]]:
    """The unit (as systemd's INI) and its environment file, read as systemd reads them."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((SYSTEMD / "modelfleet-controller.service").read_text())
    env: dict[str, str] = {}
    for line in (SYSTEMD / "controller.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value
    return unit, env


def test_the_systemd_example_is_a_unit_systemd_accepts_running_what_ctl_reads(
    tmp_path: Path,
) -> None:
    unit, env = systemd_example()
    service = unit["Service"]
    assert service["EnvironmentFile"] == "/etc/modelfleet/controller.env"
    assert service["KillMode"] == "mixed"  # SIGTERM to ctl, not to the playbook under way
    # Every variable of the environment file is one ctl reads: an option's env var
    # (docs/cli.md), or the interval the unit's command line passes.
    reference = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    for name in env:
        assert f"env var: {name}" in reference or f"${{{name}}}" in service["ExecStart"], name
    assert set(env) == {
        "MODELFLEET_CATALOG", "MODELFLEET_INVENTORY", "MODELFLEET_CA_DIR",
        "MODELFLEET_INTERVAL", "MODELFLEET_LOST_AFTER",
    }  # fmt: skip
    # systemd's own check of the unit, with ctl where this machine has it.
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze: install systemd")
    ctl_here = Path(sys.executable).parent / "ctl"
    text = (SYSTEMD / "modelfleet-controller.service").read_text()
    local = tmp_path / "modelfleet-controller.service"
    local.write_text(text.replace("/opt/modelfleet/venv/bin/ctl", str(ctl_here)))
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(local)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    # The command line, with the file's variables (pointed at the example fleet), runs.
    command = service["ExecStart"].replace("${MODELFLEET_INTERVAL}", env["MODELFLEET_INTERVAL"])
    variables = {
        **env,
        "MODELFLEET_CATALOG": str(EXAMPLES / "catalog.yaml"),
        "MODELFLEET_INVENTORY": str(EXAMPLES / "inventory"),
        "MODELFLEET_CA_DIR": str(tmp_path / "ca"),
        "MODELFLEET_FACTS": str(EXAMPLES / "facts"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    argv = [*command.split()[1:], "--dry-run"]
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT, env=ctl_environment(variables),
    )  # fmt: skip
    assert process.stdout is not None
    try:
        while "pass 1 done" not in (line := process.stdout.readline()):
            assert line, process.stderr.read() if process.stderr else ""
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert (
        json.loads((tmp_path / "state" / "modelfleet" / "last-pass.json").read_text())["pass"] == 1
    )


def ports_connected_to(port: int) -> set[int]:
    """The local ports of this machine's established TCP connections to `port` (IPv4)."""
    found = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = row.split()[1:4]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            found.add(int(local.split(":")[1], 16))
    return found


@needs_sshd
def test_the_controller_keeps_a_nodes_ssh_connection_from_pass_to_pass(
    tmp_path: Path, answering_and_hung: tuple[Sshd, int]
) -> None:
    server, _ = answering_and_hung
    inventory = two_node_inventory(tmp_path, server, 1)
    hosts = (inventory / "hosts.yml").read_text()
    (inventory / "hosts.yml").write_text(hosts.split("    hung:")[0])  # the answering node
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CHAT)
    controller = Controller(
        tmp_path / "state", "reconcile", "--watch", "--dry-run", "--interval", "1s",
        "--catalog", str(catalog), "--inventory", str(inventory),
    )  # fmt: skip
    try:
        controller.wait_for("pass 2 done")
        between = ports_connected_to(server.port)
        controller.wait_for("pass 4 done")
        later = ports_connected_to(server.port)
        controller.process.send_signal(signal.SIGTERM)
        code, _, err = controller.finish()
    finally:
        controller.kill()
    assert code == 0, err
    assert controller.last_pass()["could_not"] == [], controller.last_pass()
    # One connection, open between passes, and the same one two passes later.
    assert len(between) == 1 and later == between, (between, later)
    assert ports_connected_to(server.port) == set()  # closed when the controller stopped

"""ctl installed from its wheel, as `pip install .` does: the playbooks travel inside it.

The playbooks live at the top of the project (playbooks/); pyproject.toml's force-include
puts them in the wheel at cli/_data/playbooks. These tests build the wheel once, look into
it, install it in a fresh venv and run the installed ctl and ansible-playbook there, away
from the clone.

Offline, as every test is: the wheel is built with the hatchling of the test
environment (no build isolation, no index), and installed without its dependencies; the
fresh venv reaches those through a .pth line naming the test environment's
site-packages (a path line, so the editable install's own .pth there is never run and
`cli` can only come from the wheel), and gets ansible's commands as pip would write them,
with its own interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from cli.edges.ansible import playbook_path
from tests.ctl import ROOT

PLAYBOOKS = {
    "deploy_router.yml",
    "start_shards.yml",
    "stop_shards.yml",
    "stage_weights.yml",
    "library/modelfleet_files.py",
    "library/modelfleet_stage.py",
    "library/modelfleet_verify.py",
    "callback_plugins/modelfleet_events.py",
    "files/modelfleet_router_tls.py",
    "files/modelfleet_router_keys.py",
}
IN_WHEEL = "cli/_data/playbooks/"


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out), str(ROOT)],
        out,
    )  # fmt: skip
    (built,) = out.glob("modelfleet-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed, as the README's `pip install .` makes one."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", str(root)], root.parent)
    pip = [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    run([*pip, "--no-deps", "--no-index", str(wheel)], root.parent)
    ours = Path(sysconfig.get_paths()["purelib"])
    (site_packages(root) / "dependencies.pth").write_text(f"{ours}\n")
    for command in ("ansible-playbook", "ansible-inventory"):
        script = (Path(sys.executable).parent / command).read_text().splitlines()
        assert script[0].startswith("#!"), command
        (root / "bin" / command).write_text(
            "\n".join([f"#!{root / 'bin' / 'python'}", *script[1:]])
        )
        (root / "bin" / command).chmod(0o755)
    return root


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def outside_the_clone(venv: Path) -> dict[str, str]:
    """No PYTHONPATH (it would import the clone's cli), none of the operator's settings."""
    keep = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MODELFLEET_", "PROXMOX_", "ANSIBLE_", "PYTHON"))
    }
    return keep | {
        "COLUMNS": "100",
        "NO_COLOR": "1",
        "TERM": "dumb",
        "XDG_STATE_HOME": str(venv.parent / "state"),
        "ANSIBLE_HOME": str(venv.parent / "ansible"),
        "ANSIBLE_LOCAL_TEMP": str(venv.parent / "ansible-tmp"),
    }


def test_a_clone_finds_the_playbooks_at_the_top_of_the_project() -> None:
    assert playbook_path("start_shards.yml") == ROOT / "playbooks" / "start_shards.yml"
    assert playbook_path("start_shards.yml").is_file()


def test_the_wheel_carries_every_playbook_file_as_it_is_in_the_clone(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        shipped = {
            name.removeprefix(IN_WHEEL): archive.read(name)
            for name in archive.namelist()
            if name.startswith(IN_WHEEL)
        }
    assert set(shipped) == PLAYBOOKS
    for name, content in shipped.items():
        assert content == (ROOT / "playbooks" / name).read_bytes(), name


def test_the_wheel_carries_the_package_data_besides_the_code(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"cli/py.typed", "cli/facts/probe.sh", "cli/routes/litellm-constraints.txt"} <= names
    assert "cli/edges/ansible.py" in names
    assert not any(name.startswith(("tests/", "playbooks/", "examples/")) for name in names)


def test_the_installed_ctl_finds_the_playbooks_inside_its_package(venv: Path) -> None:
    site = site_packages(venv)
    script = (
        "import cli\n"
        "from cli.edges.ansible import playbook_path\n"
        "print(cli.__file__)\n"
        "for name in ('start_shards.yml', 'stop_shards.yml', 'stage_weights.yml',"
        " 'deploy_router.yml'):\n"
        "    print(playbook_path(name))\n"
    )
    printed = run(
        [str(venv / "bin" / "python"), "-c", script], venv.parent, outside_the_clone(venv)
    )
    found = [Path(line) for line in printed.splitlines()]
    assert found == [
        site / "cli" / "__init__.py",
        site / "cli" / "_data" / "playbooks" / "start_shards.yml",
        site / "cli" / "_data" / "playbooks" / "stop_shards.yml",
        site / "cli" / "_data" / "playbooks" / "stage_weights.yml",
        site / "cli" / "_data" / "playbooks" / "deploy_router.yml",
    ]
    assert all(path.is_file() for path in found)


def test_the_installed_playbooks_find_their_module_beside_them(venv: Path) -> None:
    """ansible-playbook resolves each task's module at parse time: modelfleet_files comes
    from the library/ shipped next to the playbook, or the syntax check fails."""
    playbooks = site_packages(venv) / "cli" / "_data" / "playbooks"
    for name in ("start_shards.yml", "stop_shards.yml", "stage_weights.yml", "deploy_router.yml"):
        printed = run(
            [
                str(venv / "bin" / "ansible-playbook"),
                "-i", "localhost,",
                "--syntax-check",
                str(playbooks / name),
            ],
            venv.parent,
            outside_the_clone(venv),
        )  # fmt: skip
        assert f"playbook: {playbooks / name}" in printed


def test_the_installed_ctl_reconcile_dry_run_plans_the_example_fleet(venv: Path) -> None:
    examples = ROOT / "examples"
    done = subprocess.run(
        [
            str(venv / "bin" / "ctl"),
            "reconcile",
            "--dry-run",
            "--catalog", str(examples / "catalog.yaml"),
            "--inventory", str(examples / "inventory"),
            "--facts", str(examples / "facts"),
        ],
        capture_output=True, text=True, cwd=venv.parent, env=outside_the_clone(venv),
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # deepseek-v3 does not fit, as documented
    assert "start  llama-3.1-70b-1      tp8       hgx-1  GPU 0-7 (one NVLink domain)" in done.stdout
    assert "refuse deepseek-v3-1        NOT PLACED — blocked" in done.stdout


def test_the_installed_ctl_runs_a_playbook_with_its_module_and_callback(venv: Path) -> None:
    """run_playbook from the venv: the installed ansible-playbook, the playbook's library/
    module and the callback_plugins/ that reports each task's result to ctl."""
    work = venv.parent / "run"
    work.mkdir()
    python = venv / "bin" / "python"
    (work / "hosts.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {python}\n"
    )
    script = (
        "import json\n"
        "from pathlib import Path\n"
        "from cli.edges.ansible import run_playbook\n"
        "run = run_playbook('stop_shards.yml', Path('hosts.yml'), {'modelfleet_stops': {}},\n"
        "                   ['localhost'], Path('state/logs'), Path('known_hosts'))\n"
        "print(json.dumps([run.returncode, [[e.host, e.task, e.status, e.changed]\n"
        "                                   for e in run.events]]))\n"
    )
    printed = run([str(python), "-c", script], work, outside_the_clone(venv))
    assert json.loads(printed) == [
        0,
        [["localhost", "Remove each shard's unit, environment and record", "ok", False]],
    ]

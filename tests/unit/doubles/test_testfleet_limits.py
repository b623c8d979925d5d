"""The test fleet's host limits: the inotify instances and watches every node's systemd
holds (a stock kernel's 128 instances boot about 18 nodes), raised by `testfleet up` and
said; and a node whose console says it will never come up, reported in seconds."""

from __future__ import annotations

from pathlib import Path

from tests.testfleet.nspawn import fatal_console_line, inotify_needs, raise_inotify_limits


def _limits(directory: Path, instances: str, watches: str) -> Path:
    directory.mkdir()
    (directory / "max_user_instances").write_text(instances)
    (directory / "max_user_watches").write_text(watches)
    return directory


def test_a_stock_kernels_limits_are_raised_for_64_nodes_and_said(tmp_path: Path) -> None:
    limits = _limits(tmp_path / "inotify", "128\n", "8192\n")
    said: list[str] = []
    raise_inotify_limits(64, said.append, limits)
    needs = inotify_needs(64)
    assert needs["max_user_instances"] >= 64 * 8 + 128  # 8 a node at rest, measured
    assert int((limits / "max_user_instances").read_text()) == needs["max_user_instances"]
    assert int((limits / "max_user_watches").read_text()) == needs["max_user_watches"]
    assert said == [
        f"raised fs.inotify.max_user_instances from 128 to {needs['max_user_instances']}:"
        " each node's systemd needs about 12",
        f"raised fs.inotify.max_user_watches from 8192 to {needs['max_user_watches']}:"
        " each node's systemd needs about 256",
    ]


def test_limits_above_the_need_are_never_lowered_nor_mentioned(tmp_path: Path) -> None:
    limits = _limits(tmp_path / "inotify", "100000\n", "1000000\n")
    said: list[str] = []
    raise_inotify_limits(3, said.append, limits)
    assert (limits / "max_user_instances").read_text() == "100000\n"
    assert (limits / "max_user_watches").read_text() == "1000000\n"
    assert said == []


def test_a_limit_that_cannot_be_written_is_a_warning_with_the_command(tmp_path: Path) -> None:
    limits = _limits(tmp_path / "inotify", "128\n", "1000000\n")
    # A sysctl the kernel makes read-only, even for root, holding a small number.
    (limits / "max_user_instances").unlink()
    (limits / "max_user_instances").symlink_to("/proc/sys/kernel/cap_last_cap")
    have = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    said: list[str] = []
    raise_inotify_limits(64, said.append, limits)
    need = inotify_needs(64)["max_user_instances"]
    assert len(said) == 1
    assert said[0].startswith(
        f"warning: fs.inotify.max_user_instances is {have}, 64 nodes need {need}, and it"
        " cannot be raised here ("
    )
    assert said[0].endswith(f"): sysctl -w fs.inotify.max_user_instances={need}")


def test_a_console_where_systemd_ran_out_names_the_line(tmp_path: Path) -> None:
    console = tmp_path / "console.log"
    console.write_text(
        "systemd 252 running in system mode\n" * 2000
        + "\x1b[0;1;31mFailed to allocate manager object: Too many open files\x1b[0m\n"
        + "[!!!!!!] Failed to allocate manager object.\n"
    )
    assert fatal_console_line(console) == "[!!!!!!] Failed to allocate manager object."
    console.write_text(
        "\x1b[0;1;31mFailed to allocate manager object: Too many open files\x1b[0m\n"
    )
    assert fatal_console_line(console) == ("Failed to allocate manager object: Too many open files")


def test_a_console_of_a_booting_node_says_nothing_fatal(tmp_path: Path) -> None:
    console = tmp_path / "console.log"
    console.write_text("Welcome to Debian GNU/Linux 12 (bookworm)!\n[  OK  ] Reached target")
    assert fatal_console_line(console) is None
    assert fatal_console_line(tmp_path / "missing.log") is None

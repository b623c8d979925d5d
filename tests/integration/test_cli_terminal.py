"""The CLI a shell user expects: --version, shell completion, help that reflows to the
terminal's width, flags shown without a value."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import threading
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.ctl import ROOT, ctl, ctl_environment
from tests.terminal import on_a_terminal

COMMANDS = [
    [],
    ["place"],
    ["nodes"],
    ["facts"],
    ["reconcile"],
    ["routes"],
    ["drain"],
    ["cordon"],
    ["uncordon"],
    ["provision-node"],
    ["onboard-node"],
    ["catalog"],
    ["catalog", "check"],
    ["ca"],
    ["ca", "init"],
]


def test_version_is_the_package_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    result = ctl("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"ctl (modelfleet) {project['version']}\n"


def test_show_completion_prints_a_bash_script() -> None:
    result = ctl("--show-completion", env={"SHELL": "/bin/bash"})
    assert result.returncode == 0, result.stderr
    assert "_ctl_completion()" in result.stdout
    assert "complete -o default -F _ctl_completion ctl" in result.stdout


def test_install_completion_writes_the_script_where_bash_reads_it(tmp_path: Path) -> None:
    result = ctl("--install-completion", env={"SHELL": "/bin/bash", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    script = tmp_path / ".bash_completions" / "ctl.sh"
    assert "_ctl_completion()" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()


@pytest.mark.parametrize(
    ("words", "expected"),
    [("ctl no", ["nodes"]), ("ctl nodes --j", ["--json"]), ("ctl ca i", ["init"])],
)
def test_completion_completes_commands_and_options(words: str, expected: list[str]) -> None:
    cword = str(len(words.split()) - 1)
    result = ctl(env={"_CTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == expected


def paragraphs(help_text: str) -> list[list[str]]:
    """The description's paragraphs (what comes before the first `Word:` heading), as lines."""
    body = re.split(r"^\S[^\n]*:$", help_text.split("\n", 1)[1], maxsplit=1, flags=re.M)[0]
    return [p.splitlines() for p in body.strip("\n").split("\n\n") if p.strip()]


@pytest.mark.parametrize("columns", [80, 160])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "ctl")
def test_help_fits_and_reflows_to_the_terminal(command: list[str], columns: int) -> None:
    result = ctl(*command, "--help", env={"COLUMNS": str(columns)})
    assert result.returncode == 0, result.stderr
    # Click fills to 2 columns short of the terminal, and stops at 100 however wide it is.
    width = min(columns, 100) - 2
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    assert not [line for line in lines if line != line.rstrip()]
    for paragraph in paragraphs(result.stdout):
        # Greedy filling: a line ends early only when the next word would not have fit.
        for line, following in itertools.pairwise(paragraph):
            next_word = following.split()[0]
            assert len(line) + 1 + len(next_word) > width, (line, following)


def test_the_description_fills_the_terminal_up_to_100_columns() -> None:
    narrow = ctl("nodes", "--help", env={"COLUMNS": "80"}).stdout
    wide = ctl("nodes", "--help", env={"COLUMNS": "160"}).stdout
    assert paragraphs(wide)[1] == [
        "  Facts are gathered live over SSH unless --facts names a snapshot. Exit code 1 when a"
        " node could",
        "  not be reached (it is listed with why), 2 on bad input.",
    ]
    assert paragraphs(narrow)[1] == [
        "  Facts are gathered live over SSH unless --facts names a snapshot. Exit code",
        "  1 when a node could not be reached (it is listed with why), 2 on bad input.",
    ]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "ctl")
def test_flags_take_no_value_in_help(command: list[str]) -> None:
    result = ctl(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "<bool>" not in result.stdout
    assert re.search(r"^  --help +Show this message and exit\.$", result.stdout, re.M)


def test_a_flag_and_a_valued_option_read_as_such() -> None:
    text = ctl("reconcile", "--help").stdout
    assert re.search(r"^  --dry-run +Print the plan; change nothing\.$", text, re.M)
    assert re.search(r"^  --interval <str> +Time between passes", text, re.M)


EXAMPLE_FLEET = ["--inventory", "examples/inventory", "--facts", "examples/facts"]
NODE_TOKENS = {"role=inference", "role=coding", "role=general", "ib-east", "ib-west"}


def words_of(lines: list[str]) -> set[str]:
    return {word.rstrip(",") for line in lines for word in line.split()}


def assert_no_word_broken(lines: list[str]) -> None:
    """A label is whole, or visibly cut: never `role=inferen` with `ce` on the next line."""
    for word in words_of(lines):
        if word.startswith("role="):
            assert word in NODE_TOKENS or word.endswith("…"), word
    assert {"ce", "nce", "ence", "al", "ing"}.isdisjoint(words_of(lines))


def table_lines(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith("NAME"))
    return [line for line in lines[start:] if not re.match(r"^[a-z0-9-]+: ", line)]


@pytest.mark.parametrize("columns", [80, 160])
def test_nodes_on_a_terminal_fits_and_breaks_no_word(columns: int, tmp_path: Path) -> None:
    lines = table_lines(on_a_terminal(["nodes", *EXAMPLE_FLEET], columns, tmp_path).lines)
    assert max(len(line) for line in lines) <= columns
    assert len(lines) == 13  # the header and one line a node: nothing folded onto a second
    assert_no_word_broken(lines)
    if columns == 160:
        assert words_of(lines) >= NODE_TOKENS
        assert "qwen2.5-coder-14b-1/0" in words_of(lines)


@pytest.mark.parametrize("columns", [80, 160])
def test_nodes_piped_fits_columns_and_breaks_no_word(columns: int) -> None:
    result = ctl("nodes", *EXAMPLE_FLEET, env={"COLUMNS": str(columns)})
    lines = table_lines(result.stdout.splitlines())
    assert max(len(line) for line in lines) <= columns
    assert len(lines) == 13
    assert_no_word_broken(lines)


def test_piped_output_without_columns_is_100_wide_as_the_docs_show() -> None:
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    environment.update(NO_COLOR="1", TERM="dumb", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "cli", "nodes", *EXAMPLE_FLEET],
        capture_output=True, text=True, cwd=ROOT, env=environment, timeout=60, check=False,
    )  # fmt: skip
    assert "role=inference  qwen2.5-coder-14b-1/0" in result.stdout


@pytest.mark.parametrize("columns", [80, 160])
def test_help_on_a_terminal_is_what_piped_help_is(columns: int, tmp_path: Path) -> None:
    seen = on_a_terminal(["reconcile", "--help"], columns, tmp_path).lines
    piped = ctl("reconcile", "--help", env={"COLUMNS": str(columns)}).stdout
    assert seen == [line.rstrip() for line in piped.splitlines() if line.strip()]


def test_each_watch_pass_says_when_it_ran() -> None:
    args = ["reconcile", "--dry-run", "--watch", "--interval", "1s", "--catalog"]
    args += ["examples/catalog.yaml", *EXAMPLE_FLEET]
    started = datetime.now(UTC).replace(microsecond=0)
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        env=ctl_environment(),
    )  # fmt: skip
    stamps: list[datetime] = []
    # Killed after a minute, stamps or not: its output then ends and the loop with it.
    deadline = threading.Timer(60, process.kill)
    deadline.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            # The controller's event line (docs/controller.md), on stdout for the journal.
            match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z pass \d+ started\n", line)
            if match:
                stamps.append(datetime.fromisoformat(match.group(1)).replace(tzinfo=UTC))
            if len(stamps) == 3:
                break
    finally:
        deadline.cancel()
        process.kill()
        process.wait(timeout=30)
    assert len(stamps) == 3
    assert started <= stamps[0] <= stamps[1] <= stamps[2] <= datetime.now(UTC)
    assert (stamps[2] - stamps[0]).total_seconds() >= 2  # a second's pause between passes


def test_a_single_pass_carries_no_stamp() -> None:
    result = ctl("reconcile", "--dry-run", "--catalog", "examples/catalog.yaml", *EXAMPLE_FLEET)
    assert " started\n" not in result.stdout
    assert result.stdout.startswith("start ")

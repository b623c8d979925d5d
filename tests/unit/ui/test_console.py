"""cli/ui/console.py and cli/ui/progress.py print node and file text as text: no markup is
read, no control character reaches the terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from cli.errors import InputError
from cli.ui import console, progress
from cli.ui.tables import Cell, Column, fitted_table

HOSTILE = "python3\x1b[2J[red]x[/red]\\[bold]y [link=http://x]z[/link]\x9b\x07"
SHOWN = "python3\\x1b[2J[red]x[/red]\\[bold]y [link=http://x]z[/link]\\x9b\\x07"


def test_fail_prints_its_message_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        console.fail(HOSTILE)
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"error: {SHOWN}\n"


def test_fail_keeps_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        console.fail("[bold]x", 1)
    assert exited.value.code == 1
    assert capsys.readouterr().err == "error: [bold]x\n"


def test_input_errors_print_each_problem_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited, console.input_errors():
        raise InputError.single("inv.yml", 3, ("labels", HOSTILE), "must be text")
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"error: inv.yml:3: labels.{SHOWN}: must be text\n"


def test_print_lines_reads_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    console.print_lines([HOSTILE, "plain"])
    assert capsys.readouterr().out == f"{SHOWN}\nplain\n"


def test_rich_escape_survives_markup_and_controls(capsys: pytest.CaptureFixture[str]) -> None:
    console.out.print(f"note: {console.rich_escape(HOSTILE)}", overflow="ignore", crop=False)
    assert capsys.readouterr().out == f"note: {SHOWN}\n"


def test_rich_escape_of_a_trailing_backslash(capsys: pytest.CaptureFixture[str]) -> None:
    console.err.print(console.rich_escape("a\\") + "[bold]b[/bold]")
    assert capsys.readouterr().err == "a\\b\n"


def test_a_print_that_forgot_shown_still_sends_no_control(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console.out.print("a\x1b]52;c;aGk=\x07b\nc\x9bd", markup=False)
    console.err.print("e\x1b[2Jf", markup=False)
    captured = capsys.readouterr()
    # rich drops BEL, BS, VT, FF and CR from text itself; the rest is escaped
    assert captured.out == "a\\x1b]52;c;aGk=b\nc\\x9bd\n"
    assert captured.err == "e\\x1b[2Jf\n"


def test_a_table_cell_is_shown_and_measured_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    cell = Cell.of("a\x1bb, [red]c")
    assert cell.tokens == ("a\\x1bb", "[red]c")
    assert cell.width == 14
    console.print_table(fitted_table([Column("NAME")], [[cell]], width=40))
    assert capsys.readouterr().out == "NAME\na\\x1bb, [red]c\n"


def test_a_newline_in_a_token_is_shown_not_obeyed() -> None:
    assert Cell.of("a\nb").tokens == ("a\\nb",)
    assert Cell.of("a\nb", separator="\n").tokens == ("a", "b")


def test_the_progress_line_shows_a_node_error_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    terminal = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    monkeypatch.setattr(progress, "err", terminal)
    with progress.gather_progress(2) as advance:
        assert advance is not None
        advance("node-1", "refused \x1b]52;c;aGk=\x07 [red]x[/red] \\[bold]y")
    written = buffer.getvalue()
    assert "refused \\x1b]52;c;aGk=\\x07 [red]x[/red] \\[bold]y" in written
    assert "\x1b]" not in written
    assert "\x07" not in written

"""cli/ui/safe.py: text from a node or a file is shown, never obeyed by the terminal."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.names import UNSAFE_CATEGORIES
from cli.ui.safe import shown


@pytest.mark.parametrize("code", range(0xA0))
def test_every_code_point_below_0xa0_is_printable_or_escaped(code: int) -> None:
    char = chr(code)
    result = shown(char)
    if 0x20 <= code <= 0x7E:
        assert result == char
    elif code == 0x09:
        assert result == "\\t"
    elif code == 0x0A:
        assert result == "\\n"
    elif code == 0x0D:
        assert result == "\\r"
    else:
        assert result == "\\x" + format(code, "02x")
    assert all(0x20 <= ord(c) <= 0x7E for c in result)


def test_the_escapes_of_the_characters_that_attack_a_terminal() -> None:
    assert shown("NVIDIA H100\x1b]52;c;aGk=\x07") == "NVIDIA H100\\x1b]52;c;aGk=\\x07"
    assert shown("a\x9b2Jb") == "a\\x9b2Jb"
    assert shown("a\x7fb") == "a\\x7fb"
    assert shown("\x00") == "\\x00"


def test_markup_and_backslashes_are_left_as_written() -> None:
    text = "python3[red]x[/red]\\[bold]y [link=http://x]z[/link]"
    assert shown(text) == text


def test_printable_unicode_is_kept() -> None:
    assert shown("2×H100 → café 日本") == "2×H100 → café 日本"


def test_layout_characters_are_escaped() -> None:
    assert shown("a\u202eb\u2028c\u2066d") == "a\\u202eb\\u2028c\\u2066d"
    assert shown("\u0085") == "\\x85"


def test_newlines_kept_only_when_asked() -> None:
    assert shown("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"
    assert shown("a\nb", keep_newlines=False) == "a\\nb"


@settings(max_examples=300)
@given(st.text())
def test_no_control_character_survives(text: str) -> None:
    result = shown(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in result)
    assert "\u202e" not in result


@settings(max_examples=300)
@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)))
def test_printable_ascii_is_unchanged(text: str) -> None:
    assert shown(text) == text


def test_control_format_and_separator_characters_are_escaped_and_nothing_else() -> None:
    assert shown("é 漢 ok\t\n\x00\x7f\u200b\U000e0001\u00ad") == (
        "é 漢 ok\\t\\n\\x00\\x7f\\u200b\\U000e0001\\xad"
    )


@settings(max_examples=500)
@given(st.characters())
def test_the_one_rule_a_character_is_itself_or_an_ascii_escape_by_its_category(
    char: str,
) -> None:
    """The rule every print path keeps (node text, file text, the lock's holder): a character
    of the control, format, surrogate or separator categories becomes an ASCII escape of its
    code point; every other character is printed as itself."""
    result = shown(char)
    if unicodedata.category(char) in UNSAFE_CATEGORIES:
        assert result.startswith("\\") and result.isascii() and result.isprintable()
        named = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
        assert result == named.get(char) or int(result[2:], 16) == ord(char)
    else:
        assert result == char

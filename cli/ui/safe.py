"""Text from a node or a file, made safe to print: no control character reaches the terminal.

A GPU name, a process name, a label or a line of a file may hold ESC sequences (a CSI that
clears the screen, an OSC 52 that writes the clipboard, an OSC 8 hyperlink), a C1 CSI (0x9b),
a BEL or a carriage return that overwrites what came before. `shown` writes each such
character as an escape, `\\x1b`, `\\x9b`, `\\t`, `\\n`, `\\u202e`, so the text is seen, never
obeyed. It is the one rule for text on a terminal: the operations and the edges hand a
node's or a file's text up as it came, and cli/ui escapes it where it is printed.

The rule for every print path in cli/ui: text built from data goes through `shown` and is
printed as text (a `rich.text.Text`, or `markup=False`), never read as Rich markup, so
`[red]`, `\\[red]` and `[link=…]` are printed as written.
"""

from __future__ import annotations

from cli.names import is_control

NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(char: str) -> str:
    if char in NAMED:
        return NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def unsafe(char: str) -> bool:
    """True for a character of the categories cli/names.py never takes as text (the one set
    of control characters, which inputs refuse and the terminal escapes)."""
    return is_control(char)


def shown(text: str, keep_newlines: bool = False) -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\n`, `\\t`);
    with `keep_newlines`, line breaks stay (what rich itself lays out across lines)."""
    if text.isprintable() and text.isascii():
        return text
    return "".join(
        _escape(char) if unsafe(char) and not (keep_newlines and char == "\n") else char
        for char in text
    )

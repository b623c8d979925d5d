"""Text from a node or a file, made safe to print: no control character reaches the terminal.

A GPU name, a process name, a label or a line of a file may hold ESC sequences (a CSI that
clears the screen, an OSC 52 that writes the clipboard, an OSC 8 hyperlink), a C1 CSI (0x9b),
a BEL or a carriage return that overwrites what came before. `shown` writes each such
character as an escape, `\\x1b`, `\\x9b`, `\\t`, `\\n`, so the text is seen, never obeyed.

The rule for every print path in cli/ui: text built from data goes through `shown` and is
printed as text (a `rich.text.Text`, or `markup=False`), never read as Rich markup, so
`[red]`, `\\[red]` and `[link=…]` are printed as written.
"""

from __future__ import annotations

NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

# Characters that change how the text around them is laid out or read, though they are not
# control characters: line and paragraph separators, and the bidirectional overrides and
# isolates that reorder what is shown ("Trojan Source").
FORMAT = frozenset("\u2028\u2029\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escape(char: str) -> str:
    if char in NAMED:
        return NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def unsafe(char: str) -> bool:
    """True for C0 (0x00–0x1f), DEL (0x7f), C1 (0x80–0x9f) and the layout characters."""
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F or char in FORMAT


def shown(text: str, keep_newlines: bool = False) -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\n`, `\\t`);
    with `keep_newlines`, line breaks stay (what rich itself lays out across lines)."""
    if text.isprintable() and text.isascii():
        return text
    return "".join(
        _escape(char) if unsafe(char) and not (keep_newlines and char == "\n") else char
        for char in text
    )

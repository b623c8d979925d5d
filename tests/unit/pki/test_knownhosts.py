"""Forgetting a node's host key: its names leave the fleet's known_hosts, every other byte
stays (comments, other hosts, CRLF, a line's other names, hashed entries of others)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from cli.pki.knownhosts import forget_hosts

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake"


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_the_nodes_lines_go_and_every_other_byte_stays() -> None:
    text = (
        "# fleet\n"
        f"10.0.0.1 {KEY}\n"
        f"[10.0.0.3]:2222 {KEY} node-3\n"
        "\n"
        f"10.0.0.3 {KEY}\n"  # port 22: another name for another port
        f"10.0.0.30 {KEY}\n"
    )
    forgotten = forget_hosts(text, ["[10.0.0.3]:2222"])
    assert forgotten.text == (f"# fleet\n10.0.0.1 {KEY}\n\n10.0.0.3 {KEY}\n10.0.0.30 {KEY}\n")
    assert forgotten.lines == (3,)


def test_a_line_naming_others_too_keeps_them_crlf_and_tabs_kept() -> None:
    text = f"node-2,10.0.0.3,node-3\t{KEY}\r\n10.0.0.1 {KEY}\r\n"
    forgotten = forget_hosts(text, ["10.0.0.3", "node-3"])
    assert forgotten.text == f"node-2\t{KEY}\r\n10.0.0.1 {KEY}\r\n"
    assert forgotten.lines == (1,)


def test_hashed_entries_are_matched_by_their_hmac_and_markers_kept() -> None:
    text = f"{hashed('10.0.0.3')} {KEY}\n{hashed('10.0.0.4')} {KEY}\n@revoked 10.0.0.3 {KEY}\n"
    forgotten = forget_hosts(text, ["10.0.0.3"])
    assert forgotten.text == f"{hashed('10.0.0.4')} {KEY}\n"
    assert forgotten.lines == (1, 3)


def test_patterns_and_absent_names_change_nothing() -> None:
    text = f"10.0.0.* {KEY}\n!10.0.0.3 {KEY}\n# 10.0.0.3 {KEY}\n|1|bad|hash {KEY}"
    forgotten = forget_hosts(text, ["10.0.0.3"])
    assert forgotten.text == text
    assert forgotten.lines == ()

"""What runs on the node: look at its PKI files, make its key and CSR, install certificates.

Each step is one POSIX sh script sent on stdin over the pinned SSH session. What travels:
to the node, these scripts, the node's name, its certificate and the CA's certificate;
back, a CSR, the certificates already there, the public half of the node's key and file
modes. The node's private key is made on the node and never leaves it; the CA's key never
goes anywhere.

Files on the node, in /etc/modelfleet/pki (0755, root):

| file | mode | |
|---|---|---|
| node.key | 0600 | the node's private key, EC P-256, made by `openssl req -newkey` |
| node.pem | 0644 | its certificate, signed by the fleet's CA |
| ca.pem | 0644 | the CA's certificate, to check the other nodes' certificates |

A new key is written as node.key.new and renamed over node.key together with its
certificate, so an interrupted run leaves the old pair working (or, at worst, a key that
does not match node.pem, which the next run notices and replaces).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import paramiko

from cli.edges.ssh import NodeError, run
from cli.pki.paths import CA_FILE, CERT_FILE, KEY_FILE, PKI_DIR

# The file names are re-exported: offboarding names them through this module.
__all__ = [
    "CA_FILE",
    "CERT_FILE",
    "CERT_MODE",
    "KEY_FILE",
    "KEY_MODE",
    "NO_OPENSSL",
    "PKI_DIR",
    "NodeState",
    "install",
    "look",
    "make_csr",
    "parse_look",
]

# The directory as each script finds it: MODELFLEET_PKI_DIR in the session's environment
# moves it (the tests' own sshd sets it; the facts probe reads the same variable).
_DIR = '"${MODELFLEET_PKI_DIR:-' + PKI_DIR + '}"'
KEY_MODE = "600"
CERT_MODE = "644"
_HEREDOC = "MODELFLEET_PEM_END"
NO_OPENSSL = 69  # EX_UNAVAILABLE: the script's status when openssl is missing

_LOOK = f"""\
set -u
d={_DIR}
if command -v openssl >/dev/null 2>&1; then echo "openssl yes"; else echo "openssl no"; fi
echo "uid $(id -u)"
for f in {KEY_FILE} {CERT_FILE} {CA_FILE}; do
  if [ -e "$d/$f" ]; then echo "mode $f $(stat -c '%a %u' "$d/$f")"; fi
done
for f in {CERT_FILE} {CA_FILE}; do
  if [ -f "$d/$f" ]; then echo "begin $f"; cat "$d/$f"; echo; echo "end $f"; fi
done
if [ -f "$d/{KEY_FILE}" ] && command -v openssl >/dev/null 2>&1; then
  echo "begin node.pub"; openssl pkey -in "$d/{KEY_FILE}" -pubout 2>/dev/null; echo "end node.pub"
fi
"""

_NO_OPENSSL_CHECK = f"""\
command -v openssl >/dev/null 2>&1 || {{ echo "openssl is not installed" >&2; exit {NO_OPENSSL}; }}
"""


@dataclass(frozen=True)
class NodeState:
    """What /etc/modelfleet/pki on the node holds now."""

    openssl: bool
    uid: int | None
    modes: dict[str, tuple[str, int]]  # file → (octal mode, owner uid)
    node_pem: bytes | None
    ca_pem: bytes | None
    node_pub: bytes | None  # the public half of node.key (PEM), when openssl could read it


def look(client: paramiko.SSHClient, timeout: float) -> NodeState:
    result = run(client, _LOOK, timeout)
    if result.status != 0:
        raise NodeError(f"reading {PKI_DIR} on the node failed: {result.error_line()}")
    return parse_look(result.stdout.decode("utf-8", "replace"))


def parse_look(text: str) -> NodeState:
    openssl, uid = False, None
    modes: dict[str, tuple[str, int]] = {}
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if current is not None:
            if line.startswith("end "):
                current = None
            else:
                current.append(line)
            continue
        word, _, rest = line.partition(" ")
        if word == "openssl":
            openssl = rest == "yes"
        elif word == "uid" and rest.isdigit():
            uid = int(rest)
        elif word == "mode":
            match = re.fullmatch(r"(\S+) ([0-7]+) (\d+)", rest)
            if match:
                modes[match.group(1)] = (match.group(2), int(match.group(3)))
        elif word == "begin":
            current = sections.setdefault(rest, [])

    def section(name: str) -> bytes | None:
        lines = sections.get(name)
        if lines is None:
            return None
        body = "\n".join(line for line in lines if line.strip())
        return (body + "\n").encode() if body else None

    return NodeState(openssl, uid, modes, section(CERT_FILE), section(CA_FILE), section("node.pub"))


def make_csr(client: paramiko.SSHClient, name: str, timeout: float) -> bytes:
    """A new key on the node (node.key.new, 0600) and its CSR, which alone comes back."""
    script = f"""\
set -eu
{_NO_OPENSSL_CHECK}d={_DIR}
umask 022
mkdir -p "$d"
chmod 755 "$d"
umask 077
rm -f "$d/{KEY_FILE}.new"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \\
  -keyout "$d/{KEY_FILE}.new" -subj {shlex.quote("/CN=" + name)}
chmod {KEY_MODE} "$d/{KEY_FILE}.new"
"""
    result = run(client, script, timeout)
    if result.status == NO_OPENSSL:
        raise NodeError(
            "openssl is not installed on the node: install it there"
            " (apt-get install openssl, dnf install openssl) and run ctl onboard-node again;"
            " nothing was changed on the node"
        )
    if result.status != 0:
        raise NodeError(f"making the node's key and CSR failed: {result.error_line()}")
    match = re.search(
        rb"-----BEGIN CERTIFICATE REQUEST-----.*?-----END CERTIFICATE REQUEST-----\n?",
        result.stdout,
        re.S,
    )
    if match is None:
        raise NodeError("the node printed no CSR")
    return match.group(0)


def install(
    client: paramiko.SSHClient, node_pem: bytes | None, ca_pem: bytes, timeout: float
) -> None:
    """Install the CA's certificate, and the node's with the key made for it (when given);
    set every file's mode, whether or not it changed."""
    lines = ["set -eu", f"d={_DIR}", "umask 022", 'mkdir -p "$d"']
    moves: list[str] = []
    if node_pem is not None:
        lines += [
            f'[ -f "$d/{KEY_FILE}.new" ] || {{ echo "$d/{KEY_FILE}.new is gone: was ctl'
            ' onboard-node run twice at once? run it again" >&2; exit 1; }',
            *_write(f"$d/{CERT_FILE}.new", node_pem),
            # The certificate must be for the key made for it, whatever ran in between.
            f'a=$(openssl x509 -in "$d/{CERT_FILE}.new" -noout -pubkey)',
            f'b=$(openssl pkey -in "$d/{KEY_FILE}.new" -pubout)',
            '[ "$a" = "$b" ] || { echo "the certificate is not for the key made for it:'
            ' run ctl onboard-node again" >&2; exit 1; }',
            f'chmod {KEY_MODE} "$d/{KEY_FILE}.new"',
        ]
        moves += [
            f'mv -f "$d/{KEY_FILE}.new" "$d/{KEY_FILE}"',
            f'mv -f "$d/{CERT_FILE}.new" "$d/{CERT_FILE}"',
        ]
    lines += _write(f"$d/{CA_FILE}.new", ca_pem)
    moves.append(f'mv -f "$d/{CA_FILE}.new" "$d/{CA_FILE}"')
    lines += moves
    lines += [
        f'chmod {KEY_MODE} "$d/{KEY_FILE}"',
        f'chmod {CERT_MODE} "$d/{CERT_FILE}" "$d/{CA_FILE}"',
        'chmod 755 "$d"',
    ]
    result = run(client, "\n".join(lines) + "\n", timeout)
    if result.status != 0:
        raise NodeError(f"installing the certificates failed: {result.error_line()}")


def _write(path: str, data: bytes) -> list[str]:
    text = data.decode("ascii")
    if _HEREDOC in text or not text.startswith("-----BEGIN "):
        raise ValueError("not a PEM block")
    return [f"cat > \"{path}\" <<'{_HEREDOC}'", text.rstrip("\n"), _HEREDOC, f'chmod 644 "{path}"']

"""How ctl reaches a host, from the variables Ansible's connection plugins read: address,
port, user and key file (the last one set of each pair wins), ansible_connection (ssh,
local, or one ctl does not follow), a ProxyJump or ProxyCommand in the ssh arguments
(a bastion), and an SSH password, which ctl refuses to use.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence

from cli.inventory.schema import DEFAULT_SSH_PORT, OUR_KEYS, Host, validate_host_vars
from cli.inventory.tree import Var
from cli.names import shown_name

# Our SSH settings and the variables Ansible's ssh connection plugin reads them from;
# when several are set, the last one listed wins (ansible's _loop_entries).
ADDRESS_KEYS = ("ansible_host", "ansible_ssh_host")
PORT_KEYS = ("ansible_port", "ansible_ssh_port")
USER_KEYS = ("ansible_user", "ansible_ssh_user")
KEY_FILE_KEYS = ("ansible_private_key_file", "ansible_ssh_private_key_file")
# Ansible's connection plugins that reach a host over SSH as ctl does (ssh, paramiko_ssh,
# their aliases and full names, and the old `smart`, which picks ssh).
CONNECTION_PLUGIN_KEY = "ansible_connection"
SSH_CONNECTIONS = frozenset(
    {
        "ssh",
        "smart",
        "paramiko",
        "paramiko_ssh",
        "ansible.builtin.ssh",
        "ansible.builtin.paramiko_ssh",
    }
)
# Ansible's local connection plugin: the host is the control host itself.
LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local"})
# The SSH password, as Ansible's ssh and paramiko_ssh plugins read it (their `password`
# option's variables). Its value is never read here, only whether one is set.
PASSWORD_KEYS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")
# The ssh command line's extra arguments, in the order Ansible's ssh plugin puts them on it
# (ssh_args, then ssh_common_args, then ssh_extra_args): a ProxyJump or ProxyCommand in
# them is honoured as OpenSSH would, the first one given winning.
PROXY_ARG_KEYS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
CONNECTION_KEYS = ADDRESS_KEYS + PORT_KEYS + USER_KEYS + KEY_FILE_KEYS
EXPOSED_KEYS = OUR_KEYS + CONNECTION_KEYS


def host_from_vars(name: str, groups: tuple[str, ...], merged: Mapping[str, Var]) -> Host:
    def last(keys: Iterable[str]) -> Var | None:
        found = None
        for key in keys:
            var = merged.get(key)
            if var is not None and var.value is not None:
                found = var
        return found

    address, port, user, key_file = (
        last(ADDRESS_KEYS),
        last(PORT_KEYS),
        last(USER_KEYS),
        last(KEY_FILE_KEYS),
    )
    connection = merged.get(CONNECTION_PLUGIN_KEY)
    local = connection is not None and connection.value in LOCAL_CONNECTIONS
    proxy, refusal = (None, None) if local else _proxy(merged)
    return Host(
        proxy_jump=proxy[1] if proxy is not None and proxy[0] == "proxyjump" else None,
        proxy_command=proxy[1] if proxy is not None and proxy[0] == "proxycommand" else None,
        name=name,
        groups=groups,
        connection="local" if local else "ssh",
        ssh_refusal=None if local else (_password_refusal(merged) or refusal),
        address=str(address.value) if address else name,
        port=int(port.value) if port else DEFAULT_SSH_PORT,
        user=str(user.value) if user else None,
        private_key_file=str(key_file.value) if key_file else None,
        vars=validate_host_vars({key: var.value for key, var in merged.items()}),
        origins={key: merged[key].origin for key in EXPOSED_KEYS if key in merged},
    )


def _proxy(merged: Mapping[str, Var]) -> tuple[tuple[str, str] | None, str | None]:
    """The ProxyJump or ProxyCommand OpenSSH would take from the host's ssh arguments (the
    first given; `none` is none), as (option, value); or why they cannot be read."""
    for key in PROXY_ARG_KEYS:
        var = merged.get(key)
        if var is None or var.value is None:
            continue
        try:
            args = shlex.split(str(var.value))
        except ValueError as error:
            file, line = var.origin
            where = file if line is None else f"{file}:{line}"
            return None, f"{key} ({where}) cannot be split as a command line: {error}"
        for option, value in _ssh_options(args):
            if option in ("proxyjump", "proxycommand"):
                return (None if value.lower() == "none" else (option, value)), None
    return None, None


def _ssh_options(args: Sequence[str]) -> Iterator[tuple[str, str]]:
    """The `-o Name=value` options (and `-J`, which is ProxyJump) of an ssh command line,
    names in lower case, as ssh(1) reads them: `-o Name value`, `-oName=value`."""
    index = 0
    while index < len(args):
        argument = args[index]
        index += 1
        if argument in ("-J", "-o") and index < len(args):
            text, index = args[index], index + 1
        elif argument.startswith(("-J", "-o")) and len(argument) > 2:
            text = argument[2:]
        else:
            continue
        if argument.startswith("-J"):
            yield "proxyjump", text
            continue
        # The name ends at the first `=` or blank (a value may hold either).
        found = re.match(r"\s*([^=\s]+)\s*=?\s*(.*)", text, re.S)
        if found is not None:
            yield found.group(1).lower(), found.group(2).strip()


def _password_refusal(merged: Mapping[str, Var]) -> str | None:
    """Why ctl's own SSH does not try a host Ansible logs in to with a password: ctl
    never sends one (paramiko could, but a password kept in ctl's memory for every node it
    reaches is a secret more to keep; a key does the same), nor prints it."""
    found = [(key, merged[key]) for key in PASSWORD_KEYS if key in merged]
    given = [(key, var) for key, var in found if var.value is not None]
    if not given:
        return None
    key, var = given[-1]  # the one Ansible uses
    file, line = var.origin
    where = file if line is None else f"{file}:{line}"
    return (
        f"{key} ({where}) is an SSH password, which ctl's own SSH never uses (keys only):"
        " not reached; give it a key (ansible_ssh_private_key_file, or one in ssh-agent)"
    )


def unfollowed_connection(host: str, var: Var | None) -> str | None:
    """A warning when the host's ansible_connection is one ctl does not follow (neither SSH
    nor `local`: docker, winrm...): it gathers facts over its own SSH session all the same."""
    if var is None or var.value is None or var.value in SSH_CONNECTIONS | LOCAL_CONNECTIONS:
        return None
    file, line = var.origin
    where = file if line is None else f"{file}:{line}"
    value = shown_name(str(var.value))
    return (
        f"{host}: ansible_connection {value} ({where}) is not followed:"
        f" ctl reaches {host} over SSH all the same"
    )

#!/usr/bin/python
"""Ansible module: check each shard of this host on its own — its unit active and, for a
rank 0, serving — and say why each one that is not failed, with its journal's last lines.

The shards are judged independently: one that failed never keeps another from being
checked. A rank 0 is waited for, up to `timeout`, until `/health` answers 200 and
`/v1/models` lists its model; a unit that stops meanwhile (the engine exited) fails at
once, instead of after the whole wait. The other shards must be active at the end. The
module changes nothing on the host and never fails itself: the play reports each shard.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import time
import urllib.parse
from typing import Any

from ansible.module_utils.basic import AnsibleModule  # type: ignore[import-untyped]

DOCUMENTATION = r"""
module: modelfleet_verify
short_description: Check model-server shards, each on its own, and say why any failed
description:
  - For each shard, its systemd unit must be active; a rank 0 (one with a health_url) must
    also answer /health with 200 and list its model at /v1/models, within the timeout.
  - A shard that fails gets a cause and the last lines of its unit's journal.
options:
  shards:
    description: The shards, each as unit, health_url (null for ranks > 0) and model; an
      https health_url also has ca (the CA certificate file its certificate is checked
      against, with the URL's address) and certificate (the serial it must present).
    type: list
    elements: dict
    required: true
  start_errors:
    description: unit → what starting it said, where that failed (empty otherwise).
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the rank 0s to serve.
    type: float
    default: 600
  interval:
    description: Seconds between checks.
    type: float
    default: 1
  journal_lines:
    description: How many of a failed unit's last journal lines to return.
    type: int
    default: 20
"""

RETURN = r"""
shards:
  description: One per shard, in order, as unit, ok, cause (null when ok) and journal.
  type: list
  returned: always
"""

ACTIVE = ("active", "activating", "reloading")
MAX_LINE = 300  # characters kept of each journal line
REQUEST_SECONDS = 5


def unit_state(unit: str) -> dict[str, str]:
    done = subprocess.run(
        ["systemctl", "show", unit, "--property=ActiveState,SubState,Result,ExecMainStatus,"
         "ExecMainCode,LoadState"],
        capture_output=True, text=True, errors="replace", check=False,
    )  # fmt: skip
    state = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        state[key] = value
    return state


def stopped_cause(state: dict[str, str], start_error: str | None) -> str:
    """Why a unit that is not running stopped, in a few words."""
    if state.get("LoadState") == "not-found":
        return "unit not found"
    status = state.get("ExecMainStatus", "")
    result = state.get("Result", "")
    if result == "exit-code" and status not in ("", "0"):
        how = f"its process exited with status {status}"
        if status == "203":
            how = "its command could not be run (status 203/EXEC)"
    elif result in ("exit-code", "success"):
        how = "its process exited with status 0"
    elif result in ("signal", "core-dump"):
        how = f"its process was killed by signal {status}"
    elif start_error:
        how = start_error.strip().splitlines()[0]
    else:
        how = f"{state.get('SubState', 'dead')} ({result or 'no result'})"
    return f"unit {state.get('ActiveState', 'inactive')}: {how}"


def get(url: str, ca: str | None = None) -> tuple[int | None, str, str | None]:
    """The status and body of a GET, or (None, why it could not be made), and for https
    the serial of the certificate the server presented (hex, as the record says it).

    https is checked against `ca` and the URL's host name or address, as the router does:
    a server without a certificate the fleet's CA signed for that address is no answer."""
    parts = urllib.parse.urlsplit(url)
    try:
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=ca)
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=REQUEST_SECONDS, context=context
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname or "", parts.port, timeout=REQUEST_SECONDS
            )
        try:
            connection.request("GET", parts.path or "/")
            serial = None
            sock = connection.sock
            if isinstance(sock, ssl.SSLSocket):
                peer = sock.getpeercert() or {}
                serial = str(peer.get("serialNumber", "")).lower().lstrip("0") or None
            answer = connection.getresponse()
            body = answer.read(65536).decode("utf-8", "replace")
            return answer.status, body if answer.status == 200 else "", serial
        finally:
            connection.close()
    except ssl.SSLCertVerificationError as error:
        return None, f"TLS: {error.verify_message}", None
    except (OSError, ValueError, http.client.HTTPException) as error:
        return None, str(getattr(error, "reason", None) or error), None


def serving(
    url: str, model: str, ca: str | None = None, serial: str | None = None
) -> tuple[bool, str]:
    """Whether the engine at `url` serves `model` (with the certificate `serial`, where it
    serves TLS); what it said last."""
    status, why, presented = get(f"{url}/health", ca)
    if status != 200:
        return False, f"/health: {status if status is not None else why}"
    if serial is not None and presented != serial.lower().lstrip("0"):
        return False, f"presents certificate {presented}, not the node's {serial}"
    status, body, _ = get(f"{url}/v1/models", ca)
    if status != 200:
        return False, f"/v1/models: {status if status is not None else body}"
    try:
        listed = [entry.get("id") for entry in json.loads(body).get("data", [])]
    except (ValueError, AttributeError):
        return False, "/v1/models: not the list of models"
    if model not in listed:
        return False, f"/v1/models lists {', '.join(map(str, listed)) or 'nothing'}, not {model}"
    return True, ""


def journal(unit: str, lines: int) -> list[str]:
    """The unit's last journal lines: of its last run only where systemd still knows which
    run that was (a unit name comes back with each replica id, boot after boot)."""
    show = ["systemctl", "show", unit, "--property=InvocationID", "--value"]
    invocation = subprocess.run(show, capture_output=True, text=True, check=False).stdout.strip()
    if invocation:  # the engine's own lines, and systemd's about the unit
        match = [f"_SYSTEMD_INVOCATION_ID={invocation}", "+", f"INVOCATION_ID={invocation}"]
    else:
        match = ["--unit", unit, "--boot"]
    done = subprocess.run(
        ["journalctl", *match, "--lines", str(lines), "--no-pager", "--no-hostname",
         "--output", "short-iso"],
        capture_output=True, text=True, errors="replace", check=False,
    )  # fmt: skip
    kept = [
        line for line in done.stdout.splitlines() if line.strip() and not line.startswith("-- ")
    ]
    return [line[:MAX_LINE] for line in kept][-lines:]


def verify(
    shards: list[dict[str, Any]], errors: dict[str, str], timeout: float, interval: float
) -> dict[str, str]:
    """unit → why it failed, for each shard that did."""
    failed: dict[str, str] = {}
    waiting = {s["unit"]: s for s in shards if s.get("health_url")}
    last: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while True:
        for unit, shard in list(waiting.items()):
            state = unit_state(unit)
            if state.get("ActiveState") not in ACTIVE:
                failed[unit] = stopped_cause(state, errors.get(unit) or None)
            else:
                ok, last[unit] = serving(
                    shard["health_url"], shard["model"], shard.get("ca"), shard.get("certificate")
                )
                if not ok:
                    continue
            del waiting[unit]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(interval)
    for unit in waiting:
        failed[unit] = f"not serving after {timeout:g} s (last: {last.get(unit, 'no answer')})"
    for shard in shards:  # the rest must still be up now that their rank 0s were checked
        if not shard.get("health_url"):
            state = unit_state(shard["unit"])
            if state.get("ActiveState") not in ACTIVE:
                failed[shard["unit"]] = stopped_cause(state, errors.get(shard["unit"]) or None)
    return failed


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "shards": {"type": "list", "elements": "dict", "required": True},
            "start_errors": {"type": "dict", "default": {}},
            "timeout": {"type": "float", "default": 600},
            "interval": {"type": "float", "default": 1},
            "journal_lines": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    shards: list[dict[str, Any]] = module.params["shards"]
    if module.check_mode:
        module.exit_json(changed=False, shards=[])
    errors = {str(unit): str(why) for unit, why in module.params["start_errors"].items()}
    failed = verify(shards, errors, module.params["timeout"], module.params["interval"])
    if failed:
        time.sleep(0.5)  # journald takes the last lines of a process that just exited
    lines = module.params["journal_lines"]
    results = [
        {
            "unit": shard["unit"],
            "ok": shard["unit"] not in failed,
            "cause": failed.get(shard["unit"]),
            "journal": journal(shard["unit"], lines) if shard["unit"] in failed else [],
        }
        for shard in shards
    ]
    module.exit_json(changed=False, shards=results)


if __name__ == "__main__":
    main()

"""`ctl top` through the real CLI on the example fleet (examples/facts: hgx-2 and hgx-4 report
their replicas' load), and on a copy where the node of a loaded replica was not reached."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.ctl import ROOT, ctl

EXAMPLES = ROOT / "examples"


def _args(facts: Path = EXAMPLES / "facts") -> list[str]:
    return ["--catalog", str(EXAMPLES / "catalog.yaml"), "--inventory",
            str(EXAMPLES / "inventory"), "--facts", str(facts)]  # fmt: skip


def test_top_once_shows_each_replicas_load_and_each_models_against_its_target() -> None:
    done = ctl("top", "--once", *_args())
    assert done.returncode == 1, done.stderr  # l40s-2 was not reached, as `ctl nodes` says
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "REPLICA", "NODE", "STATE", "RUNNING", "WAITING", "KV"]
    assert lines[1].split() == ["llama-3.1-8b", "llama-3.1-8b-1", "hgx-2", "running", "16", "9",
                                "62%"]  # fmt: skip
    models = {line.split()[0]: line for line in lines[4:]}
    assert models["llama-3.1-8b"].split()[1:] == [
        "1", "of", "1..4", "16", "9", "9.0", "waiting/replica", "4", "waiting/replica",
    ]  # fmt: skip
    # No replica, no figure: `-`, never 0.
    assert models["bge-m3"].split()[1:] == ["0", "of", "2..4", "-", "-", "-", "no", "autoscale"]


def test_top_json_says_null_for_what_was_not_read() -> None:
    done = ctl("top", "--json", *_args())
    assert done.returncode == 1
    data: dict[str, Any] = json.loads(done.stdout)
    assert data["format"] == "modelfleet.top/v1"
    assert data["replicas"][0] == {
        "model": "llama-3.1-8b", "replica": "llama-3.1-8b-1", "node": "hgx-2",
        "state": "running", "running": 16, "waiting": 9, "kv_use": 0.62, "note": None,
    }  # fmt: skip
    models = {m["model"]: m for m in data["models"]}
    assert models["llama-3.1-8b"] == {
        "model": "llama-3.1-8b", "replicas": 1, "min": 1, "max": 4, "running": 16,
        "waiting": 9, "signal": "queue", "value": 9.0, "target": 4.0,
    }  # fmt: skip
    assert models["bge-m3"]["running"] is None and models["bge-m3"]["value"] is None


def test_a_node_not_reached_says_nothing_of_its_replicas_load_now(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    shutil.copytree(EXAMPLES / "facts", facts)
    hgx2 = json.loads((facts / "hgx-2.json").read_text())
    hgx2["error"] = "timed out after 10 s"  # its last load figures stay in the file
    (facts / "hgx-2.json").write_text(json.dumps(hgx2))
    done = ctl("top", "--json", *_args(facts))
    [row] = [r for r in json.loads(done.stdout)["replicas"] if r["node"] == "hgx-2"]
    assert (row["state"], row["running"], row["waiting"], row["kv_use"]) == (
        "Unreachable", None, None, None,
    )  # fmt: skip


def test_top_without_once_or_json_is_refused_until_the_live_table_exists() -> None:
    done = ctl("top", *_args())
    assert done.returncode == 2
    assert "use --once or --json" in done.stderr

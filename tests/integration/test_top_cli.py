"""`ctl top` through the real CLI on the example fleet (examples/facts: hgx-2 and hgx-4 report
their replicas' load), and on a copy where the node of a loaded replica was not reached."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from tests.ctl import ROOT, ctl
from tests.terminal import on_a_terminal

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


def test_top_with_a_bad_interval_is_bad_input() -> None:
    done = ctl("top", "--interval", "0", *_args())
    assert done.returncode == 2
    assert "--interval" in done.stderr


def test_the_live_table_is_redrawn_in_place_with_new_figures_until_ctrl_c(
    tmp_path: Path,
) -> None:
    facts = tmp_path / "facts"
    shutil.copytree(EXAMPLES / "facts", facts)

    def busier() -> None:
        time.sleep(2)  # after the first frame: the next one must show it, in its place
        hgx2 = json.loads((facts / "hgx-2.json").read_text())
        hgx2["replica_load"][0]["waiting"] = 4242
        staged = facts / "hgx-2.json.new"
        staged.write_text(json.dumps(hgx2))
        staged.rename(facts / "hgx-2.json")

    writer = threading.Thread(target=busier)
    writer.start()
    try:
        screen = on_a_terminal(
            ["top", "--interval", "1", *_args(facts)], 120, tmp_path, reply=("4242", "C-c"),
            enter=False,
        )  # fmt: skip
    finally:
        writer.join()
    assert screen.returncode == 0
    headers = [line for line in screen.lines if line.split()[:2] == ["MODEL", "REPLICA"]]
    assert len(headers) == 1, screen.lines  # redrawn in place, not printed again
    row = [line for line in screen.lines if line.startswith("llama-3.1-8b ")][-1]  # the models
    assert row.split()[:2] == ["llama-3.1-8b", "1"] and "4242" in row
    assert "not reached: l40s-2: timed out after 10 s" in screen.lines
    assert not any("Traceback" in line for line in screen.lines)

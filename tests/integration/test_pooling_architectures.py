"""Issue 31 item 4: a model whose staged weights vLLM serves only as embeddings, started as
a chat server. Real vLLM resolves `--runner auto` to pooling for such an architecture (its
model registry, vllm/model_executor/models/registry.py) and registers no chat routes,
while ctl would route chat to it: `ctl reconcile` refuses the plan, exit 2 at the profile,
before anything is done. The architectures come from the weights' config.json, which the
staging module records in the store's marker and the probe reports (the facts snapshot
stands in for the nodes here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.ctl import ROOT, ctl

EXAMPLES = ROOT / "examples"


def facts_with_architectures(tmp_path: Path) -> Path:
    facts = tmp_path / "facts"
    shutil.copytree(EXAMPLES / "facts", facts)
    path = facts / "l40s-1.json"
    data = json.loads(path.read_text())
    [weights] = data["model_store"]["weights"]
    assert weights["source"] == "hf://BAAI/bge-m3"
    weights["architectures"] = ["XLMRobertaModel"]
    path.write_text(json.dumps(data))
    return facts


def reconcile(tmp_path: Path, catalog: Path) -> tuple[int, str, str]:
    result = ctl(
        "reconcile", "--dry-run", "--facts", str(facts_with_architectures(tmp_path)),
        "-i", str(EXAMPLES / "inventory"), "--catalog", str(catalog),
        env={"XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def test_an_embedding_model_started_as_chat_is_refused_at_its_profile(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        (EXAMPLES / "catalog.yaml")
        .read_text()
        .replace("        embedding: true                 # vLLM", "        # vLLM", 1)
    )
    code, out, err = reconcile(tmp_path, catalog)
    assert code == 2, out + err
    assert (
        f"error: {catalog}:10: models.bge-m3.profiles[0].embedding: bge-m3's weights on l40s-1"
        " are XLMRobertaModel, which vLLM 0.34.0 serves only as an embedding model (its model"
        " registry): set `embedding: true`, or use a chat model"
    ) in err.splitlines()
    assert "Traceback" not in err


def test_declared_as_an_embedding_model_it_is_planned(tmp_path: Path) -> None:
    code, out, err = reconcile(tmp_path, EXAMPLES / "catalog.yaml")
    assert "bge-m3" in out and "embedding" not in err, out + err
    assert code in (0, 1), out + err  # 1: the example fleet has models it cannot place

"""Issue 25 item 4 as an operator meets it: a catalog cannot send an inventory secret away.

`ctl catalog check` refuses a token read from a name not meant for one (Ansible's or
ctl's own secrets), and `ctl reconcile` refuses a plan that would stage a model's token to
a host the catalog alone chose, exit 2, before anything is done; a real HTTP server on
127.0.0.1, named by the catalog as `localhost`, stands in for the attacker's host and is
never reached. The example fleet's facts snapshot stands in for the nodes.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ctl import ROOT, ctl
from tests.fakes.hub import Hub, run_hub

EXAMPLES = ROOT / "examples"
MIRROR_TOKEN = "mirror-" + "s3cr3t" * 6


@pytest.fixture
def attacker(tmp_path: Path) -> Iterator[Hub]:
    root = tmp_path / "attacker"
    (root / "files").mkdir(parents=True)
    (root / "files" / "bait.gguf").write_bytes(b"gguf" * 1000)
    with run_hub(root) as served:
        yield served


def catalog(tmp_path: Path, source: str, token: str = "{env: MIRROR_TOKEN}") -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        models:
          bait:
            source: {source}
            token: {token}
            profiles:
              - {{name: cpu, priority: 10, engine: llama.cpp, min_memory_gb: 1}}
        """)
    )
    return path


def reconcile(tmp_path: Path, catalog_path: Path, inventory: Path) -> tuple[int, str, str]:
    result = ctl(
        "reconcile", "--dry-run", "--facts", str(EXAMPLES / "facts"), "-i", str(inventory),
        "--catalog", str(catalog_path),
        env={"XDG_STATE_HOME": str(tmp_path / "state"), "MIRROR_TOKEN": MIRROR_TOKEN},
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def test_a_token_for_a_host_the_catalog_chose_is_refused_and_never_sent(
    tmp_path: Path, attacker: Hub
) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLES / "inventory", inventory)
    source = f"https://localhost:{attacker.port}/files/bait.gguf"
    code, out, err = reconcile(tmp_path, catalog(tmp_path, source), inventory)
    assert code == 2, out + err
    assert (
        f"{tmp_path / 'catalog.yaml'}:4: models.bait.token: bait's token, staging on cpu-small:"
        f" it would be sent to localhost, the host of the source {source}, which is neither the"
        " hub endpoint's (https://huggingface.co) nor one the inventory lists in"
        " modelfleet_token_hosts: a token goes to no other host"
    ) in err
    assert "Traceback" not in err and MIRROR_TOKEN not in out + err
    assert attacker.tokens_seen == [] and sum(attacker.requests.values()) == 0


def test_a_host_the_inventory_allows_may_get_the_token(tmp_path: Path, attacker: Hub) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLES / "inventory", inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as variables:
        variables.write("modelfleet_token_hosts: [localhost]\n")
    source = f"https://localhost:{attacker.port}/files/bait.gguf"
    code, out, err = reconcile(tmp_path, catalog(tmp_path, source), inventory)
    assert code == 0, out + err
    assert "bait" in out and "modelfleet_token_hosts" not in err


@pytest.mark.parametrize(
    ("token", "name"),
    [
        ("{var: ansible_become_password}", "ansible_become_password"),
        ("{env: PROXMOX_TOKEN_SECRET}", "PROXMOX_TOKEN_SECRET"),
    ],
)
def test_catalog_check_refuses_a_token_read_from_ansibles_or_ctls_secrets(
    tmp_path: Path, token: str, name: str
) -> None:
    path = catalog(tmp_path, "hf://meta-llama/Llama-3.1-8B-Instruct", token)
    result = ctl("catalog", "check", "--catalog", str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    kind = "var" if token.startswith("{var") else "env"
    assert f"{path}:4: models.bait.token.{kind}: '{name}' is not an" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_docs_refusal_is_what_ctl_prints(tmp_path: Path) -> None:
    docs = (ROOT / "docs" / "catalog.md").read_text(encoding="utf-8")
    (shown,) = [line for line in docs.splitlines() if "staging on" in line]
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLES / "inventory", inventory)
    path = catalog(tmp_path, "https://models.example.net/bait.gguf")
    code, out, err = reconcile(tmp_path, path, inventory)
    assert code == 2, out + err
    assert f"error: {shown.replace('catalog.yaml', str(path), 1)}" in err.splitlines()


def test_an_engine_fetching_its_own_weights_gets_the_token_only_where_staging_would(
    tmp_path: Path, attacker: Hub
) -> None:
    # Staging off: llama-server sends HF_TOKEN with --model-url's download too
    # (common/download.cpp's bearer token), so the same rule holds for it.
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLES / "inventory", inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as variables:
        variables.write("modelfleet_stage_weights: false\n")
    source = f"https://localhost:{attacker.port}/files/bait.gguf"
    code, out, err = reconcile(tmp_path, catalog(tmp_path, source), inventory)
    assert code == 2, out + err
    assert "models.bait.token: bait's token, its engine fetching it on cpu-small: it would" in err
    assert MIRROR_TOKEN not in out + err and sum(attacker.requests.values()) == 0
    hub = catalog(tmp_path, "hf://org/bait-GGUF")  # to the hub endpoint: allowed
    code, out, err = reconcile(tmp_path, hub, inventory)
    assert code == 0, out + err

"""The shipped example fleet and the README: every file loaded, every command run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.catalog.load import load_catalog
from cli.facts.store import load_facts_dir
from cli.inventory.load import load_inventory
from tests.ctl import ROOT, ctl
from tests.integration.test_controller import systemd_example

EXAMPLES = ROOT / "examples"
FLEET_ARGS = [
    "--inventory",
    str(EXAMPLES / "inventory"),
    "--facts",
    str(EXAMPLES / "facts"),
]
PLACE_ALL = [
    "place",
    "--all",
    "--dry-run",
    "--catalog",
    str(EXAMPLES / "catalog.yaml"),
    *FLEET_ARGS,
]


def test_every_example_file_is_loaded_by_this_test() -> None:
    catalog = load_catalog(EXAMPLES / "catalog.yaml")
    inventory = load_inventory(EXAMPLES / "inventory")
    facts = load_facts_dir(EXAMPLES / "facts")
    loaded = {EXAMPLES / "catalog.yaml"}
    loaded |= {EXAMPLES / "facts" / f"{name}.json" for name in facts}
    loaded |= set((EXAMPLES / "inventory").rglob("*.yml"))
    # Catalogs for the local test fleet (run by test_fleet_reconcile and bench_apply).
    for path in sorted((EXAMPLES / "testfleet").glob("*.yaml")):
        assert load_catalog(path).models
        loaded.add(path)
    # The controller's systemd unit and its environment file (tests/integration/
    # test_controller.py runs them, and under systemd on the test fleet).
    unit, env = systemd_example()
    assert unit["Service"]["ExecStart"] and env
    loaded |= {EXAMPLES / "systemd" / "modelfleet-controller.service"}
    loaded |= {EXAMPLES / "systemd" / "controller.env"}
    # The Grafana dashboard (its queries: tests/integration/test_metrics_docs.py).
    dashboard = json.loads((EXAMPLES / "grafana" / "modelfleet.json").read_text())
    assert dashboard["uid"] == "modelfleet" and dashboard["panels"]
    loaded.add(EXAMPLES / "grafana" / "modelfleet.json")
    every_file = {p for p in EXAMPLES.rglob("*") if p.is_file()}
    assert every_file == loaded
    assert len(catalog.models) == 8
    assert set(facts) == set(inventory.names())


def test_the_example_inventory_says_what_its_comments_say() -> None:
    inventory = load_inventory(EXAMPLES / "inventory")
    assert inventory.host("hgx-5").vars.cordoned == "PSU fan failing"
    assert [f.name for f in inventory.host("hgx-1").vars.fabrics] == ["ib-east"]
    assert [f.name for f in inventory.host("hgx-4").vars.fabrics] == ["ib-west"]
    assert inventory.host("cpu-big").vars.labels == {"role": "coding"}
    assert all(h.address.endswith(".example") or h.address == h.name for h in inventory.hosts)


def test_place_all_on_the_example_fleet_places_what_fits_and_explains_the_rest() -> None:
    result = ctl(*PLACE_ALL)
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "qwen2.5-coder-14b-2  h100x2    hgx-2  GPU 1-2 (one NVLink domain)" in out
    assert "llama-3.1-70b-1      tp8       hgx-1  GPU 0-7 (one NVLink domain)" in out
    assert re.search(r"llama-3\.1-70b-2 +tp4pp2 +hgx-3  GPU 0-3 .*mlx5_0-3 +┐ ib-west", out)
    assert re.search(r"\n +hgx-4  GPU 2-5 .*mlx5_0,2-3 +┘", out)
    assert "deepseek-v3-1        NOT PLACED — blocked" in out
    assert "1 cordoned (hgx-5: PSU fan failing)" in out
    assert (
        "1 has disks full of other files (a100-1: has 40.2 GB free in"
        " /var/lib/modelfleet/models, needs 150; weights stored there hold 7 GB, other files"
        " the rest)"
    ) in " ".join(out.split())
    assert "hgx-3: GPU 4: 2 uncorrected ECC errors" in " ".join(out.split())
    assert "llama-3.1-8b: 1 running (llama-3.1-8b-1), replicas.min reached" in out
    assert all(len(line) <= 100 for line in out.splitlines()), out


def test_place_json_on_the_example_fleet_follows_the_documented_shape() -> None:
    result = ctl(*PLACE_ALL, "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["format"] == "modelfleet.placement/v1"
    assert data["complete"] is False
    by_replica = {p["replica"]: p for p in data["placements"]}
    multi = by_replica["llama-3.1-70b-2"]
    assert multi["profile"] == "tp4pp2"
    assert [(s["node"], s["rank"], s["hcas"]) for s in multi["shards"]] == [
        ("hgx-3", 0, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]),
        ("hgx-4", 1, ["mlx5_0", "mlx5_2", "mlx5_3"]),
    ]
    refused = by_replica["deepseek-v3-1"]
    assert (refused["placed"], refused["verdict"], refused["profile"]) == (False, "blocked", None)
    codes = {(r["node"], r["constraint"], r["blocking"]) for r in refused["rejections"]}
    assert ("hgx-5", "node-status", "condition") in codes
    assert ("cpu-small", "gpu-class", "hardware") in codes
    assert len(refused["rejections"]) == 12  # every node, for its only profile
    # The 70B's A100 profile asks 80 GB cards: the 40 GB box is refused for that, for good;
    # the 80 GB box's model store is nearly full, of other files (its 7 GB of unused weights
    # the staging step would evict are not enough): blocked, someone has to clean up.
    a100x4 = [r for r in multi["rejections"] if r["profile"] == "a100x4"]
    assert {(r["node"], r["constraint"], r["blocking"], r["message"]) for r in a100x4} >= {
        ("a100-2", "gpu-memory", "hardware", "GPU 0-3 have 42.9 GB, needs 80"),
        ("a100-1", "disk", "condition", "has 40.2 GB free in /var/lib/modelfleet/models,"
         " needs 150; weights stored there hold 7 GB, other files the rest"),
    }  # fmt: skip
    assert [a["weights_bytes"] for a in multi["attempts"]] == [150 * 10**9] * 3
    # So the 24B went to the other A100 box, which has the room.
    assert [s["node"] for s in by_replica["mistral-small-24b-1"]["shards"]] == ["a100-2"]
    for placement in data["placements"]:
        assert set(placement) >= {"model", "placed", "profile", "shards", "rejections"}


def test_placing_one_model_by_alias_places_one_more_replica() -> None:
    result = ctl(
        "place", "coder", "--dry-run", "--catalog", str(EXAMPLES / "catalog.yaml"), *FLEET_ARGS
    )
    assert result.returncode == 0, result.stderr
    assert "qwen2.5-coder-14b-2  h100x2    hgx-2  GPU 1-2 (one NVLink domain)" in result.stdout


def test_an_unknown_model_is_bad_input_with_a_suggestion() -> None:
    result = ctl(
        "place", "coderr", "--dry-run", "--catalog", str(EXAMPLES / "catalog.yaml"), *FLEET_ARGS
    )
    assert result.returncode == 2
    assert "no model or alias 'coderr'" in result.stderr
    assert "did you mean 'coder'?" in result.stderr


def test_nodes_shows_a_dash_for_memory_that_was_not_reported() -> None:
    result = ctl("nodes", *FLEET_ARGS)
    assert result.returncode == 1, result.stderr  # l40s-2 is Unreachable: its help says 1
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "NAME", "STATUS", "CERT", "GPUS", "MEM", "FABRICS", "LABELS", "SHARDS",
    ]  # fmt: skip
    by_name = {row.split()[0]: row for row in rows if row and not row.startswith(" ")}
    assert re.search(r"cpu-old +Ready +plain +- +- ", by_name["cpu-old"])
    assert re.search(r"cpu-small +Ready +plain +- +7\.8 ", by_name["cpu-small"])
    assert re.search(r"hgx-2 +Ready +70d +6/8 H100 +2015 +ib-east 4/4", by_name["hgx-2"])
    assert re.search(r"hgx-4 .* ib-west 3/4 ", by_name["hgx-4"])
    assert "Cordoned" in by_name["hgx-5"] and "Unreachable" in by_name["l40s-2"]


def test_nodes_json_says_null_for_unreported_memory() -> None:
    result = ctl("nodes", *FLEET_ARGS, "--json")
    nodes = {n["name"]: n for n in json.loads(result.stdout)["nodes"]}
    assert nodes["cpu-old"]["memory_gib"] is None
    assert nodes["cpu-small"]["memory_gib"] == pytest.approx(7.76, abs=0.01)
    assert nodes["hgx-3"]["gpu_counts"] == [{"class": "H100", "free": 7, "total": 8}]


def test_catalog_check_passes_on_the_example() -> None:
    result = ctl("catalog", "check", "--catalog", str(EXAMPLES / "catalog.yaml"))
    assert result.returncode == 0, result.stderr
    assert "OK — 8 models, 14 profiles, 7 aliases" in result.stdout


def test_catalog_check_json_carries_each_model_as_the_catalog_says() -> None:
    result = ctl("catalog", "check", "--json", "--catalog", str(EXAMPLES / "catalog.yaml"))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["format"] == "modelfleet.catalog/v1"
    written = yaml.safe_load((EXAMPLES / "catalog.yaml").read_text())["models"]
    assert set(document["models"]) == set(written)
    # Fallbacks come resolved: a fallback written as an alias names its model.
    model_of = {a: n for n, m in written.items() for a in m.get("aliases", [])}
    for name, model in document["models"].items():
        assert model["aliases"] == written[name].get("aliases", []), name
        fallbacks = [model_of.get(f, f) for f in written[name].get("fallbacks", [])]
        assert model["fallbacks"] == fallbacks, name
        assert model["profiles"] == [p["name"] for p in written[name]["profiles"]], name
        # Where each profile's token comes from: the model's reference, on every profile
        # (the example's gated models have only hf:// profiles).
        token = written[name].get("token")
        assert model["tokens"] == (
            {p["name"]: f"${token['env']}" for p in written[name]["profiles"]} if token else {}
        ), name


def test_catalog_check_shows_where_a_token_comes_from_never_the_token() -> None:
    secret = "hf_" + "NeverShownNeverShownNeverShownNeve"
    for json_flag in ((), ("--json",)):
        result = ctl(
            "catalog", "check", *json_flag, "--catalog", str(EXAMPLES / "catalog.yaml"),
            env={"HF_TOKEN": secret, "COLUMNS": "200"},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert secret not in result.stdout + result.stderr
        assert "$HF_TOKEN" in result.stdout
    table = ctl(
        "catalog", "check", "--catalog", str(EXAMPLES / "catalog.yaml"), env={"COLUMNS": "200"}
    ).stdout.splitlines()  # fmt: skip
    assert table[0].split()[-1] == "TOKEN"
    rows = {line.split()[0]: line.split()[-1] for line in table[1:-1]}  # no OK line
    assert rows["llama-3.1-8b"] == rows["llama-3.1-70b"] == "$HF_TOKEN"
    assert rows["bge-m3"] == "-"


def test_a_bad_catalog_is_one_line_per_problem_and_exit_code_2(tmp_path: Path) -> None:
    text = (
        (EXAMPLES / "catalog.yaml")
        .read_text()
        .replace("gpus_per_node: 8\n", "gpus_per_nod: 8\n", 1)
    )
    (tmp_path / "catalog.yaml").write_text(text)
    result = ctl("catalog", "check", "--catalog", "catalog.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: catalog.yaml:94: models.llama-3.1-70b.profiles[0]: unknown key"
        " 'gpus_per_nod' (did you mean 'gpus_per_node'?)"
    ]


def readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, flags=re.DOTALL)


def test_the_readme_has_exactly_two_setup_commands() -> None:
    commands = readme_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)


def test_the_readme_run_command_installs_and_runs_ctl_on_the_example() -> None:
    install, _, run = readme_commands()[0].rpartition(" && ")
    assert install == "python3 -m venv .venv && .venv/bin/pip install ."
    program, *args = run.split()
    assert program == ".venv/bin/ctl"
    result = ctl(*args)
    assert result.returncode == 1, result.stderr  # deepseek-v3 does not fit, as documented
    assert "NOT PLACED" in result.stdout


def test_ci_runs_the_readme_test_command() -> None:
    test_command = readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


@pytest.mark.parametrize(
    ("marker", "args"),
    [
        ("PLACEMENT", PLACE_ALL),
        ("NODES", ["nodes", *FLEET_ARGS]),
        ("TOP", ["top", "--once", "--catalog", str(EXAMPLES / "catalog.yaml"), *FLEET_ARGS]),
    ],
)
def test_the_readme_shows_what_ctl_prints_today(marker: str, args: list[str]) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # The block cog writes under the marker that names it (scripts/docs_output.py).
    call = f'docs_output.readme_block("{marker}")'
    opening = f"<!-- [[[cog import docs_output; cog.out({call}) ]]] -->"
    shown = readme.split(f"{opening}\n```text\n", 1)[1].split("```", 1)[0]
    printed = ctl(*args).stdout
    command, output = shown.split("\n", 1)
    assert command.startswith("$ ctl ")
    assert output == printed


@pytest.mark.parametrize(
    "document",
    ["README.md", "docs/cli.md", "docs/reconcile.md", "docs/placement.md", "docs/routing.md"],
)
def test_cog_finds_the_generated_blocks_up_to_date(document: str) -> None:
    # README's example outputs are what ctl prints today, docs/cli.md every command's --help.
    # docs/reconcile.md's engine table is the engine specs' (cli/engines/specs.py), and
    # docs/placement.md's constraint table the constraints' (cli/placement/constraints.py).
    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "--diff", "-I", "scripts", document],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Checking {document}" in done.stdout


def test_the_readme_commands_table_names_every_command_and_nothing_else() -> None:
    # docs/cli.md's headings are every command (the test above holds them to the code).
    headings = re.findall(r"^## (ctl.*)$", (ROOT / "docs" / "cli.md").read_text(), re.MULTILINE)
    commands = {h for h in headings if not any(o.startswith(h + " ") for o in headings)}
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Commands") : readme.index("## Documentation")]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `ctl"))
    subcommand = "(?: (?:check|init|create|list|revoke|rotate))?"
    named = set(re.findall(rf"`(ctl [a-z][a-z-]*{subcommand})\b", table))
    assert commands == named


def test_the_readme_lifecycle_names_a_command_per_step_in_order() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Lifecycle") : readme.index("## Documentation")]
    steps = re.findall(r"^\d\. \*\*(\w+)\*\* — `ctl ([a-z-]+)", section, re.MULTILINE)
    assert steps == [
        ("provision", "provision-node"), ("onboard", "onboard-node"), ("serve", "reconcile"),
        ("renew", "reconcile"), ("drain", "drain"), ("offboard", "offboard-node"),
        ("deprovision", "deprovision-node"),
    ]  # fmt: skip
    headings = set(re.findall(r"^## ctl (\S+)$", (ROOT / "docs" / "cli.md").read_text(), re.M))
    assert {command for _, command in steps} <= headings


def test_nodes_wide_shows_each_nodes_model_store_and_unknown_as_a_question_mark() -> None:
    result = ctl("nodes", "--wide", *FLEET_ARGS, env={"COLUMNS": "200"})
    assert result.returncode == 1, result.stderr  # l40s-2 is Unreachable
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "NAME", "STATUS", "CERT", "GPUS", "MEM", "STORE", "FABRICS", "LABELS", "SHARDS",
    ]  # fmt: skip
    by_name = {row.split()[0]: row for row in rows if row and not row.startswith(" ")}
    assert re.search(r" 1008  40 GB free, 1 held \(7 GB\) +- ", by_name["a100-1"])
    assert re.search(r" 2015  7384 GB free, 2 held \(157 GB\) +ib-east", by_name["hgx-1"])
    assert re.search(r" 7\.8  61 GB free, not made yet +- ", by_name["cpu-small"])
    assert re.search(r" -  \? +- ", by_name["cpu-old"])  # an old probe: unknown, not empty


def test_nodes_json_carries_the_model_store_as_the_node_reported_it() -> None:
    result = ctl("nodes", *FLEET_ARGS, "--json")
    nodes = {n["name"]: n for n in json.loads(result.stdout)["nodes"]}
    assert nodes["cpu-old"]["model_store"] is None
    store = nodes["a100-1"]["model_store"]
    assert (store["path"], store["present"], store["free_bytes"]) == (
        "/var/lib/modelfleet/models", True, 40_213_508_096,
    )  # fmt: skip
    assert store["weights"] == [
        {
            "source": "hf://mistralai/Mistral-7B-Instruct-v0.3",
            "bytes": 7_000_000_000,
            "completed": "2026-06-02T11:20:55Z",
            "architectures": [],  # a marker from before staging recorded them
        }
    ]


def test_drain_dry_run_on_the_example_snapshot_moves_the_nodes_replicas_and_writes_nothing() -> (
    None
):
    before = {p: p.read_bytes() for p in (EXAMPLES / "inventory").rglob("*") if p.is_file()}

    result = ctl(
        "drain", "hgx-2", "--dry-run", "--catalog", str(EXAMPLES / "catalog.yaml"), *FLEET_ARGS
    )

    assert result.returncode == 1, result.stderr  # deepseek-v3 still fits nowhere
    out = result.stdout
    assert re.search(r"start +llama-3\.1-8b-2 +h100x1 +hgx-3 +GPU 7", out)
    assert "moves llama-3.1-8b-1 off a drained node" in out
    assert re.search(r"drain +llama-3\.1-8b-1 +node drained \[hgx-2\]", out)
    assert "hgx-2: drained" in out
    after = {p: p.read_bytes() for p in (EXAMPLES / "inventory").rglob("*") if p.is_file()}
    assert after == before  # a dry run writes no cordon


def test_drain_reads_a_snapshot_only_for_a_dry_run() -> None:
    result = ctl("drain", "hgx-2", "--catalog", str(EXAMPLES / "catalog.yaml"), *FLEET_ARGS)

    assert result.returncode == 2
    assert "--facts reads a snapshot: use it with --dry-run" in result.stderr

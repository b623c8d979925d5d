"""The cheap no-op pass (issue 28): a router reports what it serves (the line
deploy_router.yml records, read by the facts probe) and ctl runs the router playbook only on
the routers whose line differs from what it would write (cli/routes/deploy.py)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cli.facts.probe import Section, facts_from_probe, router_served
from cli.routes.deploy import RouterDeployer, router_variables, served_line
from cli.routes.table import RouteTable
from tests.ctl import ROOT

DIGEST = "a" * 64
CONFIG = "model_list: []\n"
CONFIG_SHA = hashlib.sha256(CONFIG.encode()).hexdigest()
LINE = f"{DIGEST} {CONFIG_SHA}"


def section(served: str, config: str = CONFIG_SHA, units: str = "active active ") -> Section:
    return Section(f"served\t{served}\nconfig\t{config}\nunits\t{units}", 0)


def test_a_router_serving_its_recorded_routes_reports_the_line() -> None:
    assert router_served(section(LINE)) == LINE


@pytest.mark.parametrize(
    "reported",
    [
        section(LINE, config="b" * 64),  # the routes file changed since (by hand)
        section(LINE, units="active inactive "),  # the front is down
        section(LINE, units="failed active "),
        section("not a digest"),
        section(f"{DIGEST} {CONFIG_SHA} extra"),
        section(f"{DIGEST.upper()} {CONFIG_SHA}"),
        Section("", 127),  # no record: never deployed, or not a router
        None,  # a probe from before the section
    ],
)
def test_anything_else_is_not_known_to_serve_anything(reported: Section | None) -> None:
    assert router_served(reported) is None


def run_probe(tmp_path: Path, path: str) -> str:
    env = {
        **os.environ,
        "MODELFLEET_ROUTER_DIR": str(tmp_path / "router"),
        "MODELFLEET_SHARD_DIR": str(tmp_path / "no-shards"),
        "MODELFLEET_PKI_DIR": str(tmp_path / "no-pki"),
        "PATH": path,
    }
    probe = (ROOT / "cli" / "facts" / "probe.sh").read_text()
    return subprocess.run(
        ["sh", "-s", "--", str(tmp_path / "models")],
        input=probe, capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout  # fmt: skip


def test_the_real_probe_reads_the_record_the_routes_file_and_the_units(tmp_path: Path) -> None:
    router = tmp_path / "router"
    router.mkdir()
    (router / "served").write_text(LINE + "\n")
    (router / "config.yaml").write_text(CONFIG)
    # This machine runs no router: systemd says its units are inactive.
    assert (
        facts_from_probe(run_probe(tmp_path, "/usr/bin:/bin"), datetime.now(UTC)).router_served
        is None
    )
    # A router whose units run (systemctl as a router's would answer `is-active` for both).
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "systemctl").write_text(
        "#!/bin/sh\n[ \"$1\" = is-active ] && printf 'active\\nactive\\n'\n"
    )
    (tools / "systemctl").chmod(0o755)
    output = run_probe(tmp_path, f"{tools}:/usr/bin:/bin")
    assert facts_from_probe(output, datetime.now(UTC)).router_served == LINE
    (router / "config.yaml").write_text(CONFIG + "# edited by hand\n")
    output = run_probe(tmp_path, f"{tools}:/usr/bin:/bin")
    assert facts_from_probe(output, datetime.now(UTC)).router_served is None


TABLE = RouteTable(at=datetime(2026, 11, 30, 9, 0, tzinfo=UTC), models=(), aliases={})


def deployer(tmp_path: Path, **kwargs: object) -> RouterDeployer:
    return RouterDeployer(
        ["router-1", "router-2"], tmp_path / "inventory", tmp_path / "known_hosts",
        tmp_path / "logs", **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_served_line_names_the_variables_and_the_routes_file() -> None:
    variables = router_variables(TABLE)
    line = served_line(variables)
    digest, config = line.split()
    assert len(digest) == 64
    assert config == hashlib.sha256(variables["modelfleet_router_config"].encode()).hexdigest()
    assert served_line(router_variables(TABLE, crl="")) != line  # a list cleared: a change
    assert served_line(dict(variables)) == line


def test_routers_that_serve_the_routes_already_run_no_playbook(tmp_path: Path) -> None:
    line = served_line(router_variables(TABLE))
    routers = deployer(tmp_path, served={"router-1": line, "router-2": line})
    assert routers.push(TABLE) == {}
    assert routers.runs == [] and routers.skipped == 1
    assert not (tmp_path / "logs").exists()  # ansible-playbook never ran


def test_a_router_not_reached_this_pass_is_not_waited_for(tmp_path: Path) -> None:
    line = served_line(router_variables(TABLE))
    routers = deployer(
        tmp_path, served={"router-1": line, "router-2": None},
        unreached={"router-2": "timed out after 3 s"},
    )  # fmt: skip
    assert routers.push(TABLE) == {
        "router-2": "not reached: timed out after 3 s; its routes not updated"
    }
    assert routers.runs == []

"""The teams' keys against LiteLLM itself: the proxy at the pinned version, run as a
router runs it, with the keys hook the playbook installs (playbooks/files/
modelfleet_router_keys.py), ctl's routes and the keys file ctl renders, in front of a
stand-in vLLM on the loopback.

Keys are made and revoked with `ctl keys`; the routes are those of a fleet whose `big`
has no ready replica (`small` answers for it and its aliases), so that a key for `chat`
meets a fallback it does not have. The relay is not part of this test: every deployment
is pointed at the stand-in engine itself.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from cli.ops.keys import keys_file, load_keys
from cli.routes.deploy import router_variables
from cli.routes.litellm import litellm_config
from cli.routes.table import RouteTable, route_table
from tests.builders import snapshot
from tests.ctl import ctl
from tests.integration.litellm_env import litellm_environment, litellm_venv
from tests.unit.doubles.test_standin_engine import (
    LOCALHOST,
    OPENER,
    Engines,
    free_port,
    probe,
    vllm_args,
    wait_for,
)
from tests.unit.routes.test_routes import ADDRESSES, MODELS, MODELS_YAML, fleet

MASTER = "sk-operator-master-key-0123456789"


@dataclass
class Answer:
    status_code: int
    text: str
    headers: dict[str, str]


@dataclass
class Router:
    url: str
    keys: Path  # the file the hook reads, as the unit's ExecStartPre copies it
    log: Path
    table: RouteTable
    state: Path
    inventory: Path
    catalog: Path

    def ask(self, key: str, model: str, **body: object) -> Answer:
        payload = {"model": model, "messages": [{"role": "user", "content": "hi"}], **body}
        request = urllib.request.Request(
            f"{self.url}/v1/chat/completions",
            data=json.dumps(payload).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        try:
            with OPENER.open(request, timeout=60) as response:
                return Answer(response.status, response.read().decode(), dict(response.headers))
        except urllib.error.HTTPError as error:
            return Answer(error.code, error.read().decode(), dict(error.headers))

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = ctl(
            "keys", *args, "--inventory", str(self.inventory),
            env={"XDG_STATE_HOME": str(self.state)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    def create(self, *args: str) -> str:
        key = self.ctl("create", *args, "--catalog", str(self.catalog)).stdout.strip()
        self.install()
        return key

    def install(self) -> None:
        """What a route update does: the keys rendered with the routes, written whole."""
        kept = load_keys(keys_file(self.state / "modelfleet", self.inventory))
        text = router_variables(self.table, keys=kept, now=datetime.now(UTC))
        staged = self.keys.with_name(".keys.json")
        staged.write_text(text["modelfleet_router_keys"] + "\n")
        staged.chmod(0o400)
        staged.replace(self.keys)


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    venv = litellm_venv()
    (tmp_path / "engines").mkdir()
    engines = Engines(tmp_path / "engines")
    engine_port, port = free_port(), free_port()
    proxy = None
    try:
        engines.start("vllm", vllm_args(engine_port), engine_port)
        table = route_table(MODELS, snapshot(*fleet(hgx2_unreachable=True)), ADDRESSES)
        config = litellm_config(table)
        for deployment in config["model_list"]:
            deployment["litellm_params"] |= {
                "model": "hosted_vllm/tiny",
                "api_base": f"http://{LOCALHOST}:{engine_port}/v1",
            }
        config["general_settings"]["background_health_checks"] = False
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        catalog = tmp_path / "catalog.yaml"
        catalog.write_text(textwrap.dedent(MODELS_YAML))
        inventory = tmp_path / "inventory.yml"
        inventory.write_text("all:\n  hosts: {}\n")
        keys = tmp_path / "run" / "keys.json"
        keys.parent.mkdir(mode=0o700)
        found = Router(
            f"http://{LOCALHOST}:{port}", keys, tmp_path / "litellm.log", table,
            tmp_path / "state", inventory, catalog,
        )  # fmt: skip
        found.install()
        log = found.log.open("wb")
        proxy = subprocess.Popen(
            [str(venv / "bin" / "litellm"), "--config", str(tmp_path / "config.yaml"),
             "--host", LOCALHOST, "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp_path,
            env=litellm_environment(
                LITELLM_MASTER_KEY=MASTER, MODELFLEET_ROUTER_KEYS=str(keys),
                MODELFLEET_ROUTER_WORKERS="1",
            ),
        )  # fmt: skip

        def up() -> bool:
            assert proxy is not None and proxy.poll() is None, found.log.read_text()[-3000:]
            return probe(f"{found.url}/health/liveliness") == 200

        wait_for("the LiteLLM proxy", up, timeout=180)
        yield found
    finally:
        if proxy is not None:
            proxy.terminate()
            try:
                proxy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait(timeout=10)
        engines.close()


def test_litellm_holds_each_team_to_its_models_rate_and_lifetime(router: Router) -> None:
    search = router.create("search", "--models", "chat,tiny", "--rpm", "3")
    ops = router.create("ops", "--all")
    assert search.startswith("sk-mf-") and len(search) > 50

    # Models: tiny is search's; embed is not; chat is, but small answers for it now, which
    # search does not have: refused rather than served by small; nor a client fallback.
    assert router.ask(search, "tiny").status_code == 200
    # A key none of whose models may be asked for now: refused on all (LiteLLM would read
    # an empty list of models as every model).
    lone = router.create("lone", "--models", "chat")
    for model in ("chat", "tiny", "small"):
        assert router.ask(lone, model).status_code in (401, 403), model
    for model, body in (("embed", {}), ("chat", {}), ("tiny", {"fallbacks": ["small"]})):
        refused = router.ask(search, model, **body)
        assert refused.status_code in (401, 403), (model, refused.text)
    # Rate: 3 a minute, the first spent above; refusals count for nothing.
    assert router.ask(search, "tiny").status_code == 200
    assert router.ask(search, "tiny").status_code == 200
    over = router.ask(search, "tiny")
    assert over.status_code == 429, over.text
    assert int({k.lower(): v for k, v in over.headers.items()}["retry-after"]) > 0

    # Another team's key, and the operator's, are not held by search's limits.
    for key in (ops, MASTER):
        for model in ("chat", "embed", "tiny"):
            assert router.ask(key, model).status_code == 200, (model, key == MASTER)

    # Expiry: LiteLLM refuses the key once its time is up, without any update. Made just
    # before it is used, with room for a slow machine to ask once in its lifetime.
    brief = router.create("brief", "--all", "--expires", "8s")
    made = time.monotonic()
    assert router.ask(brief, "tiny").status_code == 200
    time.sleep(max(0.0, 8.5 - (time.monotonic() - made)))
    expired = router.ask(brief, "tiny")
    assert expired.status_code == 401 and "expired" in expired.text, expired.text

    # Revocation: refused from the update that follows on, the others untouched.
    ops_id = ops.split("-")[2]
    revoked = router.ctl("revoke", ops_id)
    assert "from the next `ctl routes --apply` or `ctl reconcile`" in revoked.stderr
    assert router.ask(ops, "tiny").status_code == 200  # not yet on the router
    router.install()
    assert router.ask(ops, "tiny").status_code == 401
    assert router.ask(MASTER, "tiny").status_code == 200
    assert router.ask("sk-mf-00000000-guessed", "tiny").status_code == 401

    # Nowhere but on create's standard output: not in LiteLLM's log, not in ctl's files.
    listed = router.ctl("list", "--json").stdout
    state_files = [p for p in router.state.rglob("*") if p.is_file()]
    for key in (search, ops, brief):
        secret = key.split("-", 3)[3]
        assert secret not in router.log.read_text()
        assert secret not in listed
        assert not any(secret in p.read_text() for p in [*state_files, router.keys])
    for path in state_files:
        assert path.stat().st_mode & 0o077 == 0, path
    assert {k["team"]: k["state"] for k in json.loads(listed)["keys"]} == {
        "search": "valid", "ops": "revoked", "brief": "expired", "lone": "valid",
    }  # fmt: skip

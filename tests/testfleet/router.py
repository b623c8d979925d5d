"""A router for the fleet, and a client that asks it for models while a command runs.

`up N --router NODE` puts NODE in the inventory group `routers`, so that `ctl reconcile`
installs the LiteLLM proxy there (playbooks/deploy_router.yml) and points it at the
replicas that serve (docs/routing.md). `requests MODEL... -- COMMAND...` then shows what a
client sees while COMMAND (say, `ctl drain node-3`) runs: requests through the router
(chat completions; embeddings for an embedding model or an alias of one), one after
another, each on a new connection, with every failure counted and the node of every answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, cast

import yaml

from tests.testfleet.specs import FleetError
from tests.testfleet.state import Fleet

GROUP: Final = "routers"
PORT: Final = 4000  # deploy_router.yml's modelfleet_router_port default
ROUTER_ETC: Final = "/etc/modelfleet/router"
PIP_CA: Final = f"{ROUTER_ETC}/pip-ca.pem"
CRL: Final = f"{ROUTER_ETC}/crl.pem"


def router_group_vars(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """group_vars/routers.yml. The router installs LiteLLM with pip from PyPI; the nodes
    reach it through this machine, so when pip here trusts a CA of its own (PIP_CERT: a
    TLS-inspecting proxy on the way), the router's pip must trust it too."""
    environ = os.environ if environ is None else environ
    ca = environ.get("PIP_CERT")
    if ca and Path(ca).is_file():
        return {"modelfleet_router_pip_args": f"--cert {PIP_CA}"}
    return {}


class Reachable(Protocol):
    def ssh_command(self, node: str, *command: str) -> list[str]: ...


def prepare_router(fleet: Reachable, node: str, environ: Mapping[str, str] | None = None) -> None:
    """The router on `node` without a revocation list a test before left (each test makes
    a CA of its own, and HAProxy checking an engine against another CA's list refuses it:
    every replica down, every request 503); and PIP_CERT's CA where router_group_vars told
    the router's pip to find it."""
    environ = os.environ if environ is None else environ
    script = f"mkdir -p {ROUTER_ETC} && rm -f {CRL}"
    pip_ca = b""
    if router_group_vars(environ):
        script += f" && cat > {PIP_CA}"
        pip_ca = Path(environ["PIP_CERT"]).read_bytes()
    done = subprocess.run(
        fleet.ssh_command(node, f"sh -c {shlex.quote(script)}"),
        input=pip_ca, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        raise FleetError(f"{node}: preparing the router failed: {why}")


UNITS: Final = ("modelfleet-router-front.service", "modelfleet-router.service")
# Killed, not stopped: a stop lets LiteLLM's gunicorn drain for modelfleet_router_drain_
# seconds (600), and its master has been seen to outlive its workers for all of them; a
# test that deploys the router next would wait that long for the stop to end.
STOP_SCRIPT: Final = (
    f"systemctl kill -s KILL {' '.join(UNITS)}; systemctl disable --now {' '.join(UNITS)};"
    f" systemctl reset-failed {' '.join(UNITS)}; true"
)


def stop_router(fleet: Reachable, node: str) -> None:
    """The router on `node` stopped now, installed still (like a disk), started by nothing."""
    subprocess.run(
        fleet.ssh_command(node, f"sh -c {shlex.quote(STOP_SCRIPT)}"),
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip


def fleet_router(fleet: Fleet) -> str:
    """The router `up --router` put in the inventory."""
    data = yaml.safe_load(fleet.inventory.read_text()) or {}
    group = ((data.get("all") or {}).get("children") or {}).get(GROUP) or {}
    routers = list(group.get("hosts") or {})
    if not routers:
        raise FleetError(f"{fleet.inventory} has no router: run `testfleet up N --router NODE`")
    return str(routers[0])


def master_key(fleet: Fleet, node: str) -> str:
    """The key clients send, from the router itself (deploy_router.yml made it there)."""
    done = subprocess.run(
        fleet.ssh_command(node, "cat", f"{ROUTER_ETC}/router.env"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    found = re.search(r"^LITELLM_MASTER_KEY=(\S+)$", done.stdout, flags=re.MULTILINE)
    if done.returncode != 0 or found is None:
        raise FleetError(
            f"{node} has no router's key yet: run `ctl reconcile` with the fleet's inventory"
        )
    return found.group(1)


def aliases_of(config: str) -> dict[str, str]:
    """Each name a LiteLLM configuration answers for as another model (`router_settings.
    model_group_alias`, cli/routes/litellm.py): alias → the model it is asked of."""
    loaded = yaml.safe_load(config)
    settings = loaded.get("router_settings") if isinstance(loaded, dict) else None
    aliases = settings.get("model_group_alias") if isinstance(settings, dict) else None
    if not isinstance(aliases, dict):
        return {}
    return {str(alias): str(model) for alias, model in aliases.items()}


def router_aliases(fleet: Fleet, node: str) -> dict[str, str]:
    """The aliases the router on `node` was given (its config.yaml, deploy_router.yml's)."""
    done = subprocess.run(
        fleet.ssh_command(node, "cat", f"{ROUTER_ETC}/config.yaml"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise FleetError(f"{node} has no router configuration: {done.stderr.strip()}")
    try:
        return aliases_of(done.stdout)
    except yaml.YAMLError as error:
        raise FleetError(f"{node}: its router configuration is not YAML: {error}") from None


@dataclass
class Tally:
    """What one model's requests came to."""

    sent: int = 0
    failures: list[str] = field(default_factory=list)
    answered_from: dict[str, int] = field(default_factory=dict)


# What a request that was not answered as it should be raises: the connection's or HTTP's
# errors, and an answer not in OpenAI's shape.
ANSWER_ERRORS: Final = (OSError, urllib.error.URLError, ValueError, KeyError, IndexError, TypeError)


@dataclass
class Client:
    """Asks the router for each model in turn until stopped: an embeddings request for a
    model the router serves as one (its `model_info.mode`, cli/routes/litellm.py) or an
    alias of one, a chat completion for the others, as a client of each would."""

    url: str
    key: str
    models: Sequence[str]
    nodes: Mapping[str, str] = field(default_factory=dict)  # address → node
    tallies: dict[str, Tally] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    embedding: set[str] = field(default_factory=set)
    engine_of: dict[str, str] = field(default_factory=dict)  # replica → its engine's URL
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias → the model it asks

    def embeds(self, model: str) -> bool:
        """Whether `model`, or the model it is an alias of, is served as an embedding model
        (LiteLLM's /v1/model/info names models, never their aliases)."""
        name, seen = model, {model}
        while name not in self.embedding and self.aliases.get(name, name) not in seen:
            name = self.aliases[name]
            seen.add(name)
        return name in self.embedding

    def _call(self, path: str, body: object = None) -> tuple[object, str]:
        """The answer to GET (no body) or POST `path`, and the replica LiteLLM says
        answered (its deployment's id, the `x-litellm-model-id` header)."""
        request = urllib.request.Request(
            f"{self.url}{path}", data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read()), response.headers.get("x-litellm-model-id", "")

    def learn(self) -> None:
        """What the router serves now: which models embed, and where each replica runs."""
        info, _ = self._call("/v1/model/info")
        for deployment in cast(dict[str, list[dict[str, Any]]], info)["data"]:
            details = deployment.get("model_info") or {}
            if details.get("mode") == "embedding":
                self.embedding.add(str(deployment["model_name"]))
            if details.get("id") and details.get("engine_url"):
                self.engine_of[str(details["id"])] = str(details["engine_url"])

    def where(self, replica: str) -> str:
        """The node `replica` runs on, by its engine's address; else the replica's name."""
        if replica not in self.engine_of:
            # a replica started since: the router has it now (if not, it is named)
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                self.learn()
        host = urllib.parse.urlsplit(self.engine_of.get(replica, "")).hostname or ""
        return self.nodes.get(host, replica or "elsewhere")

    def ask(self, model: str) -> str:
        """One request for `model`; the node that answered."""
        if self.embeds(model):
            answer, replica = self._call("/v1/embeddings", {"model": model, "input": "hello"})
            vector = cast(dict[str, list[dict[str, Any]]], answer)["data"][0]["embedding"]
            if not (isinstance(vector, list) and vector):
                raise ValueError(f"{model}: an answer with no embedding")
        else:
            messages = [{"role": "user", "content": "hello"}]
            answer, replica = self._call(
                "/v1/chat/completions", {"model": model, "messages": messages}
            )
            text = cast(dict[str, list[dict[str, Any]]], answer)["choices"][0]["message"]
            if not isinstance(text.get("content"), str):
                raise ValueError(f"{model}: an answer with no text")
        return self.where(replica)

    def run(self) -> None:
        while not self.stop.is_set():
            for model in self.models:
                tally = self.tallies.setdefault(model, Tally())
                tally.sent += 1
                try:
                    node = self.ask(model)
                except ANSWER_ERRORS as error:
                    tally.failures.append(str(error))
                else:
                    tally.answered_from[node] = tally.answered_from.get(node, 0) + 1
                time.sleep(0.05)


def requests_during(fleet: Fleet, models: Sequence[str], command: Sequence[str]) -> int:
    """Run `command` while a client asks the router for `models`; print what it saw.
    The command's exit code when it failed; else 1 if a request failed, else 0."""
    router = fleet_router(fleet)
    url = f"http://{fleet.node(router).address}:{PORT}"
    nodes = {node.address: node.name for node in fleet.nodes}
    client = Client(url, master_key(fleet, router), models, nodes)
    client.aliases = router_aliases(fleet, router)
    try:
        client.learn()
    except ANSWER_ERRORS as error:
        raise FleetError(f"{router}'s router does not say what it serves: {error}") from None
    for model in models:  # each answers before the command starts, or there is nothing to see
        try:
            client.ask(model)
        except ANSWER_ERRORS as error:
            why = f"{model} does not answer through {router}'s router: {error}"
            raise FleetError(why) from None
    loop = threading.Thread(target=client.run, daemon=True)
    started = time.monotonic()
    loop.start()
    try:
        done = subprocess.run(list(command), check=False)
    except OSError as error:
        raise FleetError(f"cannot run {command[0]}: {error.strerror}") from None
    finally:
        client.stop.set()
        loop.join(timeout=90)
    seconds = time.monotonic() - started
    print(f"requests through {router}'s router while the command ran ({seconds:.0f} s):")
    failed = 0
    for model in models:
        tally = client.tallies.get(model, Tally())
        failed += len(tally.failures)
        where = ", ".join(f"{node} {count}" for node, count in sorted(tally.answered_from.items()))
        print(
            f"  {model}: {tally.sent} sent, {len(tally.failures)} failed"
            + (f"; answered from {where}" if where else "")
        )
        for failure in tally.failures[:3]:
            print(f"    {failure}")
    if done.returncode != 0:
        return done.returncode
    return 1 if failed else 0

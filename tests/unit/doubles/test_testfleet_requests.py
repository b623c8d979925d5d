"""`testfleet requests` asks an embedding model for embeddings by any of its names: the
aliases come from the router's configuration as ctl renders it (cli/routes/litellm.py)."""

from __future__ import annotations

from cli.routes.litellm import litellm_config, render
from cli.routes.table import route_table
from tests.builders import snapshot
from tests.testfleet.router import Client, aliases_of
from tests.unit.routes.test_routes import ADDRESSES, MODELS, fleet


def test_an_alias_of_an_embedding_model_is_asked_for_embeddings() -> None:
    table = route_table(MODELS, snapshot(*fleet()), ADDRESSES)
    config = render(table)
    client = Client("http://127.0.0.1:4000", "key", ["embeddings", "chat-small", "embed"])
    client.aliases = aliases_of(config)
    # What learn() takes from /v1/model/info: the deployments' model_info, as rendered.
    client.embedding = {
        d["model_name"]
        for d in litellm_config(table)["model_list"]
        if d["model_info"].get("mode") == "embedding"
    }
    assert client.embedding == {"embed"}
    assert client.aliases["embeddings"] == "embed"
    assert [client.embeds(m) for m in ("embeddings", "embed", "chat-small", "chat", "big")] == [
        True, True, False, False, False,
    ]  # fmt: skip


def test_aliases_that_run_in_a_circle_end() -> None:
    client = Client("http://127.0.0.1:4000", "key", ["a"], aliases={"a": "b", "b": "a"})
    assert not client.embeds("a")
    client.embedding = {"b"}
    assert client.embeds("a")


def test_a_configuration_without_aliases_has_none() -> None:
    assert aliases_of("router_settings:\n  num_retries: 0\n") == {}
    assert aliases_of("[]") == {}

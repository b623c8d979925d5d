"""The staging module (playbooks/library/modelfleet_stage.py) against a faithful fake of
the hub's download endpoints on loopback (tests/fakes/hub.py): what lands in the store,
what is sent again, and what is refused."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.facts.model import StoredWeights, store_directory
from tests.fakes.hub import LFS_THRESHOLD, Hub, run_hub
from tests.playbook_modules import load_playbook_module

ROOT = Path(__file__).resolve().parents[3]
SOURCE = "hf://org/small"
GATED = "hf://org/gated"
TOKEN = "hf_" + "Tk" * 17


stage_module = load_playbook_module("modelfleet_stage")
StageError = stage_module.StageError


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    root = tmp_path / "hub"
    small = root / "models" / "org" / "small"
    small.mkdir(parents=True)
    (small / "config.json").write_text(
        '{"model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"]}'
    )
    (small / "model.safetensors").write_bytes(os.urandom(LFS_THRESHOLD + 12345))
    (small / "tokenizer").mkdir()
    (small / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    gated = root / "models" / "org" / "gated"
    gated.mkdir(parents=True)
    (gated / "weights.bin").write_bytes(b"x" * 1000)
    (root / "files").mkdir()
    (root / "files" / "tiny.gguf").write_bytes(os.urandom(300_000))
    with run_hub(root, {"org/gated": TOKEN}) as served:
        yield served


def stage(
    hub: Hub, store: Path, source: str = SOURCE, token: str | None = None
) -> dict[str, object]:
    result: dict[str, object] = stage_module.stage(
        source, store, store_directory(source), hub.endpoint, "main", token, 10
    )
    return result


def repo_bytes(hub: Hub, name: str = "small") -> int:
    base = hub.root / "models" / "org" / name
    return sum(p.stat().st_size for p in base.rglob("*") if p.is_file())


def test_a_hub_repo_is_downloaded_whole_then_marked_complete(hub: Hub, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = stage(hub, store)
    directory = store / store_directory(SOURCE)
    assert result["changed"] is True and result["path"] == str(directory)
    assert result["bytes"] == repo_bytes(hub) == hub.bytes_sent
    for file in (hub.root / "models" / "org" / "small").rglob("*"):
        if file.is_file():
            staged = directory / file.relative_to(hub.root / "models" / "org" / "small")
            assert staged.read_bytes() == file.read_bytes()
    marker = json.loads((directory / ".modelfleet-complete").read_text())
    assert marker["source"] == SOURCE and marker["bytes"] == repo_bytes(hub)
    progress = json.loads((directory / ".modelfleet-progress").read_text())
    assert progress == {"bytes": repo_bytes(hub), "total": repo_bytes(hub), "state": "done",
                        "message": ""}  # fmt: skip
    assert not list(directory.rglob("*.incomplete"))


def test_the_marker_says_the_architectures_of_the_weights_config_json(
    hub: Hub, tmp_path: Path
) -> None:
    # ctl checks them against what vLLM serves only as embeddings (issue 31 item 4).
    store = tmp_path / "store"
    stage(hub, store)
    marker = (store / store_directory(SOURCE) / ".modelfleet-complete").read_text()
    assert json.loads(marker)["architectures"] == ["XLMRobertaModel"]
    assert StoredWeights.model_validate_json(marker).architectures == ("XLMRobertaModel",)
    url = f"{hub.endpoint}/files/tiny.gguf"
    stage(hub, store, url)
    directory = store / store_directory(url)
    assert "architectures" not in json.loads((directory / ".modelfleet-complete").read_text())


def test_a_source_stored_complete_is_not_sent_again(hub: Hub, tmp_path: Path) -> None:
    store = tmp_path / "store"
    stage(hub, store)
    sent, asked = hub.bytes_sent, sum(hub.requests.values())
    again = stage(hub, store)
    assert again["changed"] is False and again["downloaded"] == 0
    assert (hub.bytes_sent, sum(hub.requests.values())) == (sent, asked)


def test_an_interrupted_download_resumes_where_it_stopped(hub: Hub, tmp_path: Path) -> None:
    store = tmp_path / "store"
    directory = store / store_directory(SOURCE)
    directory.mkdir(parents=True)
    weights = (hub.root / "models" / "org" / "small" / "model.safetensors").read_bytes()
    half = len(weights) // 2
    (directory / "model.safetensors.incomplete").write_bytes(weights[:half])
    stage(hub, store)
    assert hub.bytes_sent == repo_bytes(hub) - half
    assert (directory / "model.safetensors").read_bytes() == weights


def test_a_corrupt_partial_file_fails_its_checksum_and_marks_nothing(
    hub: Hub, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    directory = store / store_directory(SOURCE)
    directory.mkdir(parents=True)
    (directory / "model.safetensors.incomplete").write_bytes(b"\0" * 1000)
    with pytest.raises(StageError, match=r"model.safetensors: its SHA-256 is not the one"):
        stage(hub, store)
    assert not (directory / ".modelfleet-complete").exists()
    assert not (directory / "model.safetensors.incomplete").exists()  # the next try starts over
    progress = json.loads((directory / ".modelfleet-progress").read_text())
    assert progress["state"] == "failed" and "SHA-256" in progress["message"]
    stage(hub, store)
    assert (directory / ".modelfleet-complete").exists()


def test_a_gated_repo_needs_its_token_and_the_token_goes_only_to_the_hub(
    hub: Hub, tmp_path: Path
) -> None:
    with pytest.raises(StageError) as refused:
        stage(hub, tmp_path / "store", GATED)
    assert str(refused.value) == (
        "listing org/gated: HTTP 401: the hub refused the token (or none was given)"
    )
    result = stage(hub, tmp_path / "store", GATED, token=TOKEN)
    assert result["bytes"] == 1000
    assert hub.tokens_seen and set(hub.tokens_seen) == {f"Bearer {TOKEN}"}
    directory = tmp_path / "store" / store_directory(GATED)
    for file in directory.rglob("*"):
        assert TOKEN.encode() not in file.read_bytes()


def test_a_store_without_room_is_refused_before_a_byte_is_sent(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(stage_module.shutil, "disk_usage", lambda _: usage._replace(free=1_000_000))
    with pytest.raises(StageError, match=r"^needs 0\.0 GB more in .*store, 0\.0 GB free$"):
        stage(hub, tmp_path / "store")
    assert hub.bytes_sent == 0


def test_an_http_source_is_one_file_sized_by_its_content_length(hub: Hub, tmp_path: Path) -> None:
    source = f"{hub.endpoint}/files/tiny.gguf"
    result = stage(hub, tmp_path / "store", source)
    staged = tmp_path / "store" / store_directory(source) / "tiny.gguf"
    assert staged.read_bytes() == (hub.root / "files" / "tiny.gguf").read_bytes()
    assert result["bytes"] == 300_000
    # its length is the total the progress bar counts against
    progress = json.loads((staged.parent / ".modelfleet-progress").read_text())
    assert (progress["bytes"], progress["total"], progress["state"]) == (300_000, 300_000, "done")


def test_a_token_never_reaches_a_host_the_catalog_alone_chose(hub: Hub, tmp_path: Path) -> None:
    """Issue 25 item 4, on the node: a real HTTP server on 127.0.0.1, reached as `localhost`
    (a host other than the hub endpoint's 127.0.0.1), stands in for an attacker's host a
    catalog names as a source. With the token, staging is refused before any request: no
    Authorization header, no request at all, ever reaches it. Listed in token_hosts (the
    inventory's modelfleet_token_hosts), it is a mirror the operator allowed."""
    attacker_root = tmp_path / "attacker"
    (attacker_root / "files").mkdir(parents=True)
    (attacker_root / "files" / "bait.gguf").write_bytes(b"gguf" * 1000)
    with run_hub(attacker_root) as attacker:
        source = f"http://localhost:{attacker.port}/files/bait.gguf"
        with pytest.raises(StageError) as refused:
            stage_module.stage(
                source, tmp_path / "store", store_directory(source), hub.endpoint, "main",
                TOKEN, 10,
            )  # fmt: skip
        assert str(refused.value) == (
            f"{source}: the token is not sent to localhost: it goes only to the hub endpoint's"
            " host or one listed in modelfleet_token_hosts"
        )
        assert attacker.tokens_seen == [] and sum(attacker.requests.values()) == 0
        assert TOKEN not in str(refused.value)
        allowed = stage_module.stage(
            source, tmp_path / "store", store_directory(source), hub.endpoint, "main", TOKEN, 10,
            token_hosts=["LOCALHOST"],
        )  # fmt: skip
        assert allowed["bytes"] == 4000
        assert attacker.tokens_seen == [f"Bearer {TOKEN}"]


def test_a_missing_http_file_is_a_staging_failure(hub: Hub, tmp_path: Path) -> None:
    with pytest.raises(StageError, match=r"^downloading nothing.gguf: HTTP 404 Not Found$"):
        stage(hub, tmp_path / "store", f"{hub.endpoint}/files/nothing.gguf")


def test_a_file_source_is_checked_for_presence_not_copied(hub: Hub, tmp_path: Path) -> None:
    present = hub.root / "files" / "tiny.gguf"
    result = stage(hub, tmp_path / "store", f"file://{present}")
    assert result == {"changed": False, "path": str(present), "bytes": 300_000, "downloaded": 0}
    assert not (tmp_path / "store").exists()
    with pytest.raises(StageError, match=r"is not on this node"):
        stage(hub, tmp_path / "store", f"file://{tmp_path}/absent.gguf")


def test_a_download_past_its_deadline_is_a_staging_failure(hub: Hub, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with pytest.raises(StageError, match=r"^not done in time: \d+ of \d+ bytes$"):
        stage_module.stage(SOURCE, store, store_directory(SOURCE), hub.endpoint, deadline=-1)
    directory = store / store_directory(SOURCE)
    assert not (directory / ".modelfleet-complete").exists()
    progress = json.loads((directory / ".modelfleet-progress").read_text())
    assert progress["state"] == "failed"


def test_unused_weights_are_evicted_least_recently_used_first_to_make_room(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    for name, used_at in (("old-a", 100), ("old-b", 200), ("in-use", 50)):
        (store / name).mkdir(parents=True)
        (store / name / "w.bin").write_bytes(b"w" * 6_000_000)  # two make room, one does not
        stage_module.write_marker(store / name, f"hf://org/{name}", 6_000_000)
        (store / name / ".modelfleet-used").touch()
        os.utime(store / name / ".modelfleet-used", (used_at, used_at))
    real = shutil.disk_usage(tmp_path)
    removed: list[str] = []

    def usage(_: object) -> object:
        # room for the download once two directories are gone
        gone = sum(not (store / n).exists() for n in ("old-a", "old-b", "in-use"))
        return real._replace(free=repo_bytes(hub) + 1 if gone >= 2 else 1000)

    monkeypatch.setattr(stage_module.shutil, "disk_usage", usage)
    original = stage_module.shutil.rmtree

    def rmtree(path: Path) -> None:
        removed.append(Path(path).name)
        original(path)

    monkeypatch.setattr(stage_module.shutil, "rmtree", rmtree)
    result = stage_module.stage(
        SOURCE, store, store_directory(SOURCE), hub.endpoint, evictable=["old-b", "old-a", "../x"]
    )
    assert removed == ["old-a", "old-b"]  # least recently used first; in-use never offered
    assert result["evicted"] == ["old-a", "old-b"]
    assert (store / "in-use" / ".modelfleet-complete").exists()
    assert (store / store_directory(SOURCE) / ".modelfleet-complete").exists()


def test_without_enough_unused_weights_the_staging_fails_and_evicts_nothing(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    (store / "old").mkdir(parents=True)
    stage_module.write_marker(store / "old", "hf://org/old", 10)
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(stage_module.shutil, "disk_usage", lambda _: real._replace(free=1000))
    with pytest.raises(StageError, match=r"^needs 0\.0 GB more in .*, 0\.0 GB free$"):
        stage_module.stage(SOURCE, store, store_directory(SOURCE), hub.endpoint, evictable=["old"])
    assert (store / "old" / ".modelfleet-complete").exists()  # no use removing it
    assert hub.bytes_sent == 0

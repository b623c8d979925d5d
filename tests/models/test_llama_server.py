"""The real llama-server (scripts/build_llama_server) with the tiny model, on the loopback:
the model is what tiny_gguf says it is, and the command lines ctl writes for llama.cpp are
ones the real server accepts and serves with."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gguf import GGUFReader

from cli.catalog.load import parse_catalog
from cli.shards.engines import Rank, command_line
from tests.models.llama_server import LlamaServer
from tests.models.tiny_gguf import TinyLlama, write_tiny_llama

CATALOG = """\
models:
  tiny:
    source: file://{model}
    profiles:
      - {{name: cpu, priority: 10, engine: llama.cpp, threads: 1, context_length: 256}}
  tiny-embed:
    source: file://{model}
    profiles:
      - {{name: cpu, priority: 10, engine: llama.cpp, threads: 1,
         args: ["--embeddings", "--pooling", "mean"]}}
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_tiny_model_is_a_two_layer_64_wide_llama_with_the_spm_vocabulary(
    tiny_model: Path, llama_build: LlamaServer, tmp_path: Path
) -> None:
    reader = GGUFReader(tiny_model)
    fields = {key: field.contents() for key, field in reader.fields.items()}
    assert fields["general.architecture"] == "llama"
    assert fields["llama.block_count"] == 2
    assert fields["llama.embedding_length"] == 64
    assert fields["llama.attention.head_count"] == 4
    assert fields["tokenizer.ggml.model"] == "llama"
    tokens = fields["tokenizer.ggml.tokens"]
    assert isinstance(tokens, list)
    assert len(tokens) == 32000
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert len(reader.tensors) == 3 + 2 * 9
    embeddings = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert [int(n) for n in embeddings.shape] == [64, 32000]  # GGUF order: ne[0] first
    assert 16_000_000 < tiny_model.stat().st_size < 18_000_000

    # Seeded: the same seed makes the same bytes, another seed others.
    again = write_tiny_llama(llama_build.vocabulary("llama-spm"), tmp_path / "again.gguf")
    assert _digest(again) == _digest(tiny_model)
    other = write_tiny_llama(
        llama_build.vocabulary("llama-spm"), tmp_path / "other.gguf", TinyLlama(seed=15)
    )
    assert _digest(other) != _digest(tiny_model)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        return json.loads(response.read())  # type: ignore[no-any-return]


@contextmanager
def _serving(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)


def _wait_ready(base: str, process: subprocess.Popen[bytes], log: Path) -> float:
    started = time.monotonic()
    while time.monotonic() - started < 60:
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            status, body = _get(f"{base}/health")
        except OSError:
            status, body = 0, None
        if status == 200:
            assert body == {"status": "ok"}
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"not ready in 60 s: {log.read_text(errors='replace')[-3000:]}")


def test_ctls_llama_cpp_command_lines_start_the_real_server_which_chats_and_embeds(
    tiny_model: Path, llama_build: LlamaServer, tmp_path: Path
) -> None:
    catalog = parse_catalog(CATALOG.format(model=tiny_model), "catalog.yaml")
    for name, path in (("tiny", "/v1/chat/completions"), ("tiny-embed", "/v1/embeddings")):
        (profile,) = catalog.models[name].profiles
        port = _free_port()
        place = Rank(rank=0, nodes=1, port=port, master_address="127.0.0.1", listen="127.0.0.1")
        argv = command_line(profile, place, (str(llama_build.binary),))
        log = tmp_path / f"{name}.log"
        base = f"http://127.0.0.1:{port}"
        with _serving(argv, log) as process:
            seconds = _wait_ready(base, process, log)
            print(f"{name}: ready {seconds:.2f} s after the start: {argv[1:]}")
            assert seconds < 30
            status, models = _get(f"{base}/v1/models")
            assert status == 200
            assert isinstance(models, dict)
            assert [card["id"] for card in models["data"]] == [name]  # --alias
            if name == "tiny":
                answer = _post(
                    base + path,
                    {"model": name, "max_tokens": 8,
                     "messages": [{"role": "user", "content": "hello"}]},
                )  # fmt: skip
                choices = answer["choices"]
                assert isinstance(choices, list)
                assert isinstance(choices[0]["message"]["content"], str)
                usage = answer["usage"]
                assert isinstance(usage, dict)
                assert 1 <= usage["completion_tokens"] <= 8
            else:
                answer = _post(base + path, {"model": name, "input": "hello there"})
                data = answer["data"]
                assert isinstance(data, list)
                assert len(data[0]["embedding"]) == 64
            process.terminate()
            # llama-server stops at once on SIGTERM: no drain (issue 14).
            assert process.wait(timeout=20) == 0


def test_every_option_ctl_writes_for_llama_cpp_is_in_the_real_servers_help(
    llama_build: LlamaServer,
) -> None:
    """The options of cli/shards/engines.py's `_llama_cpp`, and the embedding flags
    cli/routes/table.py looks for, against the built binary's `--help`."""
    words = set(llama_build.help_text.read_text().replace(",", " ").split())
    written = [
        "-m", "-hf", "--model-url", "--host", "--port", "--alias", "--threads", "--ctx-size",
        "--n-gpu-layers", "--embedding", "--embeddings", "--pooling",
    ]  # fmt: skip
    assert [option for option in written if option not in words] == []
    assert "--no-such-option" not in words

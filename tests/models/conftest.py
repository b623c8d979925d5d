"""The real llama-server build and the tiny model, for the tests under tests/models."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models.llama_server import LlamaServer, installed_llama_server
from tests.models.tiny_gguf import write_tiny_llama


@pytest.fixture(scope="session")
def llama_build() -> LlamaServer:
    """The build from scripts/build_llama_server; skips (fails under CI) without it."""
    try:
        return installed_llama_server()
    except RuntimeError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def tiny_model(llama_build: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight llama, made once per session."""
    directory = tmp_path_factory.mktemp("tiny-model")
    return write_tiny_llama(llama_build.vocabulary("llama-spm"), directory / "tiny-llama.gguf")

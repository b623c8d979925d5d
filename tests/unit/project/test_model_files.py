"""The test fleet's nodes hold a file at every `file://` path its catalogs name: the
stand-in llama-server, like the real one, exits when its model file cannot be opened, and
a fleet test naming a path the nodes lack would fail far from its cause."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.ctl import ROOT
from tests.fakes.standin_install import INSTALL_MODEL_FILES, MODEL_FILES

FILE_SOURCE = re.compile(r"file://(/[A-Za-z0-9._/-]+)")


def test_every_file_source_the_fleet_catalogs_and_tests_name_is_installed() -> None:
    sources = [*ROOT.glob("examples/testfleet/*.yaml"), *ROOT.glob("tests/integration/*.py")]
    named = {path for source in sources for path in FILE_SOURCE.findall(source.read_text())}
    assert "/srv/models/qwen2.5-0.5b-instruct-q8_0.gguf" in named  # the scan finds them
    real_model = "/srv/models/tiny-llama.gguf"  # test_fleet_llama_server installs its own
    assert named - {real_model} <= set(MODEL_FILES), sorted(named - set(MODEL_FILES))


def test_the_install_script_puts_a_placeholder_where_there_is_no_file(tmp_path: Path) -> None:
    script = INSTALL_MODEL_FILES.replace("/srv/", f"{tmp_path}/srv/")
    kept = tmp_path / "srv" / "models" / "tiny.gguf"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"a real model")
    subprocess.run(["sh", "-ec", script], check=True, timeout=30)
    for path in MODEL_FILES:
        placed = tmp_path / path.lstrip("/")
        assert placed.read_bytes() == (b"a real model" if placed == kept else b"GGUF"), path

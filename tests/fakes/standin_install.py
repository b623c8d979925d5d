"""What a test-fleet node needs beside the stand-in engine: the real parsers' options, and
the model files the fleet's catalogs name.

The stand-in (tests/fakes/engine.py) refuses an option the pinned engine release does not
have, from the data of scripts/engine_flags.py (cli/engines/engine_flags/*.json); on a node
it reads them from FLAG_DIR. `INSTALL_ENGINES` is the command that puts the stand-in
(on its standard input) where ctl's command lines look for each engine, with its config
and the model files; `INSTALL_FLAG_DATA` the one to run with `flag_data_tar()` on its
standard input.

Its llama-server exits as the real one does when its `-m` file cannot be opened, and a
`file://` source is read where it is (nothing stages it), so every such path the test
fleet's catalogs name is on every node: `INSTALL_MODEL_FILES` puts a placeholder GGUF (the
magic only: the stand-in reads no weights) at each one that has no file yet, leaving a
real model a test installed there alone.
"""

from __future__ import annotations

import io
import shlex
import tarfile
from pathlib import Path
from typing import Final

FLAG_DATA: Final = Path(__file__).resolve().parents[2] / "cli" / "engines" / "engine_flags"
FLAG_DIR: Final = "/etc/modelfleet-fake/engine_flags"  # tests/fakes/engine.py FLAGS_DIRS
INSTALL_FLAG_DATA: Final = f"rm -rf {FLAG_DIR} && mkdir -p {FLAG_DIR} && tar -x -C {FLAG_DIR}"


def flag_data_tar() -> bytes:
    """The data files as a tar archive, for `tar -x` on a node."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(FLAG_DATA.glob("*.json")):
            tar.add(path, arcname=path.name)
    return buffer.getvalue()


# Every `file://` model path a test-fleet catalog names: examples/testfleet/*.yaml and the
# fleet tests' own catalogs (tests/unit/project/test_model_files.py holds the list to them).
MODEL_FILES: Final = (
    "/srv/chat.gguf",
    "/srv/models/chat.gguf",
    "/srv/models/noexec.gguf",
    "/srv/models/qwen2.5-0.5b-instruct-q4.gguf",
    "/srv/models/qwen2.5-0.5b-instruct-q8_0.gguf",
    "/srv/models/sitebound.gguf",
    "/srv/models/solo.gguf",
    "/srv/models/tiny.gguf",
)
INSTALL_MODEL_FILES: Final = " ".join(
    f"mkdir -p {shlex.quote(str(Path(path).parent))};"
    f" [ -e {shlex.quote(path)} ] || printf GGUF > {shlex.quote(path)};"
    for path in MODEL_FILES
)

STANDIN_CONFIG: Final = '{"load_seconds": 0.5}'
SGLANG: Final = "/usr/local/lib/python3.11/dist-packages/sglang"
INSTALL_ENGINES: Final = (
    f"set -e; install -d {SGLANG} /etc/modelfleet-fake;"
    " cat > /usr/local/bin/vllm; chmod 755 /usr/local/bin/vllm;"
    " cp /usr/local/bin/vllm /usr/local/bin/llama-server;"
    f" cp /usr/local/bin/vllm {SGLANG}/launch_server.py; : > {SGLANG}/__init__.py;"
    f" echo '{STANDIN_CONFIG}' > /etc/modelfleet-fake/standin.json; {INSTALL_MODEL_FILES}"
)

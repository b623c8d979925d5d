"""What a test-fleet node needs beside the stand-in engine: the real parsers' options.

The stand-in (tests/fakes/engine.py) refuses an option the pinned engine release does not
have, from the data of scripts/engine_flags.py (cli/engines/engine_flags/*.json); on a node
it reads them from FLAG_DIR. `install_flag_data` is the command to run there with
`flag_data_tar()` on its standard input.
"""

from __future__ import annotations

import io
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

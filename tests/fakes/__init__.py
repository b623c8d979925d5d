"""Fakes of node-side tools for the local test fleet, and the fleet's script as a module.

`nvidia_smi` is the fake installed into the fleet's GPU nodes. `scripts/` is not a package,
so the fleet's script is put on sys.path here and re-exported: `from tests.fakes import
testfleet` gives the tests the same functions `scripts/testfleet` runs.
"""

import sys
from pathlib import Path

_SCRIPTS = str(Path(__file__).resolve().parents[2] / "scripts")
if _SCRIPTS not in sys.path:
    sys.path.append(_SCRIPTS)

import testfleet  # noqa: E402

__all__ = ["testfleet"]

"""A LiteLLM for the tests, in a virtualenv of its own: the version ctl renders for.

Not in the project's environment: `litellm[proxy]` pins rich below 14 and cryptography
49-50, which this project's environment does not have; a router runs it apart anyway.
scripts/test installs it before the tests run (`python -m tests.integration.litellm_env`):
from PyPI, about 760 MB, 1 to 2 minutes, into
${MODELFLEET_LITELLM_VENV:-/var/tmp/modelfleet-litellm/VERSION}, once; later runs and other
clones reuse it. The tests only look for it: a download of that size inside a test's time
would make the test's outcome the network's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cli.routes.deploy import litellm_constraints_file
from cli.routes.litellm import LITELLM_VERSION

VENV_ENV = "MODELFLEET_LITELLM_VENV"
# Written last: a venv without it is a half-made one, removed and made again.
COMPLETE = "modelfleet-complete"
# Keeps LiteLLM from fetching its model price list from GitHub at import (no network here).
ENVIRONMENT = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "WARNING"}
# What deploy_router.yml installs into a router's virtualenv: the keys hook the routes name
# (general_settings.custom_auth) and the CRL check.
ROUTER_FILES = Path(__file__).resolve().parents[2] / "playbooks" / "files"


def venv_dir() -> Path:
    default = Path("/var/tmp/modelfleet-litellm") / LITELLM_VERSION
    return Path(os.environ.get(VENV_ENV, str(default)))


def litellm_venv() -> Path:
    """The installed virtualenv; raises RuntimeError saying how to install it."""
    venv = venv_dir()
    if not (venv / COMPLETE).exists():
        raise RuntimeError(
            f"LiteLLM {LITELLM_VERSION} for the tests is not installed in {venv}:"
            " scripts/test installs it, or `python -m tests.integration.litellm_env`"
        )
    return venv


def install_litellm_venv() -> Path:
    """The virtualenv, installed if it is not yet; raises RuntimeError saying why not."""
    venv = venv_dir()
    marker = venv / COMPLETE
    if marker.exists():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"{venv.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            # What the routers install: the tested versions of everything (deploy_router.yml).
            [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
             "-c", str(litellm_constraints_file()), f"litellm[proxy]=={LITELLM_VERSION}"],
        ]  # fmt: skip
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=1200, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"installing LiteLLM {LITELLM_VERSION} for the tests failed"
                    f" ({' '.join(step[:4])}...): {done.stderr.strip()[-2000:]}"
                )
        marker.touch()
    return venv


def litellm_environment(**extra: str) -> dict[str, str]:
    return {**os.environ, **ENVIRONMENT, "PYTHONPATH": str(ROUTER_FILES), **extra}


if __name__ == "__main__":
    try:
        print(f"LiteLLM {LITELLM_VERSION} for the tests: {install_litellm_venv()}")
    except RuntimeError as error:
        sys.exit(str(error))

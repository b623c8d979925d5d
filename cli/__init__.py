"""modelfleet: `ctl` places, runs and grows a self-hosted fleet of LLM model servers."""

import sys

__version__ = "0.1.0"

# paramiko's config module imports invoke, when installed (paramiko requires it), for
# ssh_config's `Match exec` alone, which ctl never reads: 90 ms of every start, a fifth of
# `ctl facts`'s time before it reaches a node (docs/scale.md). Refused here, before any of
# ctl imports paramiko; a program that imported invoke first keeps it.
sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]

"""modelfleet: `ctl` places, runs and grows a self-hosted fleet of LLM model servers."""

__version__ = "0.1.0"

"""Where a node keeps its TLS files (cli/pki/node.py writes them, engines and checks read
them). Pure: the shard files and the routes name these paths without touching a node."""

from __future__ import annotations

from typing import Final

PKI_DIR: Final = "/etc/modelfleet/pki"
KEY_FILE: Final = "node.key"
CERT_FILE: Final = "node.pem"
CA_FILE: Final = "ca.pem"

NODE_KEY_PATH: Final = f"{PKI_DIR}/{KEY_FILE}"
NODE_CERT_PATH: Final = f"{PKI_DIR}/{CERT_FILE}"
# The fleet CA's certificate as onboarding installed it on every node: what the health
# checks on a node and a router on a node verify the engines' certificates against.
CA_PATH: Final = f"{PKI_DIR}/{CA_FILE}"

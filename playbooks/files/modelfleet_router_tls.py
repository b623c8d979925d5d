"""Installed by modelfleet's deploy_router.yml into the router's virtualenv, and imported at
interpreter start by a .pth file beside it: the fleet's certificate revocation list,
checked when the router talks to an engine over TLS.

LiteLLM makes the SSL context it reaches engines with by
`ssl.create_default_context(cafile=SSL_VERIFY)` (litellm/llms/custom_httpx/
http_handler.py, _create_ssl_context, in 1.108.7) and never asks OpenSSL to check a CRL,
so a revoked node certificate would still be believed. The CA file ctl points it at, the
router's trust bundle, carries the fleet CA's certificate and, once a certificate has been
revoked, the CA's CRL; for that file only, this turns on OpenSSL's CRL check of the
engine's own certificate (VERIFY_CRL_CHECK_LEAF). Every other context is left as made.
"""

from __future__ import annotations

import ssl
from typing import Any

TRUST_BUNDLE = "/etc/modelfleet/router/trust.pem"
CRL_MARKER = "-----BEGIN X509 CRL-----"

_create_default_context = ssl.create_default_context


def _holds_a_crl(path: str) -> bool:
    try:
        with open(path, encoding="ascii", errors="replace") as bundle:  # noqa: PTH123
            return CRL_MARKER in bundle.read()
    except OSError:
        return False


def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
    context = _create_default_context(*args, **kwargs)
    if kwargs.get("cafile") == TRUST_BUNDLE and _holds_a_crl(TRUST_BUNDLE):
        # Without a CRL in the store, OpenSSL would refuse every certificate ("unable to
        # get certificate CRL"): only once there is one.
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    return context


def install() -> None:
    ssl.create_default_context = create_default_context

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

Only for a CRL that the bundle's own CA signed and that is current: OpenSSL would refuse
every certificate against a CRL of another CA (a list left from a CA made again) or one
past its nextUpdate, and a router refusing every engine is worse than one that cannot
check revocations. Such a bundle is said on stderr, once, and served unchecked.
"""

from __future__ import annotations

import re
import ssl
import sys
from datetime import UTC, datetime
from typing import Any

TRUST_BUNDLE = "/etc/modelfleet/router/trust.pem"
PEM_BLOCK = re.compile(
    rb"-----BEGIN (CERTIFICATE|X509 CRL)-----\r?\n.+?-----END \1-----", re.DOTALL
)

_create_default_context = ssl.create_default_context
_said: set[str] = set()


def _say_once(text: str) -> None:
    if text not in _said:
        _said.add(text)
        sys.stderr.write(f"modelfleet_router_tls: {text}\n")


def crl_to_check(path: str) -> bool:
    """Whether the bundle at `path` holds a current CRL its own CA certificate signed."""
    try:
        with open(path, "rb") as bundle:  # noqa: PTH123
            data = bundle.read()
    except OSError:
        return False
    blocks = [(m.group(1), m.group(0)) for m in PEM_BLOCK.finditer(data)]
    if not any(kind == b"X509 CRL" for kind, _ in blocks):
        return False
    try:
        # LiteLLM's proxy needs it, so the virtualenv has it; imported only for a CRL.
        from cryptography import x509  # noqa: PLC0415
    except ImportError:
        _say_once(f"{path} holds a CRL, but cryptography is missing to check it: not used")
        return False
    certs = [x509.load_pem_x509_certificate(pem) for kind, pem in blocks if kind == b"CERTIFICATE"]
    now = datetime.now(UTC)
    for kind, pem in blocks:
        if kind != b"X509 CRL":
            continue
        crl = x509.load_pem_x509_crl(pem)
        for cert in certs:
            if crl.issuer == cert.subject and crl.is_signature_valid(cert.public_key()):  # type: ignore[arg-type]
                if crl.next_update_utc is not None and crl.next_update_utc <= now:
                    _say_once(f"{path}: the CA's CRL is past its nextUpdate: not used")
                    return False
                return True
    _say_once(f"{path}: its CRL is not its CA's (a CA made again?): revocations not checked")
    return False


def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
    context = _create_default_context(*args, **kwargs)
    if kwargs.get("cafile") == TRUST_BUNDLE and crl_to_check(TRUST_BUNDLE):
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    return context


def install() -> None:
    ssl.create_default_context = create_default_context

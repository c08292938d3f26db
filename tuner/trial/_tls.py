"""One TLS context for every HTTP client of a trial."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx builds a context per client, loading the CA bundle each time (tens of ms of CPU), though a trial's
    server speaks plain HTTP on 127.0.0.1; readiness makes a client per poll, several a second."""
    return ssl.create_default_context()

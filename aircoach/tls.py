"""One TLS context for every outgoing HTTPS client of the process (model, Auth0, HTTP tools).

Building a context loads the CA bundle: tens of milliseconds of blocking file I/O, which a
client made per request with the default `verify=True` would repeat on the event loop every
time. A context holds no connection and no event loop, so one is shared; the clients that use
it stay per request.
"""

from __future__ import annotations

import functools
import ssl

import anyio
import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The shared context (honours SSL_CERT_FILE / SSL_CERT_DIR like httpx's default)."""
    return httpx.create_ssl_context()


async def shared_tls_context() -> ssl.SSLContext:
    """The shared context, built in a worker thread the first time so the loop never waits."""
    if tls_context.cache_info().currsize:
        return tls_context()
    return await anyio.to_thread.run_sync(tls_context)

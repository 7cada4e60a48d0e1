"""The callback of a queued run: when a run from the queue (SQS) ends, `{run_id, status,
output}` is POSTed to the deployment's callback URL (`TASK_CALLBACK_URL`; never a URL from the
docs or the input), signed like the docs webhook: `X-Aircoach-Timestamp: <unix seconds>` and
`X-Aircoach-Signature: sha256=<hex HMAC-SHA256 of "{timestamp}.{body}">` keyed with
`TASK_CALLBACK_SECRET`.

HTTPS only, to a host of `TASK_CALLBACK_HOSTS`, no redirects followed, every address the host
resolves to public (no private, loopback, link-local or reserved address, unless
`TASK_CALLBACK_ALLOW_PRIVATE`, for tests and private networks), within
`TASK_CALLBACK_TIMEOUT_S` for the whole call. The host is resolved once: the connection goes
to an address that was checked (the host's name in `Host` and in TLS's SNI, so its
certificate is verified as usual), so a DNS answer that changes between the check and the
connection (DNS rebinding) cannot point the callback inside the network. A callback that fails is reported, never raised:
the worker then fails the message, SQS redelivers it, the redelivery returns the stored run
and the callback is sent again.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from aircoach.tls import shared_tls_context

log = logging.getLogger(__name__)

TIMESTAMP_HEADER = "X-Aircoach-Timestamp"
SIGNATURE_HEADER = "X-Aircoach-Signature"


class CallbackRefused(ValueError):
    """The callback's URL or address is not one it may be sent to."""


async def resolve(host: str, port: int) -> list[str]:
    """The addresses of `host`, in the system resolver's order."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in infos))


@dataclass(frozen=True)
class CallbackTarget:
    url: str
    secret: str
    hosts: tuple[str, ...]
    timeout_s: float
    allow_private: bool = False
    resolver: Callable[[str, int], Awaitable[list[str]]] = resolve


def callback_host(url: str, hosts: tuple[str, ...] | list[str]) -> tuple[str, int]:
    """(host, port) of an allowed `url`; `CallbackRefused` otherwise."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise CallbackRefused("the callback URL must be https://<host>/...")
    if parts.username or parts.password:
        raise CallbackRefused("the callback URL must not hold credentials")
    host = parts.hostname.lower()
    if host not in {h.lower() for h in hosts}:
        raise CallbackRefused(f"callback host {host!r} is not in TASK_CALLBACK_HOSTS")
    return host, parts.port or 443


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


async def _checked_addresses(target: CallbackTarget, host: str, port: int) -> list[str]:
    """The host's addresses, each one public (unless `allow_private`)."""
    addresses = await target.resolver(host, port)
    if not addresses:
        raise CallbackRefused(f"callback host {host!r} has no address")
    for written in addresses:
        address = ipaddress.ip_address(written)
        if not target.allow_private and (not address.is_global or address.is_multicast):
            raise CallbackRefused(f"callback host {host!r} resolves to a non-public address")
    return addresses


def _at(url: str, address: str, port: int) -> str:
    """`url` with its host replaced by `address` (the connection's; `Host` keeps the name)."""
    parts = urlsplit(url)
    literal = f"[{address}]" if ":" in address else address
    return parts._replace(netloc=f"{literal}:{port}").geturl()


async def send_callback(target: CallbackTarget, payload: dict[str, Any]) -> bool:
    """POST the signed payload; whether the receiver answered 2xx in time."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: sign(target.secret, timestamp, body),
    }
    try:
        host, port = callback_host(target.url, target.hosts)
        netloc = urlsplit(target.url).netloc
        with anyio.fail_after(target.timeout_s):
            addresses = await _checked_addresses(target, host, port)
            async with httpx.AsyncClient(
                verify=await shared_tls_context(),
                follow_redirects=False,
                timeout=target.timeout_s,
                trust_env=False,
            ) as client:
                for n, address in enumerate(addresses, start=1):
                    try:
                        response = await client.post(
                            _at(target.url, address, port),
                            content=body,
                            headers={**headers, "Host": netloc},
                            extensions={"sni_hostname": host},
                        )
                        break
                    except httpx.ConnectError:
                        if n == len(addresses):
                            raise  # no checked address took the connection
    except (CallbackRefused, TimeoutError, OSError, httpx.HTTPError) as exc:
        log.warning(
            "task callback for run %s failed: %s", payload.get("run_id"), type(exc).__name__
        )
        return False
    if not 200 <= response.status_code < 300:
        log.warning(
            "task callback for run %s: the receiver answered %d",
            payload.get("run_id"),
            response.status_code,
        )
        return False
    return True

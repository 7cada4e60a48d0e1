"""The callback of a queued run: when a run from the queue (SQS) ends, `{run_id, status,
output}` is POSTed to the deployment's callback URL (`TASK_CALLBACK_URL`; never a URL from the
docs or the input), signed like the docs webhook: `X-Aircoach-Timestamp: <unix seconds>` and
`X-Aircoach-Signature: sha256=<hex HMAC-SHA256 of "{timestamp}.{body}">` keyed with
`TASK_CALLBACK_SECRET`.

HTTPS only, to a host of `TASK_CALLBACK_HOSTS`, no redirects followed, every address the host
resolves to public (no private, loopback, link-local or reserved address, unless
`TASK_CALLBACK_ALLOW_PRIVATE`, for tests and private networks), within
`TASK_CALLBACK_TIMEOUT_S` for the whole call. A callback that fails is reported, never raised:
the worker then fails the message, SQS redelivers it, the redelivery returns the stored run
and the callback is sent again.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import time
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


@dataclass(frozen=True)
class CallbackTarget:
    url: str
    secret: str
    hosts: tuple[str, ...]
    timeout_s: float
    allow_private: bool = False


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


async def _check_addresses(host: str, port: int, allow_private: bool) -> None:
    if allow_private:
        return
    infos = await anyio.getaddrinfo(host, port, type=0)
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global or address.is_multicast:
            raise CallbackRefused(f"callback host {host!r} resolves to a non-public address")


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
        with anyio.fail_after(target.timeout_s):
            await _check_addresses(host, port, target.allow_private)
            async with httpx.AsyncClient(
                verify=await shared_tls_context(),
                follow_redirects=False,
                timeout=target.timeout_s,
                trust_env=False,
            ) as client:
                response = await client.post(target.url, content=body, headers=headers)
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

"""Signed webhook calls (`POST /api/update_docs`): HMAC-SHA256 of `"{timestamp}.{body}"`.

The caller sends `X-Aircoach-Timestamp: <unix seconds>` and
`X-Aircoach-Signature: sha256=<hex>`. The timestamp is signed too, so a captured request can
be replayed only within the allowed clock skew.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

from aircoach.errors import SignatureError

TIMESTAMP_HEADER = "X-Aircoach-Timestamp"
SIGNATURE_HEADER = "X-Aircoach-Signature"
_SCHEME = "sha256="
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}")


def signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return _SCHEME + mac.hexdigest()


def signed_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers a caller sends (used by tests and documented in the README)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: signature(secret, ts, body)}


def verify(
    secret: str | None,
    timestamp: str | None,
    sent: str | None,
    body: bytes,
    *,
    max_skew_s: float,
    now: float | None = None,
) -> None:
    """Raise `SignatureError` unless `sent` signs `timestamp.body` with `secret` and the
    timestamp is within `max_skew_s` of now (either way: clocks drift both ways)."""
    if not secret:
        raise SignatureError("webhook_not_configured")
    if not timestamp or not sent:
        raise SignatureError(
            "webhook_headers_required", timestamp=TIMESTAMP_HEADER, signature=SIGNATURE_HEADER
        )
    # Unix seconds have 10 digits until 2286: a longer value is not a time, and a huge one
    # could not even be compared with the clock (int to float overflows).
    if not _UNIX_SECONDS.fullmatch(timestamp.strip()):
        raise SignatureError("webhook_timestamp_not_unix", header=TIMESTAMP_HEADER)
    ts = int(timestamp)
    now = time.time() if now is None else now
    if abs(now - ts) > max_skew_s:
        raise SignatureError(
            "webhook_timestamp_skew", header=TIMESTAMP_HEADER, max_skew_s=max_skew_s
        )
    expected = signature(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode(), sent.strip().encode()):
        # named, as the timestamp's refusals are ("manca, è scaduta o non corrisponde" said
        # neither which header nor that nothing had expired)
        raise SignatureError("webhook_signature_mismatch", header=SIGNATURE_HEADER)

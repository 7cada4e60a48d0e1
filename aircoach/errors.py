"""The error family. Only the HTTP layer turns these into status codes and messages.

A request-level error carries a stable `code` and a message from the catalogue
(`aircoach.messages`): a key and its parameters, rendered in the request's language when the
answer is written (Italian by default, English with `Accept-Language: en`). `message` is the
English text, for logs and for what has no request (a batch item).
"""

from __future__ import annotations

from typing import Any

from aircoach import messages
from aircoach.messages import Language


class ConfigError(Exception):
    """Bad configuration or usage: raised at start-up, names the setting at fault."""


class AppError(Exception):
    """A request-level failure with a stable code, an HTTP status and a user-safe message:
    `key` names its text in `aircoach.messages.CATALOGUE` (default: the class's), `params`
    fill it in."""

    code = "internal_error"
    status = 500
    key = "internal_error"

    def __init__(
        self,
        key: str | None = None,
        /,
        *,
        headers: dict[str, str] | None = None,
        fields: dict[str, Any] | None = None,
        **params: Any,
    ):
        self.key = key or type(self).key
        self.params = params
        self.headers = headers or {}
        # Beside `error` and `message` in the answer's body (e.g. the running turn's id).
        self.fields = fields or {}
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """The English message (logs; callers without a request)."""
        return self.message_in("en")

    def message_in(self, language: Language) -> str:
        return messages.text(self.key, language, **self.params)


class AuthError(AppError):
    code = "invalid_token"
    status = 401
    key = "invalid_token"

    def __init__(self, key: str | None = None, /, **params: Any):
        super().__init__(key, **params)
        # The reason may quote a token's header (its `kid`): bounded, and printable ASCII in
        # the header (a non-Latin-1 character there was a 500). The header stays English.
        self.headers = {
            "WWW-Authenticate": 'Bearer error="invalid_token", '
            f'error_description="{_header_text(cut(self.message, 200))}"'
        }

    def message_in(self, language: Language) -> str:
        return cut(super().message_in(language), 200)


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit - 1` characters and "…" (a message or a log line kept
    short)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _header_text(text: str) -> str:
    """`text` inside a quoted-string header value: printable ASCII, no `"` or backslash."""
    text = text.replace('"', "'")
    return "".join(c if " " <= c <= "~" and c != "\\" else "?" for c in text)


class MissingTokenError(AppError):
    code = "missing_token"
    status = 401
    key = "missing_token"

    def __init__(self) -> None:
        super().__init__(headers={"WWW-Authenticate": "Bearer"})


class SignatureError(AppError):
    code = "invalid_signature"
    status = 401
    key = "invalid_signature"


class ForbiddenError(AppError):
    code = "forbidden"
    status = 403
    key = "forbidden"


class BodyTooLarge(AppError):
    """A request body over its route's limit (`MAX_BODY_BYTES`, or the route's own)."""

    code = "body_too_large"
    status = 413
    key = "body_too_large"

    def __init__(self, limit: int, key: str | None = None):
        super().__init__(key, limit=limit)
        self.limit = limit


class UnsupportedMediaType(AppError):
    """A request body not declared JSON (`Content-Type` missing, `text/plain`, a form) on a
    route that takes JSON."""

    code = "unsupported_media_type"
    status = 415
    key = "unsupported_media_type"


class InvalidDocs(AppError):
    """A forced docs reload found docs that must not be served; the last good ones stay."""

    code = "invalid_docs"
    status = 422
    key = "invalid_docs"


class NotFound(AppError):
    code = "not_found"
    status = 404
    key = "not_found"


class Conflict(AppError):
    code = "conflict"
    status = 409
    key = "conflict"


class TurnInProgress(AppError):
    """A new message while a turn of the same thread runs: the body names the running turn
    (`turn_id`), so the client can rejoin it."""

    code = "turn_in_progress"
    status = 409
    key = "turn_in_progress"


class TurnFinished(AppError):
    """A cancel of a turn that has ended already."""

    code = "turn_finished"
    status = 409
    key = "turn_finished"


class TurnIncomplete(AppError):
    """Not raised: the `error` of a replayed turn that did not end `ok`."""

    code = "turn_incomplete"
    status = 200
    key = "turn_incomplete"


class QuotaExceeded(AppError):
    """The user's turn budget (`QUOTA_TURNS_PER_*`) is spent; `Retry-After` says when the
    window ends."""

    code = "quota_exceeded"
    status = 429
    key = "quota_per_minute"


class PersistFailed(AppError):
    """The turn was answered but the store refused it (it went to the dead-letter spool): an
    `error` event of the stream, never an HTTP status."""

    code = "persist_failed"
    key = "persist_failed"


class BackendUnavailable(AppError):
    """A backend (store, prompt source, identity provider, model) failed."""

    status = 503
    retry_after_s = 5  # a client told when to retry does not hammer a backend that is down

    def __init__(
        self, key: str | None = None, /, *, headers: dict[str, str] | None = None, **params: Any
    ):
        super().__init__(key, headers=headers, **params)
        self.headers.setdefault("Retry-After", str(self.retry_after_s))


class StoreUnavailable(BackendUnavailable):
    code = "store_unavailable"
    key = "store_unavailable"


class PromptUnavailable(BackendUnavailable):
    code = "prompt_unavailable"
    key = "prompt_unavailable"


class AuthUnavailable(BackendUnavailable):
    code = "auth_unavailable"
    key = "auth_unavailable"


class ModelUnavailable(BackendUnavailable):
    code = "model_unavailable"
    key = "model_unavailable"


class TurnTimeout(ModelUnavailable):
    """The turn's agent run hit `TURN_TIMEOUT_S` (a model that trickles bytes never times out
    per read)."""

    key = "turn_timeout"

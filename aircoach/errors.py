"""The error family. Only the HTTP layer turns these into status codes and messages."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad configuration or usage: raised at start-up, names the setting at fault."""


class AppError(Exception):
    """A request-level failure with a stable code, an HTTP status and a user-safe message."""

    code = "internal_error"
    status = 500
    message = "Something went wrong on our side."

    def __init__(self, message: str | None = None, *, headers: dict[str, str] | None = None):
        super().__init__(message or self.message)
        self.message = message or self.message
        self.headers = headers or {}


class AuthError(AppError):
    code = "invalid_token"
    status = 401
    message = "Missing or invalid bearer token."

    def __init__(self, message: str | None = None):
        # A reason may quote a token's header (its `kid`): bounded, and printable ASCII in the
        # header (a non-Latin-1 character there was a 500).
        message = _cut(message or self.message, 200)
        super().__init__(
            message,
            headers={
                "WWW-Authenticate": 'Bearer error="invalid_token", '
                f'error_description="{_header_text(message)}"'
            },
        )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _header_text(text: str) -> str:
    """`text` inside a quoted-string header value: printable ASCII, no `"` or backslash."""
    text = text.replace('"', "'")
    return "".join(c if " " <= c <= "~" and c != "\\" else "?" for c in text)


class MissingTokenError(AppError):
    code = "missing_token"
    status = 401
    message = "An Authorization: Bearer token is required."

    def __init__(self, message: str | None = None):
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class SignatureError(AppError):
    code = "invalid_signature"
    status = 401
    message = "The webhook signature is missing, stale or does not match."


class ForbiddenError(AppError):
    code = "forbidden"
    status = 403
    message = "This token lacks the permission this operation needs."


class BodyTooLarge(AppError):
    """A request body over its route's limit (`MAX_BODY_BYTES`, or the route's own)."""

    code = "body_too_large"
    status = 413
    message = "The request body is too large."

    def __init__(self, limit: int):
        super().__init__(f"The request body is larger than {limit} bytes.")
        self.limit = limit


class InvalidDocs(AppError):
    """A forced docs reload found docs that must not be served; the last good ones stay."""

    code = "invalid_docs"
    status = 422
    message = "The prompt docs are invalid; the previous version keeps serving."


class NotFound(AppError):
    code = "not_found"
    status = 404
    message = "Not found."


class Conflict(AppError):
    code = "conflict"
    status = 409
    message = "The resource is not in a state that allows this operation."


class BackendUnavailable(AppError):
    """A backend (store, prompt source, identity provider, model) failed."""

    status = 503


class StoreUnavailable(BackendUnavailable):
    code = "store_unavailable"
    message = "Chat history is unavailable right now; please retry shortly."


class PromptUnavailable(BackendUnavailable):
    code = "prompt_unavailable"
    message = "The coach's instructions could not be loaded; please retry shortly."


class AuthUnavailable(BackendUnavailable):
    code = "auth_unavailable"
    message = "Token verification is unavailable right now; please retry shortly."


class ModelUnavailable(BackendUnavailable):
    code = "model_unavailable"
    message = "The language model is unavailable right now; please retry in a moment."


class TurnTimeout(ModelUnavailable):
    """The turn's agent run hit `TURN_TIMEOUT_S` (a model that trickles bytes never times out
    per read)."""

    message = "The language model took too long to answer; please retry in a moment."

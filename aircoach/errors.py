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
        reason = (message or self.message).replace('"', "'")
        super().__init__(
            message,
            headers={
                "WWW-Authenticate": f'Bearer error="invalid_token", error_description="{reason}"'
            },
        )


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


class NotFoundError(AppError):
    code = "not_found"
    status = 404
    message = "Not found."


class InvalidDocs(AppError):
    """A forced docs reload found docs that must not be served; the last good ones stay."""

    code = "invalid_docs"
    status = 422
    message = "The prompt docs are invalid; the previous version keeps serving."


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

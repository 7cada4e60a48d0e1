"""FastAPI dependencies, as `Annotated` aliases in one place."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import Response

from aircoach.auth import webhook
from aircoach.auth.tokens import Principal
from aircoach.bodies import CheckedJsonRoute, parse_json_body
from aircoach.errors import ForbiddenError, MissingTokenError
from aircoach.logs import current_stages
from aircoach.messages import Language, header_language
from aircoach.models import MessageRequest
from aircoach.services import Services
from aircoach.settings import Settings
from aircoach.turn.ports import ChatStore

_bearer = HTTPBearer(auto_error=False, description="An Auth0 (or local dev issuer) access token.")
BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


# The dependencies that do no I/O are `async def`: FastAPI runs a plain `def` dependency in a
# worker thread, one thread hand-off per request for a dictionary lookup.


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_settings_dep(services: ServicesDep) -> Settings:
    return services.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


async def get_chat_store(services: ServicesDep) -> ChatStore:
    return services.chats


ChatStoreDep = Annotated[ChatStore, Depends(get_chat_store)]


async def _verified(
    services: Services, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise MissingTokenError()
    with current_stages().timed("auth"):
        return await services.verifier.verify(credentials.credentials)


async def current_user(
    request: Request, services: ServicesDep, credentials: BearerCredentials
) -> Principal:
    """The caller, from the bearer token (verified once a request: `UserJsonRoute` may have
    done it before the body was read)."""
    known = getattr(request.state, _PRINCIPAL, None)
    if isinstance(known, Principal):
        return known
    return await _verified(services, credentials)


CurrentUser = Annotated[Principal, Depends(current_user)]
_PRINCIPAL = "principal"
_PERMISSION_ATTRIBUTE = "needs_permission"
F = TypeVar("F", bound=Callable[..., Any])


def needs_permission(setting: str) -> Callable[[F], F]:
    """Declare that a route with a body needs the permission the setting `setting` names (a
    `Settings` field, e.g. `task_review_permission`): on a `UserJsonRoute` router it is
    checked with the token, before the body is read."""

    def declare(endpoint: F) -> F:
        setattr(endpoint, _PERMISSION_ATTRIBUTE, setting)
        return endpoint

    return declare


class UserJsonRoute(CheckedJsonRoute):
    """The route class of a router whose routes all need a user and whose bodies FastAPI
    parses: the token, and a permission the route declares (`needs_permission`), are checked
    before a byte of the body is read. (FastAPI reads and parses such a body before it
    resolves any dependency: an anonymous caller's body was read and checked, and a malformed
    one got a 422 instead of the 401.)"""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler
        permission_setting: str | None = getattr(self.endpoint, _PERMISSION_ATTRIBUTE, None)

        async def authenticated(request: Request) -> Response:
            services = request.app.state.services
            user = await _verified(services, await _bearer(request))
            if permission_setting is not None:
                permission = getattr(services.settings, permission_setting)
                if permission not in user.permissions:
                    raise ForbiddenError("permission_needed", permission=permission)
            setattr(request.state, _PRINCIPAL, user)
            return await handler(request)

        return authenticated


async def request_language(request: Request) -> Language:
    """The language of the request's messages (`Accept-Language`; Italian by default)."""
    return header_language(request.headers)


RequestLanguage = Annotated[Language, Depends(request_language)]


async def chat_message(request: Request, user: CurrentUser) -> MessageRequest:
    """The chat body, parsed only once the caller's token verified: an anonymous caller
    never gets its body read (`user` is resolved first)."""
    return await parse_json_body(request, MessageRequest)


ChatMessage = Annotated[MessageRequest, Depends(chat_message)]


async def docs_reloader(
    request: Request, services: ServicesDep, credentials: BearerCredentials
) -> str:
    """Who may reload the docs: a call signed with `UPDATE_DOCS_SECRET` (a CI job, an S3
    event) or a user token with the admin permission. Returns who it was, for the log."""
    settings = services.settings
    headers = request.headers
    if webhook.SIGNATURE_HEADER in headers or webhook.TIMESTAMP_HEADER in headers:
        webhook.verify(
            settings.update_docs_secret,
            headers.get(webhook.TIMESTAMP_HEADER),
            headers.get(webhook.SIGNATURE_HEADER),
            await request.body(),
            max_skew_s=settings.update_docs_max_skew_s,
        )
        return "signed webhook"
    user = await _verified(services, credentials)
    if settings.admin_permission not in user.permissions:
        raise ForbiddenError("permission_needed", permission=settings.admin_permission)
    return f"user {user.sub!r}"


DocsReloader = Annotated[str, Depends(docs_reloader)]

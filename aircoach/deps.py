"""FastAPI dependencies, as `Annotated` aliases in one place."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from aircoach import webhook
from aircoach.auth import Principal
from aircoach.errors import ForbiddenError, MissingTokenError
from aircoach.runtime import Runtime
from aircoach.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="An Auth0 (or local dev issuer) access token.")


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_settings_dep(runtime: RuntimeDep) -> Settings:
    return runtime.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


async def current_user(
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise MissingTokenError()
    return await runtime.verifier.verify(credentials.credentials)


CurrentUser = Annotated[Principal, Depends(current_user)]


async def docs_admin(user: CurrentUser, settings: SettingsDep) -> Principal:
    if settings.admin_permission not in user.permissions:
        raise ForbiddenError(f"this operation needs the {settings.admin_permission!r} permission")
    return user


DocsAdmin = Annotated[Principal, Depends(docs_admin)]


async def docs_reloader(
    request: Request,
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """Who may reload the docs: a call signed with `UPDATE_DOCS_SECRET` (a CI job, an S3
    event) or a user token with the admin permission. Returns who it was, for the log."""
    settings = runtime.settings
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
    user = await docs_admin(await current_user(runtime, credentials), settings)
    return f"user {user.sub!r}"


DocsReloader = Annotated[str, Depends(docs_reloader)]

"""POST /api/dev/token: the playground's "dev user" sign-in. Mounted only when the local dev
issuer is active (no AUTH0_DOMAIN) and the playground is on; it answers only a caller on
this machine, from this origin."""

from __future__ import annotations

import functools
import ipaddress
import logging

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from aircoach.auth.tokens import DevIssuer, mint_dev_token
from aircoach.bodies import max_body_bytes, parse_json_body
from aircoach.deps import ServicesDep
from aircoach.errors import ForbiddenError

router = APIRouter(prefix="/api/dev", include_in_schema=False)
log = logging.getLogger(__name__)

TOKEN_TTL_S = 3600
# A proxy in front means the real caller is somewhere else.
_FORWARDED = ("forwarded", "x-forwarded-for", "x-real-ip")
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


class DevSignIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(
        min_length=1,
        max_length=40,
        pattern=r"^[\w][\w .'-]*$",
        description="Who to be: the token's subject is `dev|<name>`.",
    )
    admin: bool = Field(default=False, description="Add the docs admin permission.")


class DevToken(BaseModel):
    access_token: str
    token_type: str = "Bearer"
    expires_in: int
    sub: str
    permissions: list[str]


def _check_caller(request: Request) -> None:
    host = request.client.host if request.client else ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback or any(name in request.headers for name in _FORWARDED):
        raise ForbiddenError("dev_sign_in_local_only")
    # DNS rebinding: a page whose name the attacker points at 127.0.0.1 sends its own name as
    # `Host` and as `Origin`, which then agree. Only a loopback name, on this server's port,
    # is this machine's page.
    if not _loopback_host(request.headers.get("host", ""), request.scope.get("server")):
        raise ForbiddenError("dev_sign_in_local_only")
    # A page of another site open in the developer's browser must not mint tokens here.
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host')}":
        raise ForbiddenError("dev_sign_in_same_origin")


def _loopback_host(host: str, server: tuple[str, int | None] | None) -> bool:
    """`host` (the `Host` header) names this machine by a loopback name, with the port this
    server listens on (none given means 80)."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name, port = name + "]", rest.removeprefix(":")
    else:
        name, _, port = host.partition(":")
    if name.lower() not in _LOOPBACK_NAMES:
        return False
    listening = server[1] if server else None
    return listening is None or (port or "80") == str(listening)


@router.post("/token")
@max_body_bytes(1024)
async def dev_token(request: Request, services: ServicesDep) -> DevToken:
    """A dev issuer token for `dev|<name>` (the caller checked before the body is read)."""
    _check_caller(request)
    body = await parse_json_body(request, DevSignIn)
    settings = services.settings
    sub = f"dev|{body.name.strip()}"
    permissions = [settings.admin_permission] if body.admin else []
    keys = services.verifier.keys
    issuer = keys if isinstance(keys, DevIssuer) else None
    # The key may be read from disk (the first time) and RSA signing is CPU work.
    token = await anyio.to_thread.run_sync(
        functools.partial(
            mint_dev_token,
            settings,
            sub,
            ttl_s=TOKEN_TTL_S,
            permissions=permissions,
            issuer=issuer,
        )
    )
    log.info("dev sign-in: %r (permissions %s)", sub, permissions or "none")
    return DevToken(access_token=token, expires_in=TOKEN_TTL_S, sub=sub, permissions=permissions)

"""The Auth0 tenant: signing keys from its JWKS, and user profiles from its Management API.

Every URL is built from settings (`AUTH0_DOMAIN`, or `AUTH0_BASE_URL` for a test tenant),
never from anything inside a token.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from cachetools import TTLCache
from jwt import PyJWK, PyJWKClient

from aircoach.auth.tokens import shown
from aircoach.errors import AuthError, AuthUnavailable
from aircoach.settings import AuthSettings
from aircoach.tls import shared_tls_context

log = logging.getLogger(__name__)

# With nothing cached every request fails anyway, so retry sooner than the refetch cooldown,
# but still not once per request while the tenant is down.
_EMPTY_RETRY_S = 1.0

# Profile fields asked of the Management API: only what the prompt may use, so identities
# (with their IdP tokens) and other internals never even reach this process.
PROFILE_FIELDS = (
    "user_id",
    "name",
    "given_name",
    "family_name",
    "nickname",
    "locale",
    "user_metadata",
    "app_metadata",
)

# What of a profile is kept (and cached, per user): the metadata keys the prompt may use
# (`USER_DATA_FIELDS`), each string cut and each list shortened. `user_metadata` is the user's
# to edit, with no size limit of ours, and the cache holds up to USER_DATA_CACHE_SIZE profiles.
_KEPT_CHARS = 500  # more than the prompt shows of a value (`aircoach.auth.userdata`)
_KEPT_ITEMS = 10


def kept_profile(profile: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """The part of a profile the prompt may use, every value bounded."""
    wanted = set(fields)
    kept: dict[str, Any] = {}
    for key, value in profile.items():
        if key in ("user_metadata", "app_metadata"):
            if isinstance(value, dict):
                kept[key] = {f: _kept(v) for f, v in value.items() if f in wanted}
        else:
            kept[key] = _kept(value)
    return kept


def _kept(value: Any) -> Any:
    if isinstance(value, str):
        return value[:_KEPT_CHARS]
    if isinstance(value, list | tuple):  # of scalars: the prompt shows nothing nested
        return [_kept(v) for v in value[:_KEPT_ITEMS] if not isinstance(v, dict | list | tuple)]
    if isinstance(value, dict):
        return {}
    return value


# After a failed Management API call, skip it for a while: while the tenant is slow or down,
# each turn would otherwise wait for the timeout before answering without user data.
_FAILURE_BACKOFF_S = 30.0


class Auth0KeySource:
    """RS256 public keys by `kid` from `https://{AUTH0_DOMAIN}/.well-known/jwks.json`.

    Keys are cached. An unknown `kid` (a rotated key) triggers a refetch, at most once per
    `jwks_refetch_cooldown_s`, so a flood of made-up kids cannot hammer the tenant; a cache
    older than `jwks_max_age_s` is refreshed on the next lookup (a revoked key disappears).
    A failed fetch keeps the keys already cached. The fetch (blocking urllib inside PyJWT)
    runs in a worker thread, serialised by a thread lock, so it is safe from any event loop.
    """

    def __init__(self, settings: AuthSettings, *, clock: Callable[[], float] = time.monotonic):
        self.url = f"{settings.auth0_url}/.well-known/jwks.json"
        self.cooldown_s = settings.jwks_refetch_cooldown_s
        self.max_age_s = settings.jwks_max_age_s
        self.clock = clock
        # PyJWT's own set cache is off: caching, cooldown and clock are ours (and testable).
        self._client = PyJWKClient(self.url, cache_jwk_set=False, timeout=settings.auth0_timeout_s)
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at = float("-inf")  # last successful fetch
        self._attempted_at = float("-inf")  # last attempt, successful or not
        self._attempts = 0
        self._lock = threading.Lock()
        self.last_error: str | None = None

    def health(self) -> dict[str, object]:
        """The key cache, for `/api/health` (touches no backend): `fresh` while younger than
        `jwks_max_age_s`; `unavailable` when no key could be fetched, `degraded` when the last
        refresh failed and older keys are in use."""
        fetched = self._fetched_at != float("-inf")
        age = self.clock() - self._fetched_at if fetched else None
        if not self._keys:
            status = "unavailable" if self.last_error else "not_loaded"
        else:
            status = "degraded" if self.last_error else "ok"
        return {
            "source": "auth0",
            "status": status,
            "keys": len(self._keys),
            "fresh": age is not None and age < self.max_age_s,
            "age_s": None if age is None else round(age, 1),
            "last_error": self.last_error,
        }

    async def key_for(self, kid: str | None) -> Any:
        if not kid:
            raise AuthError("no_kid")
        known = kid in self._keys
        stale = self.clock() - self._fetched_at >= self.max_age_s
        # An unknown kid waits for a fetch already on the wire (a cold instance's requests
        # arrive one after another while the first fetch runs): it may bring the key.
        if (not known or stale) and (self._may_fetch() or (not known and self._lock.locked())):
            seen = self._attempts
            await anyio.to_thread.run_sync(self._refresh, seen)
        jwk = self._keys.get(kid)
        if jwk is not None:
            return jwk.key
        if not self._keys:
            raise AuthUnavailable()
        raise AuthError("unknown_kid", kid=shown(kid))

    def _may_fetch(self) -> bool:
        wait = self.cooldown_s if self._keys else min(self.cooldown_s, _EMPTY_RETRY_S)
        return self.clock() - self._attempted_at >= wait

    def _refresh(self, seen: int) -> None:
        with self._lock:
            if self._attempts != seen:
                return  # a fetch finished while this one waited for the lock
            self._attempted_at = self.clock()
            try:
                self._fetch()
            finally:
                # Counted once finished: a request that waited on the lock for this fetch
                # sees the count move and uses its result instead of fetching again.
                self._attempts += 1

    def _fetch(self) -> None:
        try:
            keys = self._client.get_signing_keys(refresh=True)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "JWKS fetch from %r failed (%d keys still cached): %s",
                self.url,
                len(self._keys),
                self.last_error,
            )
            return
        fresh = {k.key_id: k for k in keys if k.key_id and k.key_type == "RSA"}
        if not fresh:
            self.last_error = "JWKS has no RSA signing keys"
            log.warning("JWKS at %r has no RSA signing keys; keeping the cached ones", self.url)
            return
        added = fresh.keys() - self._keys.keys()
        if self._keys and added:
            log.info("JWKS at %r has new keys %s", self.url, sorted(added))
        self._keys, self._fetched_at, self.last_error = fresh, self.clock(), None


class _SingleFlight:
    """Concurrent calls with the same key share one call. Futures belong to the loop that
    made them, so flights are kept per event loop and never awaited from another one."""

    def __init__(self) -> None:
        self._flights: dict[tuple[asyncio.AbstractEventLoop, Hashable], asyncio.Future[Any]] = {}

    async def run(self, key: Hashable, call: Callable[[], Awaitable[Any]]) -> Any:
        loop = asyncio.get_running_loop()
        slot = (loop, key)
        flight = self._flights.get(slot)
        if flight is not None:
            return await asyncio.shield(flight)
        flight = loop.create_future()
        self._flights[slot] = flight
        try:
            result = await call()
        except BaseException as exc:
            # A cancelled leader must not look like a cancellation to its followers.
            shared = exc if isinstance(exc, Exception) else RuntimeError("lookup was cancelled")
            flight.set_exception(shared)
            flight.exception()  # retrieved: followers re-raise it, nobody else needs it
            raise
        else:
            flight.set_result(result)
            return result
        finally:
            del self._flights[slot]


class Auth0Management:
    """User profiles from the Management API, with a machine-to-machine token.

    The token is cached until shortly before its `expires_in`; profiles are cached per user
    for `user_data_ttl_s` in a bounded TTL cache; concurrent misses for one user make one
    call. An httpx client is made per lookup, inside the caller's event loop, so nothing
    loop-bound outlives a request (serverless runtimes may use a new loop per invocation).
    """

    def __init__(
        self,
        settings: AuthSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        assert settings.auth0_management_enabled, "Management API credentials are not set"
        self.base_url = settings.auth0_url
        self.audience = f"https://{settings.auth0_domain}/api/v2/"
        self.client_id = settings.auth0_mgmt_client_id
        self.client_secret = settings.auth0_mgmt_client_secret
        self.timeout_s = settings.auth0_timeout_s
        self.clock = clock
        self._token: tuple[str, float] | None = None  # (token, renew at)
        self.fields = tuple(settings.user_data_fields)
        self._profiles: TTLCache[str, dict[str, Any]] = TTLCache(
            maxsize=settings.user_data_cache_size, ttl=settings.user_data_ttl_s, timer=clock
        )
        self._flights = _SingleFlight()
        self._retry_at = float("-inf")
        self.last_error: str | None = None

    async def profile(self, sub: str) -> dict[str, Any]:
        """The user's profile (only `PROFILE_FIELDS`, and of the metadata only the
        `USER_DATA_FIELDS`, each value bounded: `kept_profile`); `{}` when Auth0 has no such
        user."""
        cached = self._profiles.get(sub)
        if cached is not None:
            return cached
        if self.clock() < self._retry_at:
            raise LookupError(f"Management API backing off after: {self.last_error}")
        try:
            return await self._flights.run(("profile", sub), lambda: self._fetch_profile(sub))
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            if _tenant_trouble(exc):
                self._retry_at = self.clock() + _FAILURE_BACKOFF_S
            raise

    async def _fetch_profile(self, sub: str) -> dict[str, Any]:
        async with httpx.AsyncClient(
            timeout=self.timeout_s, verify=await shared_tls_context()
        ) as http:
            token = await self._access_token(http)
            response = await http.get(
                f"{self.base_url}/api/v2/users/{quote(sub, safe='')}",
                params={"fields": ",".join(PROFILE_FIELDS), "include_fields": "true"},
                headers={"Authorization": f"Bearer {token}"},
            )
        if response.status_code == 401:
            self._token = None  # revoked or rotated: the next lookup gets a new one
        if response.status_code == 404:
            profile: dict[str, Any] = {}  # e.g. a user deleted since the token was issued
        else:
            response.raise_for_status()
            profile = response.json()
            if not isinstance(profile, dict):
                raise ValueError(f"user {sub!r}: the Management API returned no object")
            profile = kept_profile(profile, self.fields)
        self._profiles[sub] = profile
        return profile

    async def _access_token(self, http: httpx.AsyncClient) -> str:
        if self._token is not None and self.clock() < self._token[1]:
            return self._token[0]
        return await self._flights.run("token", lambda: self._fetch_token(http))

    async def _fetch_token(self, http: httpx.AsyncClient) -> str:
        response = await http.post(
            f"{self.base_url}/oauth/token",
            data={
                "grant_type": "client_credentials",
                "client_id": self.client_id,
                "client_secret": self.client_secret,
                "audience": self.audience,
            },
        )
        response.raise_for_status()
        body = response.json()
        token, expires_in = body.get("access_token"), body.get("expires_in")
        if not isinstance(token, str) or not isinstance(expires_in, int | float):
            raise ValueError("the token endpoint answered without access_token/expires_in")
        # Renew a little before it expires: a tenth of its life, at most a minute.
        self._token = (token, self.clock() + expires_in - min(60.0, expires_in / 10))
        return token


def _tenant_trouble(exc: Exception) -> bool:
    """Slow, unreachable or overloaded (worth backing off), as opposed to a bad request."""
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return status >= 500 or status == 429
    return isinstance(exc, httpx.TransportError)

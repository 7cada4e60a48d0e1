"""Auth0 token verification against a fake tenant on loopback: the real PyJWT JWKS client,
real HTTP, a controllable clock for the refetch cooldown."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from aircoach.auth.auth0 import Auth0KeySource
from aircoach.auth.tokens import DevIssuer, TokenVerifier
from aircoach.errors import AuthError, AuthUnavailable, ConfigError
from aircoach.services import build_verifier
from aircoach.settings import DEV_ISSUER, Settings
from tests.clock import FakeClock
from tests.fake_auth0 import FakeTenant, rsa_key
from tests.helpers import app_with, asgi_client
from tests.loopback import free_port


@pytest.fixture
def settings(data_dir, tenant: FakeTenant) -> Settings:
    return tenant.settings(data_dir)


@pytest.fixture
def keys(settings: Settings, clock: FakeClock) -> Auth0KeySource:
    return Auth0KeySource(settings, clock=clock)


@pytest.fixture
def verifier(keys: Auth0KeySource, tenant: FakeTenant, clock: FakeClock) -> TokenVerifier:
    return TokenVerifier(
        keys, issuer=tenant.issuer, audience=tenant.audience, leeway_s=30, clock=clock
    )


async def rejected(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(AuthError) as info:
        await verifier.verify(token)
    return info.value.message


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# --- the settings ---


def test_issuer_is_the_domain_with_a_trailing_slash_whatever_the_base_url(settings, tenant):
    verifier = build_verifier(settings)
    assert isinstance(verifier.keys, Auth0KeySource)
    assert verifier.issuer == "https://tenant.test/"
    assert verifier.keys.url == f"{tenant.base_url}/.well-known/jwks.json"
    pasted = Settings(_env_file=None, auth0_domain="https://tenant.test/")
    assert pasted.auth0_domain == "tenant.test"
    assert pasted.auth0_url == "https://tenant.test"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"auth0_mgmt_client_id": "id"}, "AUTH0_MGMT_CLIENT_SECRET"),
        ({"auth0_domain": "tenant.test/api"}, "without a path"),
        ({"auth0_base_url": "ftp://tenant.test"}, "AUTH0_BASE_URL"),
    ],
)
def test_auth0_settings_fail_fast(values, message):
    with pytest.raises(ConfigError, match=message):
        Settings(_env_file=None, **{"auth0_domain": "tenant.test", **values})


def test_without_auth0_domain_the_dev_issuer_stays(data_dir):
    verifier = build_verifier(Settings(_env_file=None, data_dir=data_dir))
    assert isinstance(verifier.keys, DevIssuer) and verifier.issuer == DEV_ISSUER


# --- claims ---


async def test_valid_token(verifier, tenant, keys):
    token = tenant.mint("auth0|abc", permissions=["admin:docs"])
    principal = await verifier.verify(token)
    assert principal.sub == "auth0|abc"
    assert principal.permissions == frozenset({"admin:docs"})
    await verifier.verify(tenant.mint("auth0|def"))
    assert tenant.hits["jwks"] == 1  # cached


async def test_expired(verifier, tenant):
    token = tenant.mint(now=time.time() - 7200)  # expired an hour ago
    assert await rejected(verifier, token) == "token expired"


async def test_expired_within_leeway_is_accepted(verifier, tenant):
    token = tenant.mint(now=time.time() - 3600 - 10)
    assert (await verifier.verify(token)).sub == "auth0|user-1"


@pytest.mark.parametrize("claim", ["iat", "nbf"])
async def test_not_yet_valid(verifier, tenant, claim):
    future = int(time.time()) + 600
    token = tenant.mint(**{claim: future, "exp": future + 3600})
    assert await rejected(verifier, token) == "token not yet valid"


async def test_wrong_audience(verifier, tenant):
    assert await rejected(verifier, tenant.mint(aud="https://other.api")) == "wrong audience"


async def test_wrong_issuer(verifier, tenant):
    assert await rejected(verifier, tenant.mint(iss="https://evil.test/")) == "wrong issuer"
    # The issuer must match exactly, trailing slash included.
    assert await rejected(verifier, tenant.mint(iss="https://tenant.test")) == "wrong issuer"


@pytest.mark.parametrize("claim", ["exp", "iat", "sub", "aud", "iss"])
async def test_required_claims(verifier, tenant, claim):
    claims = tenant.claims()
    del claims[claim]
    token = jwt.encode(
        claims, tenant.keys[tenant.signing_kid], "RS256", {"kid": tenant.signing_kid}
    )
    await rejected(verifier, token)


async def test_alg_none(verifier, tenant):
    token = jwt.encode(tenant.claims(), None, algorithm="none", headers={"kid": tenant.signing_kid})
    assert await rejected(verifier, token) == "algorithm 'none' is not accepted"
    assert tenant.hits["jwks"] == 0


async def test_hs256_signed_with_the_public_key_as_secret(verifier, tenant):
    # The classic key-confusion attack: HMAC with the (public) PEM as the shared secret.
    pem = (
        tenant.keys[tenant.signing_kid]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": tenant.signing_kid}).encode())
    payload = _b64(json.dumps(tenant.claims()).encode())
    signature = hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    token = f"{header}.{payload}.{_b64(signature)}"
    assert await rejected(verifier, token) == "algorithm 'HS256' is not accepted"


async def test_key_not_in_the_jwks(verifier, tenant):
    stranger = rsa_key(99)
    reason = await rejected(verifier, tenant.mint(kid="not-published", key=stranger))
    assert reason == "signing key 'not-published' is not in the tenant's JWKS"
    # A published kid on a token signed by another key: the signature does not verify.
    reason = await rejected(verifier, tenant.mint(key=stranger))
    assert reason.startswith("invalid token") and "Signature" in reason


async def test_jwks_url_never_comes_from_the_token(verifier, tenant):
    other = FakeTenant().start()
    try:
        kid = next(iter(other.keys))
        token = tenant.mint(
            kid=kid,
            key=other.keys[kid],
            headers={
                "jku": f"{other.base_url}/.well-known/jwks.json",
                "x5u": f"{other.base_url}/cert.pem",
            },
        )
        await rejected(verifier, token)
        assert other.hits.total() == 0 and tenant.hits["jwks"] == 1
    finally:
        other.stop()


# --- keys: rotation, cooldown, outages ---


async def test_rotated_key_is_accepted_after_one_refetch(verifier, tenant, keys, clock):
    await verifier.verify(tenant.mint())
    new_kid = tenant.rotate()
    clock.advance(keys.cooldown_s)
    assert (await verifier.verify(tenant.mint())).sub == "auth0|user-1"
    assert tenant.hits["jwks"] == 2
    await verifier.verify(tenant.mint(kid=new_kid))
    assert tenant.hits["jwks"] == 2


async def test_withdrawn_key_is_refused_once_the_cache_is_refreshed(verifier, tenant, keys, clock):
    old_kid = tenant.signing_kid
    old_token = tenant.mint()
    await verifier.verify(old_token)
    tenant.rotate()
    clock.advance(keys.max_age_s)
    assert "not in the tenant's JWKS" in await rejected(verifier, old_token)
    assert tenant.hits["jwks"] == 2 and old_kid not in tenant.keys


async def test_flood_of_unknown_kids_fetches_at_most_once_per_cooldown(
    verifier, tenant, keys, clock
):
    await verifier.verify(tenant.mint())
    clock.advance(keys.cooldown_s)
    stranger = rsa_key(99)
    flood = [tenant.mint(kid=f"made-up-{i}", key=stranger) for i in range(50)]

    results = await asyncio.gather(*(verifier.verify(t) for t in flood), return_exceptions=True)
    assert all(isinstance(r, AuthError) and r.status == 401 for r in results)
    assert tenant.hits["jwks"] == 2

    clock.advance(keys.cooldown_s - 1)
    for t in flood:
        await rejected(verifier, t)
    assert tenant.hits["jwks"] == 2

    clock.advance(1)
    await rejected(verifier, flood[0])
    assert tenant.hits["jwks"] == 3
    # Good tokens kept working all along, from the cache.
    await verifier.verify(tenant.mint())
    assert tenant.hits["jwks"] == 3


async def test_concurrent_first_requests_fetch_the_jwks_once(verifier, tenant):
    tokens = [tenant.mint(f"auth0|u{i}") for i in range(20)]
    principals = await asyncio.gather(*(verifier.verify(t) for t in tokens))
    assert [p.sub for p in principals] == [f"auth0|u{i}" for i in range(20)]
    assert tenant.hits["jwks"] == 1


async def test_a_request_during_the_first_jwks_fetch_waits_for_it(verifier, tenant, keys):
    """A cold instance's requests do not all arrive in the same instant: one that arrives
    while the first fetch is on the wire must wait for its keys, not fail for lack of them
    (it got a 503 `auth_unavailable` with the tenant up; found by tests/load)."""
    tenant.slow_s["jwks"] = 0.3
    first = asyncio.create_task(verifier.verify(tenant.mint("auth0|first")))
    assert await asyncio.to_thread(tenant.in_flight.acquire, timeout=5)  # fetch on the wire
    assert (await verifier.verify(tenant.mint("auth0|second"))).sub == "auth0|second"
    assert (await first).sub == "auth0|first"
    assert tenant.hits["jwks"] == 1


async def test_jwks_down_with_keys_cached_still_verifies(verifier, tenant, keys, clock):
    await verifier.verify(tenant.mint())
    tenant.down.add("jwks")
    clock.advance(keys.max_age_s)  # due for a refresh, which fails
    assert (await verifier.verify(tenant.mint())).sub == "auth0|user-1"
    assert tenant.hits["jwks"] == 2 and keys.last_error is not None
    # An unknown kid while the tenant is down is still a bad token (401), not an outage.
    clock.advance(keys.cooldown_s)
    await rejected(verifier, tenant.mint(kid="made-up", key=rsa_key(99)))
    assert tenant.hits["jwks"] == 3
    tenant.down.clear()
    clock.advance(keys.cooldown_s)
    await verifier.verify(tenant.mint())
    assert tenant.hits["jwks"] == 4 and keys.last_error is None


async def test_jwks_down_with_nothing_cached_is_unavailable(verifier, tenant, clock):
    tenant.down.add("jwks")
    with pytest.raises(AuthUnavailable):
        await verifier.verify(tenant.mint())
    with pytest.raises(AuthUnavailable):  # retried after a short pause, not on every request
        await verifier.verify(tenant.mint())
    assert tenant.hits["jwks"] == 1
    tenant.down.clear()
    clock.advance(1)
    assert (await verifier.verify(tenant.mint())).sub == "auth0|user-1"
    assert tenant.hits["jwks"] == 2


# --- over HTTP ---


async def test_http_valid_and_invalid_tokens(client, tenant):
    ok = await client.get("/api/tools", headers={"Authorization": f"Bearer {tenant.mint()}"})
    assert ok.status_code == 200, ok.text

    bad = await client.get(
        "/api/tools",
        headers={"Authorization": f"Bearer {tenant.mint(aud='https://other.api')}"},
    )
    assert bad.status_code == 401
    assert bad.json() == {
        "error": "invalid_token",
        "message": "Il token è stato emesso per un'altra API (audience errata).",
    }
    assert bad.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token"')
    assert "wrong audience" in bad.headers["WWW-Authenticate"]  # the header stays English


async def test_http_jwks_down_with_nothing_cached_is_503(client, tenant):
    tenant.down.add("jwks")
    response = await client.get("/api/tools", headers={"Authorization": f"Bearer {tenant.mint()}"})
    assert response.status_code == 503
    assert response.json()["error"] == "auth_unavailable"


async def test_http_jwks_unreachable_is_503(data_dir, tenant):
    nothing_listens = f"http://127.0.0.1:{free_port()}"
    app = app_with(tenant.settings(data_dir, auth0_base_url=nothing_listens))
    async with asgi_client(app) as client:
        response = await client.get(
            "/api/tools", headers={"Authorization": f"Bearer {tenant.mint()}"}
        )
    assert response.status_code == 503
    assert response.json()["error"] == "auth_unavailable"


async def test_http_admin_permission_comes_from_the_permissions_claim(client, tenant):
    user = {"Authorization": f"Bearer {tenant.mint()}"}
    response = await client.post("/api/update_docs", headers=user)
    assert response.status_code == 403
    admin = {"Authorization": f"Bearer {tenant.mint(permissions=['admin:docs'])}"}
    response = await client.post("/api/update_docs", headers=admin)
    assert response.status_code == 200, response.text


# --- values a token supplies never break or flood a header ---


def forged(header: dict, payload: dict | None = None) -> str:
    """A token whose header says anything (the signature is junk: it is refused first)."""
    body = json.dumps(payload or {"sub": "x"}).encode()
    return f"{_b64(json.dumps(header).encode())}.{_b64(body)}.{_b64(b'sig')}"


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "€"},
        {"alg": "RS256", "kid": "€" * 10},
        {"alg": "RS256", "kid": "k" * 5000},
        {"alg": "RS256", "kid": 'a"b\\c\r\nX-Injected: 1'},
        {"alg": ["RS256"]},
        {"alg": "RS256", "kid": {"nested": 1}},
        {"alg": "RS256", "kid": 12},
    ],
)
async def test_http_token_header_values_are_never_reflected_raw(client, header):
    response = await client.get("/api/tools", headers={"Authorization": f"Bearer {forged(header)}"})
    assert response.status_code == 401, response.text
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.isascii() and len(challenge) < 300 and "\n" not in challenge
    assert "X-Injected" not in response.headers
    assert len(response.json()["message"]) <= 200
    assert "k" * 100 not in response.text


async def test_an_unknown_long_kid_is_shown_cut(verifier, tenant):
    reason = await rejected(verifier, tenant.mint(kid="k" * 5000, key=rsa_key(99)))
    assert reason == f"signing key '{'k' * 36}... is not in the tenant's JWKS"


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
@pytest.mark.parametrize("as_type", [str, float, bool])
async def test_numeric_date_claims_must_be_integers(verifier, tenant, claim, as_type):
    now = int(time.time())
    valid = {"exp": now + 3600, "iat": now - 10, "nbf": now - 10}[claim]
    token = tenant.mint(**{claim: as_type(valid)})
    if (claim, as_type) == ("exp", bool):
        assert await rejected(verifier, token) == "token expired"  # True == 1: long past
    else:
        assert await rejected(verifier, token) == f"claim {claim!r} must be an integer"


async def test_a_string_exp_is_never_cached_into_500s(client, tenant):
    token = tenant.mint(exp=str(int(time.time()) + 3600))
    for _ in range(3):
        headers = {"Authorization": f"Bearer {token}", "Accept-Language": "en"}
        response = await client.get("/api/tools", headers=headers)
        assert response.status_code == 401, response.text
        assert response.json()["message"] == "claim 'exp' must be an integer"


@pytest.mark.parametrize(
    "sub",
    ["auth0|a\nINFO forged line", "auth0|a\r\n", "auth0|\x1b[31mred", "auth0|a\x00b", "a\u2028b"],
)
async def test_a_subject_with_control_characters_is_refused(client, tenant, sub):
    response = await client.get(
        "/api/history", headers={"Authorization": f"Bearer {tenant.mint(sub)}"}
    )
    assert response.status_code == 401
    assert response.json()["message"] == (
        "Il soggetto (sub) del token contiene caratteri di controllo."
    )


async def test_ordinary_subjects_pass(verifier, tenant):
    for sub in ("auth0|65f0c0ffee", "google-oauth2|1234567890", "email|Élodie-Ñandú"):
        assert (await verifier.verify(tenant.mint(sub))).sub == sub


# --- every refusal is said in Italian (PyJWT's reasons are English) ---


def _signed(tenant: FakeTenant, claims: dict, header: dict | None = None) -> str:
    key = tenant.keys[tenant.signing_kid]
    return jwt.encode(claims, key, "RS256", {"kid": tenant.signing_kid, **(header or {})})


def _with_header(tenant: FakeTenant, header: dict) -> str:
    """A token of the tenant whose header is replaced (its signature no longer matters)."""
    _header, payload, signature = tenant.mint().split(".")
    return f"{_b64(json.dumps(header).encode())}.{payload}.{signature}"


_FUTURE = int(time.time()) + 600
REFUSALS = {
    "expired": (
        lambda t: t.mint(now=time.time() - 7200),
        "Token scaduto: accedi di nuovo.",
    ),
    "nbf in the future": (
        lambda t: t.mint(nbf=_FUTURE, exp=_FUTURE + 3600),
        "Il token non è ancora valido.",
    ),
    "iat in the future": (
        lambda t: t.mint(iat=_FUTURE, exp=_FUTURE + 3600),
        "Il token non è ancora valido.",
    ),
    "wrong audience": (
        lambda t: t.mint(aud="https://other.api"),
        "Il token è stato emesso per un'altra API (audience errata).",
    ),
    "wrong issuer": (
        lambda t: t.mint(iss="https://evil.test/"),
        "Il token è stato emesso da un altro emittente (issuer errato).",
    ),
    "malformed": (lambda t: "not.a.token", "Token malformato."),
    "payload that does not decode": (
        lambda t: ".".join(p if i != 1 else "!!!!" for i, p in enumerate(t.mint().split("."))),
        "Token malformato.",
    ),
    "unsupported algorithm": (
        lambda t: _with_header(t, {"alg": "ES256", "kid": t.signing_kid}),
        "Algoritmo del token 'ES256' non accettato.",
    ),
    "no algorithm": (
        # It read "Algoritmo del token None non accettato."
        lambda t: _with_header(t, {"kid": t.signing_kid}),
        "L'intestazione del token non ha 'alg'.",
    ),
    "iat not a number": (
        # The cases below read "Token non valido: " and PyJWT's English reason.
        lambda t: _signed(t, t.claims(iat="yesterday")),
        "Il claim 'iat' del token deve essere un numero intero.",
    ),
    "sub not a string": (
        lambda t: _signed(t, t.claims(sub=12)),
        "Il claim 'sub' del token deve essere una stringa.",
    ),
    "jti not a string": (
        lambda t: _signed(t, t.claims(jti=12)),
        "Il claim 'jti' del token deve essere una stringa.",
    ),
    "unsupported critical extension": (
        lambda t: _signed(t, t.claims(), {"crit": ["x-ext"], "x-ext": 1}),
        "Il token richiede estensioni (intestazione 'crit') che questo server non supporta.",
    ),
    "crit not a list": (
        lambda t: _signed(t, t.claims(), {"crit": "x-ext"}),
        "Il token richiede estensioni (intestazione 'crit') che questo server non supporta.",
    ),
    "b64 without crit": (
        lambda t: _with_header(t, {"alg": "RS256", "kid": t.signing_kid, "b64": False}),
        "Token malformato.",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_every_token_refusal_is_said_in_italian(verifier, tenant, case):
    build, italian = REFUSALS[case]
    with pytest.raises(AuthError) as refused:
        await verifier.verify(build(tenant))
    assert refused.value.code == "invalid_token" and refused.value.status == 401
    assert refused.value.message_in("it") == italian
    cause = refused.value.__cause__
    if isinstance(cause, jwt.PyJWTError):  # PyJWT's English never reaches the student
        assert str(cause) not in italian


async def test_a_refusal_never_echoes_what_the_token_says(client, tenant):
    extension = "x-" + "e" * 300
    token = _signed(tenant, tenant.claims(), {"crit": [extension], extension: 1})
    response = await client.get("/api/tools", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401, response.text
    assert response.json() == {
        "error": "invalid_token",
        "message": "Il token richiede estensioni (intestazione 'crit') che questo server non "
        "supporta.",
    }
    assert "eeee" not in response.headers["WWW-Authenticate"]
    assert "'crit'" in response.headers["WWW-Authenticate"]  # the reason, in English

"""TokenVerifier's cache of verified tokens: it saves the signature check, never past the
token's expiry, and forgets within its TTL."""

from __future__ import annotations

import base64
import time

import jwt
import pytest

from aircoach.auth.tokens import DevIssuer, TokenVerifier, unverified_header
from aircoach.errors import AuthError
from aircoach.settings import DEV_ISSUER
from tests.clock import FakeClock

AUDIENCE = "https://api.test"


class CountingKeys:
    def __init__(self, issuer: DevIssuer):
        self.issuer, self.calls = issuer, 0

    async def key_for(self, kid: str | None):
        self.calls += 1
        return await self.issuer.key_for(kid)


@pytest.fixture
def setup(data_dir):
    issuer = DevIssuer(data_dir)
    keys = CountingKeys(issuer)
    clock = FakeClock(time.time())
    verifier = TokenVerifier(keys, issuer=DEV_ISSUER, audience=AUDIENCE, leeway_s=0, clock=clock)
    return issuer, keys, clock, verifier


async def test_a_verified_token_is_not_checked_again_within_the_ttl(setup):
    issuer, keys, clock, verifier = setup
    token = issuer.mint("u", audience=AUDIENCE, ttl_s=3600)
    assert (await verifier.verify(token)).sub == "u"
    clock.advance(59)
    assert (await verifier.verify(token)).sub == "u"
    assert keys.calls == 1
    clock.advance(2)  # past the 60 s TTL: verified again
    await verifier.verify(token)
    assert keys.calls == 2


async def test_the_cache_never_serves_a_token_past_its_expiry(setup):
    issuer, keys, clock, verifier = setup
    token = issuer.mint("u", audience=AUDIENCE, ttl_s=10)
    await verifier.verify(token)
    clock.advance(11)  # within the cache's TTL but past exp: the token is checked again
    await verifier.verify(token)  # (PyJWT checks exp on the real clock, where it is still valid)
    assert keys.calls == 2


async def test_a_rejected_token_is_not_cached(setup):
    issuer, keys, _clock, verifier = setup
    token = issuer.mint("u", audience="https://other.test")
    for _ in range(2):
        with pytest.raises(AuthError, match="audience"):
            await verifier.verify(token)
    assert keys.calls == 2


async def test_a_zero_ttl_turns_the_cache_off(data_dir):
    issuer = DevIssuer(data_dir)
    keys = CountingKeys(issuer)
    verifier = TokenVerifier(keys, issuer=DEV_ISSUER, audience=AUDIENCE, cache_ttl_s=0)
    token = issuer.mint("u", audience=AUDIENCE)
    for _ in range(3):
        await verifier.verify(token)
    assert keys.calls == 3


@pytest.mark.parametrize("sub", ["a\nb", "a\rb", "\x1b[2J", "a\x00", "a\u200bb", "a\u2029"])
async def test_a_subject_with_control_characters_is_refused(setup, sub):
    issuer, _keys, _clock, verifier = setup
    with pytest.raises(AuthError, match="token subject has control characters"):
        await verifier.verify(issuer.mint(sub, audience=AUDIENCE))


def test_the_challenge_header_is_printable_ascii_and_bounded():
    error = AuthError("algorithm_refused", alg=repr("€" * 300))
    challenge = error.headers["WWW-Authenticate"]
    assert challenge.isascii() and challenge.isprintable() and len(challenge) < 300
    assert len(error.message) == 200 and error.message.endswith("…")
    assert len(error.message_in("it")) == 200  # the body's message, in either language
    quoted = AuthError("unknown_kid", kid='a "b" \\ c')
    assert '\\"' not in challenge and quoted.headers["WWW-Authenticate"].endswith(
        "error_description=\"signing key a 'b' ? c is not in the tenant's JWKS\""
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _malformed(issuer: DevIssuer) -> dict[str, str]:
    """Tokens that are not JWTs, each broken in one place (the header is read first, alone)."""
    header, payload, signature = issuer.mint("u", audience=AUDIENCE).split(".")
    return {
        "not base64 header": f"!!!!.{payload}.{signature}",
        "header not JSON": f"{_b64(b'not json')}.{payload}.{signature}",
        "header a JSON list": f"{_b64(b'[1, 2]')}.{payload}.{signature}",
        "header nested past the recursion limit": f"{_b64(b'[' * 100_000)}.{payload}.{signature}",
        "no dots": header,
        "one dot": f"{header}.{payload}",
        "junk in the payload": f"{header}.{payload[:-4]}!!!!.{signature}",
        "junk in the signature": f"{header}.{payload}.{signature[:-4]}!!!!",
    }


@pytest.mark.parametrize(
    "case",
    [
        "not base64 header",
        "header not JSON",
        "header a JSON list",
        "header nested past the recursion limit",
        "no dots",
        "one dot",
        "junk in the payload",
        "junk in the signature",
    ],
)
async def test_a_token_that_does_not_decode_is_malformed(setup, case):
    issuer, _keys, _clock, verifier = setup
    with pytest.raises(AuthError) as refused:
        await verifier.verify(_malformed(issuer)[case])
    assert refused.value.key == "malformed_token"
    assert refused.value.status == 401


async def test_a_well_formed_token_with_another_signature_is_invalid_not_malformed(setup):
    issuer, _keys, _clock, verifier = setup
    header, payload, _signature = issuer.mint("u", audience=AUDIENCE).split(".")
    other = issuer.mint("someone-else", audience=AUDIENCE).split(".")[2]
    with pytest.raises(AuthError) as refused:
        await verifier.verify(f"{header}.{payload}.{other}")
    # Said in Italian: it was "Token non valido: Signature verification failed" (PyJWT's).
    assert refused.value.code == "invalid_token"
    assert refused.value.message_in("it") == "La firma del token non corrisponde: accedi di nuovo."
    assert "Signature verification failed" in refused.value.headers["WWW-Authenticate"]


async def test_a_token_without_a_required_claim_is_refused_in_italian(setup):
    """It read 'Token non valido: Token is missing the "exp" claim'."""
    issuer, _keys, _clock, verifier = setup
    token = jwt.encode(
        {"sub": "u", "aud": AUDIENCE, "iss": DEV_ISSUER, "iat": int(time.time())},
        issuer.private_key,
        algorithm="RS256",
        headers={"kid": issuer.kid},
    )
    with pytest.raises(AuthError) as refused:
        await verifier.verify(token)
    assert refused.value.message_in("it") == "Nel token manca il claim 'exp': accedi di nuovo."
    assert refused.value.message_in("en") == "invalid token: the 'exp' claim is missing"


def test_the_header_read_before_the_key_is_the_tokens_header(setup):
    issuer, _keys, _clock, _verifier = setup
    token = issuer.mint("u", audience=AUDIENCE)
    assert unverified_header(token) == jwt.get_unverified_header(token)
    assert unverified_header(token)["kid"] == issuer.kid


class UnusableKey:
    """A key source whose key PyJWT cannot use: a refusal with no key of its own."""

    async def key_for(self, kid: str | None):
        return "not a PEM key"

    def health(self) -> dict[str, object]:
        return {}


async def test_a_refusal_without_its_own_message_is_italian_and_logs_the_reason(
    setup, caplog: pytest.LogCaptureFixture
):
    issuer, _keys, _clock, _verifier = setup
    verifier = TokenVerifier(UnusableKey(), issuer=DEV_ISSUER, audience=AUDIENCE)
    logged = caplog.at_level("INFO", logger="aircoach.auth.tokens")
    with logged, pytest.raises(AuthError) as refused:
        await verifier.verify(issuer.mint("u", audience=AUDIENCE))
    # It read "Token non valido: Could not parse the provided public key."
    assert refused.value.message_in("it") == "Token non valido: accedi di nuovo."
    assert refused.value.message_in("en") == "invalid token"
    assert "InvalidKeyError: 'Could not parse the provided public key.'" in caplog.text

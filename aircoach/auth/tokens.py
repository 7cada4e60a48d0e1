"""Bearer token verification: one code path for Auth0 and the local dev issuer.

Both issue RS256 tokens; they differ only in where the public key comes from (`KeySource`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import logging
import os
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import jwt
from cachetools import TTLCache
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from aircoach.errors import AuthError, ConfigError
from aircoach.settings import DEV_ISSUER, AuthSettings

ALGORITHMS = ["RS256"]
REQUIRED_CLAIMS = ["exp", "iat", "iss", "aud", "sub"]
# NumericDate claims: PyJWT takes "1795372800" (a string) too, which the verified-token cache
# then compares with a number (every later request was a 500). Auth0 sends integers.
INTEGER_CLAIMS = ("exp", "iat", "nbf")
# Characters a subject may not hold: it is logged and becomes part of thread ids and queries
# (CR/LF/ESC forged log lines; a NUL matched another user's turns on nx-27017).
_FORBIDDEN_IN_SUBJECT = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

log = logging.getLogger(__name__)


def unverified_header(token: str) -> dict[str, Any]:
    """The token's JOSE header, read to find its key; `jwt.decode` checks it again, strictly,
    with the rest of the token. (PyJWT's `get_unverified_header` decodes and checks every
    segment, the 342 characters of an RS256 signature included, one character at a time: 80 us
    a token, which `jwt.decode` then spends again.) Raises `jwt.DecodeError`."""
    segment = token.partition(".")[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error, RecursionError) as exc:  # JSON errors included
        raise jwt.DecodeError("Invalid header") from exc
    if not isinstance(header, dict):
        raise jwt.DecodeError("Invalid header string: must be a json object")
    return header


def shown(value: Any, limit: int = 40) -> str:
    """A token-supplied value for a message: ASCII repr, at most `limit` characters."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def subject_problem(sub: Any) -> str | None:
    """Why `sub` cannot be a user id (a message key of `aircoach.messages`), or None."""
    if not isinstance(sub, str) or not sub.strip():
        return "no_subject"
    if any(unicodedata.category(c) in _FORBIDDEN_IN_SUBJECT for c in sub):
        return "subject_control_characters"
    return None


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's `sub` and its permissions. Never taken from the body."""

    sub: str
    permissions: frozenset[str] = frozenset()
    claims: dict[str, Any] = field(default_factory=dict, compare=False)


class KeySource(Protocol):
    """Resolves the public key that signed a token, by the token header's `kid`."""

    async def key_for(self, kid: str | None) -> Any: ...

    def health(self) -> dict[str, object]:
        """The key source's state for `/api/health`, touching no backend."""
        ...


class TokenVerifier:
    """Verifies bearer tokens. A token that verified is remembered for `cache_ttl_s` (never past
    its `exp`), so a client's next requests skip the signature check; a key withdrawn from the
    JWKS stops its tokens within that time."""

    def __init__(
        self,
        keys: KeySource,
        *,
        issuer: str,
        audience: str,
        leeway_s: int = 30,
        cache_ttl_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ):
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.leeway_s = leeway_s
        self.clock = clock
        self._verified: TTLCache[str, Principal] = TTLCache(
            maxsize=2048, ttl=cache_ttl_s, timer=clock
        )  # ttl 0: no cache

    async def verify(self, token: str) -> Principal:
        if not self._verified.ttl:
            return await self._verify(token)
        known = self._verified.get(token)
        if known is not None and self.clock() <= known.claims["exp"] + self.leeway_s:
            return known
        principal = await self._verify(token)
        self._verified[token] = principal
        return principal

    async def _verify(self, token: str) -> Principal:
        try:
            header = unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthError("malformed_token") from exc
        alg = header.get("alg")
        if alg is None:
            raise AuthError("no_alg")
        if alg not in ALGORITHMS:
            raise AuthError("algorithm_refused", alg=shown(alg))
        if "crit" in header:
            # Extensions the verifier must understand (RFC 7515 4.1.11): we know none, and
            # PyJWT's refusal quoted the token's own extension names, in English.
            raise AuthError("critical_header_refused")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthError("kid_not_string")
        key = await self.keys.key_for(kid)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("token_expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthError("wrong_audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("wrong_issuer") from exc
        except jwt.ImmatureSignatureError as exc:
            raise AuthError("token_not_yet_valid") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthError("signature_mismatch") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError("claim_missing", claim=exc.claim[:32]) from exc
        except jwt.InvalidIssuedAtError as exc:  # an `iat` that is not a number at all
            raise AuthError("claim_not_integer", name="iat") from exc
        except jwt.exceptions.InvalidSubjectError as exc:
            raise AuthError("claim_not_string", name="sub") from exc
        except jwt.exceptions.InvalidJTIError as exc:
            raise AuthError("claim_not_string", name="jti") from exc
        except jwt.DecodeError as exc:  # a payload or signature segment that does not decode
            raise AuthError("malformed_token") from exc
        except jwt.PyJWTError as exc:
            # A reason PyJWT adds later (or a `b64` header without `crit`): its text is
            # English and may quote the token, so it is logged, not shown.
            log.info("token refused: %s: %s", type(exc).__name__, shown(str(exc), 120))
            raise AuthError("token_invalid") from exc
        for name in INTEGER_CLAIMS:
            value = claims.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise AuthError("claim_not_integer", name=name)
        sub = claims.get("sub")
        if problem := subject_problem(sub):
            raise AuthError(problem)
        assert isinstance(sub, str)
        permissions = claims.get("permissions") or []
        if not isinstance(permissions, list):
            permissions = []
        return Principal(sub=sub, permissions=frozenset(map(str, permissions)), claims=claims)


# --- the local dev issuer ---------------------------------------------------------------------


class DevIssuer:
    """An RS256 key pair under `data_dir`, generated on first use; mints and verifies dev tokens."""

    def __init__(self, data_dir: Path):
        self.key_path = data_dir / "dev_issuer_key.pem"
        self._private_key: rsa.RSAPrivateKey | None = None

    @property
    def private_key(self) -> rsa.RSAPrivateKey:
        if self._private_key is None:
            self._private_key = _load_or_create_key(self.key_path)
        return self._private_key

    @functools.cached_property
    def kid(self) -> str:
        """The key's id (its hash): the same for the life of this object, as its key."""
        der = self.private_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return hashlib.sha256(der).hexdigest()[:16]

    def health(self) -> dict[str, object]:
        return {"source": "dev-issuer", "status": "ok", "key_loaded": self._private_key is not None}

    @functools.cached_property
    def public_key(self) -> rsa.RSAPublicKey:
        """One key object for every check, as the Auth0 verifier keeps its keys: a new one
        per token cost its check about 20 us more."""
        return self.private_key.public_key()

    async def key_for(self, kid: str | None) -> Any:
        if self._private_key is None:
            await anyio.to_thread.run_sync(lambda: self.private_key)
        if kid != self.kid:
            raise AuthError("not_dev_issuer")
        return self.public_key

    def mint(
        self,
        sub: str,
        *,
        audience: str,
        ttl_s: int = 3600,
        permissions: list[str] | None = None,
        now: float | None = None,
    ) -> str:
        issued = int(time.time() if now is None else now)
        claims = {
            "iss": DEV_ISSUER,
            "aud": audience,
            "sub": sub,
            "iat": issued,
            "exp": issued + ttl_s,
            "permissions": list(permissions or []),
        }
        return jwt.encode(claims, self.private_key, algorithm="RS256", headers={"kid": self.kid})


def mint_dev_token(
    settings: AuthSettings,
    sub: str,
    *,
    ttl_s: int = 3600,
    permissions: Sequence[str] = (),
    issuer: DevIssuer | None = None,
) -> str:
    """A token of the local dev issuer for `sub` (the `token` command, the playground's dev
    sign-in); `issuer` is the app's own, else the key under DATA_DIR. Blocking: the key may
    be read from disk. Refused with `ConfigError` when tokens come from Auth0."""
    if not settings.uses_dev_issuer:
        raise ConfigError("AUTH0_DOMAIN is set: tokens come from Auth0, not from the dev issuer")
    issuer = issuer or DevIssuer(settings.data_dir)
    return issuer.mint(
        sub, audience=settings.auth0_audience, ttl_s=ttl_s, permissions=list(permissions)
    )


def _load_or_create_key(path: Path) -> rsa.RSAPrivateKey:
    if not path.exists():
        # DATA_DIR also holds the SQLite file (everyone's conversations): private.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pem)
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)  # atomic and refuses to overwrite: the first process wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    loaded = _parse_key(path.read_bytes())
    if not isinstance(loaded, rsa.RSAPrivateKey):
        raise AuthError("dev_key_invalid")
    return loaded


@functools.lru_cache(maxsize=4)
def _parse_key(pem: bytes) -> Any:
    # Parsing checks the RSA key's consistency (tens of ms); the same bytes give the same key.
    return serialization.load_pem_private_key(pem, password=None)

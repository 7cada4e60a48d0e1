"""A fake Auth0 tenant: a real HTTP server on 127.0.0.1 serving the JWKS, `/oauth/token` and
`/api/v2/users/{id}`, with counters and switches (down, slow, key rotation). Loaded as a
pytest plugin from conftest.py; the `tenant` fixture starts one per test."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from functools import cache
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tests.loopback import LoopbackServer, QuietHandler

# PyJWT, cryptography and the settings are imported where used: tests/conftest.py loads this
# file as a plugin in every process, the xdist controller included (see there).
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import rsa

    from aircoach.settings import Settings


@cache
def rsa_key(index: int) -> rsa.RSAPrivateKey:
    """Keys are slow to generate, so the whole session shares a small pool."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class FakeTenant:
    domain = "tenant.test"
    issuer = "https://tenant.test/"
    audience = "https://api.aircoach.test"
    client_id = "mgmt-client"
    client_secret = "mgmt-secret"

    def __init__(self) -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {}  # published in the JWKS
        self._next_key = 0
        self.signing_kid = self.add_key()
        self.users: dict[str, dict[str, Any]] = {}
        self.token_ttl_s = 86400
        self.hits: Counter[str] = Counter()  # "jwks", "token", "users"
        self.token_requests: list[dict[str, str]] = []
        self.user_requests: list[dict[str, Any]] = []
        self.down: set[str] = set()  # kinds answered with 503
        self.slow_s: dict[str, float] = {}  # kinds answered after a delay
        self.issued_tokens: set[str] = set()
        self.in_flight = threading.Semaphore(0)  # released when a slow request arrives
        self._server = LoopbackServer(_handler(self))
        self._release = self._server.release

    @property
    def base_url(self) -> str:
        return self._server.url

    def start(self) -> FakeTenant:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def settings(self, data_dir: Path, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": data_dir,
            "auth0_domain": self.domain,
            "auth0_audience": self.audience,
            "auth0_base_url": self.base_url,
            "auth0_mgmt_client_id": self.client_id,
            "auth0_mgmt_client_secret": self.client_secret,
        }
        from aircoach.settings import Settings

        return Settings(_env_file=None, **{**values, **overrides})

    # --- keys and tokens ---

    def add_key(self) -> str:
        kid = f"key-{len(self.keys)}-{uuid.uuid4().hex[:6]}"
        self.keys[kid] = rsa_key(self._next_key)
        self._next_key += 1
        return kid

    def rotate(self, *, keep_old: bool = False) -> str:
        """Publish a new signing key (and by default withdraw the old ones)."""
        old = dict(self.keys) if keep_old else {}
        kid = self.add_key()
        self.keys = {**old, kid: self.keys[kid]}
        self.signing_kid = kid
        return kid

    def claims(self, sub: str = "auth0|user-1", *, now: float | None = None, **extra: Any):
        issued = int(time.time() if now is None else now)
        claims = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": sub,
            "iat": issued,
            "exp": issued + 3600,
            "permissions": [],
        }
        return {**claims, **extra}

    def mint(
        self,
        sub: str = "auth0|user-1",
        *,
        kid: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        kid = kid or self.signing_kid
        key = key or self.keys[kid]
        import jwt

        return jwt.encode(
            self.claims(sub, **claims),
            key,
            algorithm="RS256",
            headers={"kid": kid, **(headers or {})},
        )

    def jwks(self) -> dict[str, Any]:
        from jwt.algorithms import RSAAlgorithm

        keys = []
        for kid, key in self.keys.items():
            jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    # --- request handling (server threads) ---

    def answer(self, kind: str, method: str, path: str, query: str, headers, body: bytes):
        self.hits[kind] += 1
        if self.slow_s.get(kind):
            self.in_flight.release()
            self._release.wait(self.slow_s[kind])
        if kind in self.down:
            return 503, {"error": "temporarily_unavailable"}
        if kind == "jwks":
            return 200, self.jwks()
        if kind == "token":
            return self._token(headers, body)
        return self._user(path, query, headers)

    def _token(self, headers, body: bytes):
        if headers.get("Content-Type", "").startswith("application/json"):
            form = json.loads(body)
        else:
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        self.token_requests.append(form)
        valid = (
            form.get("grant_type") == "client_credentials"
            and form.get("client_id") == self.client_id
            and form.get("client_secret") == self.client_secret
            and form.get("audience") == f"https://{self.domain}/api/v2/"
        )
        if not valid:
            return 401, {"error": "access_denied"}
        token = f"mgmt-token-{len(self.token_requests)}"
        self.issued_tokens.add(token)
        return 200, {"access_token": token, "expires_in": self.token_ttl_s, "token_type": "Bearer"}

    def _user(self, path: str, query: str, headers):
        raw_id = path.removeprefix("/api/v2/users/")
        auth = headers.get("Authorization", "")
        self.user_requests.append({"raw_id": raw_id, "query": parse_qs(query), "auth": auth})
        if auth.removeprefix("Bearer ") not in self.issued_tokens:
            return 401, {"error": "invalid_token"}
        user = self.users.get(unquote(raw_id))
        if user is None:
            return 404, {"error": "inexistent_user"}
        return 200, user


def _handler(tenant: FakeTenant) -> type[BaseHTTPRequestHandler]:
    routes = {
        ("GET", "/.well-known/jwks.json"): "jwks",
        ("POST", "/oauth/token"): "token",
    }

    class Handler(QuietHandler):
        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            kind = routes.get((method, url.path))
            if kind is None and method == "GET" and url.path.startswith("/api/v2/users/"):
                kind = "users"
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if kind is None:
                status, payload = 404, {"error": "not_found"}
            else:
                status, payload = tenant.answer(
                    kind, method, url.path, url.query, self.headers, body
                )
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


@pytest.fixture
def tenant() -> Iterator[FakeTenant]:
    fake = FakeTenant().start()
    yield fake
    fake.stop()

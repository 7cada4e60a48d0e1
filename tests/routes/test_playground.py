"""The playground's routes: the page and its files with their security headers, the
PLAYGROUND switch, and the dev sign-in (loopback only, same origin, bounded, validated)."""

from __future__ import annotations

import re

import httpx
import pytest

from aircoach.auth.tokens import DevIssuer
from aircoach.routes.playground import STATIC, VENDOR
from aircoach.settings import ROOT, ServerSettings
from tests.helpers import app_with, asgi_client


def _client(app, host: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(host, 51000))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")


@pytest.mark.parametrize(
    ("path", "media_type"),
    [
        ("/", "text/html"),
        ("/playground", "text/html"),
        ("/playground/app.js", "text/javascript"),
        ("/playground/app.css", "text/css"),
        ("/playground/vendor/marked.esm.js", "text/javascript"),
        ("/playground/vendor/purify.es.mjs", "text/javascript"),
    ],
)
async def test_the_page_and_its_files_carry_a_strict_policy(app, path, media_type):
    async with asgi_client(app) as client:
        response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(media_type)
    csp = dict(
        part.strip().split(" ", 1)
        for part in response.headers["content-security-policy"].split(";")
    )
    assert csp["default-src"] == "'self'"
    assert csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["connect-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


def test_the_page_has_no_inline_code_and_nothing_from_another_origin():
    html = (STATIC / "index.html").read_text("utf-8")
    assert "<style" not in html and " style=" not in html
    assert re.findall(r"<script\b[^>]*>", html) == [
        '<script type="module" src="/playground/app.js">'
    ]
    assert re.search(r"\bon[a-z]+=", html) is None  # no inline event handlers
    references = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert references and all(r.startswith(("/playground/", "data:")) for r in references)
    for name in ("app.js", "app.css"):
        text = (STATIC / name).read_text("utf-8")
        # The one absolute URL is the SVG namespace, an identifier that is never fetched.
        assert set(re.findall(r"https?://[^\s\"')]+", text)) <= {"http://www.w3.org/2000/svg"}
        # Server text goes in as text; the token lives in memory only.
        assert re.search(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write", text) is None
        assert re.search(r"\b(localStorage|document\.cookie)\b", text) is None
        # The tab's storage keeps a mock exam's chosen answers, nothing else (the token never).
        writes = re.findall(r"sessionStorage\.setItem\(([^,]+),", text)
        assert writes == (["examKey(state.exam.id)"] if name == "app.js" else [])


@pytest.mark.parametrize(
    "name", ["axe.min.js", "..%2Fapp.js", "marked.esm.js.map", "%2E%2E%2F%2E%2E%2Fsettings.py"]
)
async def test_only_the_named_vendored_files_are_served(app, name):
    async with asgi_client(app) as client:
        response = await client.get(f"/playground/vendor/{name}")
    assert response.status_code == 404


def test_the_vendored_libraries_keep_their_licence_headers_and_the_docs_name_their_versions():
    docs = (ROOT / "docs" / "playground.md").read_text("utf-8")
    headers = {
        "marked.esm.js": r"marked v(\d+\.\d+\.\d+) - a markdown parser",
        "purify.es.mjs": r"@license DOMPurify (\d+\.\d+\.\d+)",
    }
    for name, header in headers.items():
        text = (STATIC / "vendor" / name).read_text("utf-8")
        version = re.search(header, text[:400])
        assert version, name
        assert f"`{name}`" in docs and version.group(1) in docs, name
    assert set(VENDOR) == set(headers)
    axe = (ROOT / "tests" / "browser" / "vendor" / "axe.min.js").read_text("utf-8")[:200]
    version = re.search(r"axe v(\d+\.\d+\.\d+)", axe)
    assert version and f"axe-core {version.group(1)}" in docs


async def test_playground_off_serves_nothing(settings):
    app = app_with(settings.model_copy(update={"playground": False}))
    async with _client(app) as client:
        for path in (
            "/",
            "/playground",
            "/playground/app.js",
            "/playground/vendor/marked.esm.js",
            "/playground/config",
        ):
            assert (await client.get(path)).status_code == 404, path
        assert (await client.post("/api/dev/token", json={"name": "x"})).status_code == 404


def test_playground_is_on_locally_and_off_on_lambda_and_vercel(monkeypatch):
    assert ServerSettings(_env_file=None).playground is True
    for variable in ("AWS_LAMBDA_FUNCTION_NAME", "VERCEL"):
        with monkeypatch.context() as env:
            env.setenv(variable, "1")
            assert ServerSettings(_env_file=None).playground is False
            env.setenv("PLAYGROUND", "true")
            assert ServerSettings(_env_file=None).playground is True


async def test_dev_sign_in_mints_a_working_token_for_dev_name(app, settings, data_dir):
    async with _client(app) as client:
        config = (await client.get("/playground/config")).json()
        response = await client.post("/api/dev/token", json={"name": "Giulia Rossi"})
        assert response.status_code == 200, response.text
        body = response.json()
        tools = await client.get(
            "/api/tools", headers={"Authorization": f"Bearer {body['access_token']}"}
        )
        admin = (await client.post("/api/dev/token", json={"name": "ada", "admin": True})).json()
    assert config == {"dev_sign_in": True, "admin_permission": "admin:docs"}
    assert body["sub"] == "dev|Giulia Rossi" and body["token_type"] == "Bearer"
    assert body["permissions"] == [] and body["expires_in"] == 3600
    assert tools.status_code == 200
    claims = await app.state.services.verifier.verify(admin["access_token"])
    assert claims.sub == "dev|ada" and claims.permissions == {"admin:docs"}
    assert (data_dir / "dev_issuer_key.pem").exists()


@pytest.mark.parametrize(
    ("host", "headers"),
    [
        ("203.0.113.7", {}),
        ("10.0.0.2", {}),
        ("127.0.0.1", {"X-Forwarded-For": "203.0.113.7"}),
        ("127.0.0.1", {"Forwarded": "for=203.0.113.7"}),
        ("127.0.0.1", {"Origin": "https://evil.example"}),
        ("127.0.0.1", {"Origin": "http://127.0.0.1:9999"}),
    ],
)
async def test_dev_sign_in_refuses_callers_elsewhere_before_reading_the_body(app, host, headers):
    async with _client(app, host) as client:
        response = await client.post("/api/dev/token", content=b"not json", headers=headers)
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert response.json()["message"].startswith("L'accesso di prova risponde solo")


async def test_dev_sign_in_from_the_pages_own_origin_is_allowed(app):
    async with _client(app) as client:
        response = await client.post(
            "/api/dev/token", json={"name": "a"}, headers={"Origin": "http://127.0.0.1:8000"}
        )
    assert response.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "x" * 41},
        {"name": "riga\nnuova"},
        {"name": "<script>"},
        {"name": " spazio"},
        {"name": "ok", "admin": "yes"},
        {"name": "ok", "permissions": ["tasks:review"]},
    ],
)
async def test_dev_sign_in_validates_the_name(app, body):
    async with _client(app) as client:
        response = await client.post("/api/dev/token", json=body)
    assert response.status_code == 422, body
    assert response.json()["detail"][0]["loc"][0] == "body"


async def test_dev_sign_in_bounds_its_body(app):
    async with _client(app) as client:
        response = await client.post("/api/dev/token", content=b'{"name": "' + b"a" * 2000 + b'"}')
    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"


async def test_no_dev_sign_in_with_auth0(settings):
    with_auth0 = settings.model_copy(update={"auth0_domain": "tenant.example.com"})
    app = app_with(with_auth0)
    async with _client(app) as client:
        assert (await client.post("/api/dev/token", json={"name": "a"})).status_code == 404
        config = (await client.get("/playground/config")).json()
        assert (await client.get("/")).status_code == 200
    assert config["dev_sign_in"] is False
    assert not isinstance(app.state.services.verifier.keys, DevIssuer)

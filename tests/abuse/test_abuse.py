"""The attack run, replayed: each finding of the hardening issue as a black-box HTTP test
against a real server (`python -m aircoach serve` on 127.0.0.1). Sizes are the tests' own and
bounded; nothing leaves loopback."""

from __future__ import annotations

import base64
import json
import stat
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import jwt
import pytest

from aircoach.auth import webhook
from aircoach.auth.tokens import DevIssuer
from aircoach.settings import Settings
from tests.abuse.conftest import METEO_KEY, METEO_TOOL, WEBHOOK_SECRET, Target, server_env
from tests.abuse.conftest import tools_json as docs_tools_json
from tests.abuse.rawhttp import post_large, trickle_head
from tests.load.harness import ServerProcess
from tests.sse import parse_sse

pytestmark = pytest.mark.integration

TIMEOUT = httpx.Timeout(60.0)
MB = 1024 * 1024


def client(target: Target) -> httpx.Client:
    return httpx.Client(base_url=target.url, timeout=TIMEOUT)


def chat(target: Target, body: dict) -> httpx.Response:
    with client(target) as c:
        return c.post("/api/stream_query", json=body, headers=target.headers())


# --- High: the quadratic 422 ---


def test_ten_thousand_unknown_tools_get_a_small_answer_at_once(target):
    before, _ = target.server.memory_mb()
    huge = {f"strumento_{i:05d}": True for i in range(10_000)}  # 220 KB
    response = chat(target, {"query": "ciao", "tools": huge})
    assert response.status_code == 413 and response.json()["error"] == "body_too_large"

    many = {f"strumento_{i:05d}": True for i in range(2_000)}  # 44 KB, under the limit
    response = chat(target, {"query": "ciao", "tools": many})
    assert response.status_code == 422 and len(response.content) < 4_000
    assert "at most 64 tool switches, got 2000" in response.text

    unknown = {f"nope_{i:02d}": True for i in range(64)}
    response = chat(target, {"query": "ciao", "tools": unknown})
    detail = response.json()["detail"]
    assert response.status_code == 422 and len(response.content) < 10_000
    assert [d["input"] for d in detail[:3]] == ["nope_00", "nope_01", "nope_02"]
    after, _ = target.server.memory_mb()
    assert after - before < 50, (before, after)


# --- Medium: no body limit, bodies parsed before authentication ---


def test_concurrent_large_bodies_are_refused_before_they_are_read(target):
    before, _ = target.server.memory_mb()
    total = 16 * MB  # each; the server answers after reading at most 64 KB of it

    def anonymous(i: int):
        return post_large(target.url, "/api/stream_query", total, declared=i % 2 == 0)

    def signed_in(i: int):
        return post_large(
            target.url, "/api/stream_query", total, headers=target.headers(), declared=i % 2 == 0
        )

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(anonymous, range(8))) + list(pool.map(signed_in, range(8)))
    for answer in answers[:8]:
        assert answer.status in (401, 413), answer  # never read: refused by token or size
    for answer in answers[8:]:
        assert answer.status == 413 and b"body_too_large" in answer.body, answer
    assert all(a.sent < total for a in answers), [a.sent for a in answers]
    after, _ = target.server.memory_mb()
    assert after - before < 50, (before, after)


def test_a_huge_query_is_never_echoed(target):
    response = chat(target, {"query": "q" * 100_000})
    assert response.status_code == 413 and "q" * 100 not in response.text
    response = chat(target, {"query": "q" * 60_000})
    assert response.status_code == 422 and len(response.content) < 2_000


def test_a_signed_webhook_body_over_the_limit_is_refused(target):
    body = b"x" * MB
    with client(target) as c:
        response = c.post(
            "/api/update_docs", content=body, headers=webhook.signed_headers(WEBHOOK_SECRET, body)
        )
    assert response.status_code == 413 and response.json()["error"] == "body_too_large"


# --- Medium: secrets in a tool URL, docs naming any variable ---


def test_a_key_in_a_tool_url_reaches_neither_the_client_nor_the_store(target):
    with client(target) as c:
        response = c.post(
            "/api/stream_query",
            json={"query": "Dammi il METAR di Linate", "tools": {"meteo": True}},
            headers=target.headers("pilot"),
        )
        history = c.get("/api/history", headers=target.headers("pilot"))
    assert response.status_code == 200
    events = parse_sse(response.text)
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert result["tool_name"] == "meteo", events
    assert result["data"]["meta"]["endpoint"] == "${TOOL_METEO_URL}/v1/${TOOL_METEO_KEY}/metar"
    assert target.meteo.hits(f"/v1/{METEO_KEY}/metar")  # the key did reach the service
    assert METEO_KEY not in response.text and METEO_KEY not in history.text
    assert history.json()["turns"][0]["tool"]["tool_name"] == "meteo"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"headers": {"X-Leak": "${UPDATE_DOCS_SECRET}"}},
            "tool 'meteo': http: Value error, variable 'UPDATE_DOCS_SECRET' may not be used",
        ),
        ({"url": "${TOOL_METEO_URL}/?k=${AWS_SECRET_ACCESS_KEY}"}, "'AWS_SECRET_ACCESS_KEY'"),
        ({"url": "${MONGODB_URI}"}, "variable 'MONGODB_URI' may not be used"),
    ],
)
def test_docs_naming_another_variable_are_refused_and_nothing_is_sent(target, change, expected):
    hits = len(target.meteo.hits(f"/v1/{METEO_KEY}/metar"))
    original = (target.docs / "tools.json").read_text("utf-8")
    bad = {**METEO_TOOL, "http": {**METEO_TOOL["http"], **change}}
    (target.docs / "tools.json").write_text(docs_tools_json(bad), "utf-8")
    try:
        with client(target) as c:
            admin = target.headers("admin", permissions=["admin:docs"])
            reload = c.post("/api/update_docs", headers=admin)
            assert reload.status_code == 422 and reload.json()["error"] == "invalid_docs"
            assert expected in reload.json()["message"]
    finally:
        (target.docs / "tools.json").write_text(original, "utf-8")
    response = chat(target, {"query": "Dammi il METAR di Linate", "tools": {"meteo": True}})
    assert response.status_code == 200 and "UPDATE_DOCS_SECRET" not in response.text
    assert len(target.meteo.hits(f"/v1/{METEO_KEY}/metar")) == hits + 1  # the good config


def test_docs_naming_a_module_outside_the_allowlist_are_refused(target):
    original = (target.docs / "tools.json").read_text("utf-8")
    config = json.loads(original)
    config["tools"][0]["python"] = "os:system"
    (target.docs / "tools.json").write_text(json.dumps(config), "utf-8")
    try:
        with client(target) as c:
            admin = target.headers("admin", permissions=["admin:docs"])
            reload = c.post("/api/update_docs", headers=admin)
    finally:
        (target.docs / "tools.json").write_text(original, "utf-8")
    assert reload.status_code == 422
    assert "module 'os' is not allowed for tool handlers" in reload.json()["message"]


# --- Low: token values in headers, claims, subjects ---


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "header", [{"alg": "€"}, {"alg": "RS256", "kid": "k" * 5000}, {"alg": "RS256", "kid": [1]}]
)
def test_token_header_values_never_break_or_flood_the_answer(target, header):
    forged = f"{_b64(json.dumps(header).encode())}.{_b64(b'{}')}.{_b64(b'sig')}"
    with client(target) as c:
        response = c.get("/api/history", headers={"Authorization": f"Bearer {forged}"})
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.isascii() and len(challenge) < 300 and "k" * 100 not in response.text


def test_a_string_exp_is_refused_every_time(target):
    issuer = DevIssuer(target.data)
    now = int(time.time())
    claims = {
        "iss": "https://aircoach.dev.local/",
        "aud": Settings(_env_file=None).auth0_audience,
        "sub": "string-exp",
        "iat": now,
        "exp": str(now + 3600),
    }
    token = jwt.encode(claims, issuer.private_key, algorithm="RS256", headers={"kid": issuer.kid})
    with client(target) as c:
        for _ in range(3):  # it was accepted, cached, then a 500 on every request
            response = c.get("/api/history", headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 401
            assert response.json()["message"] == (
                "Il claim 'exp' del token deve essere un numero intero."
            )


@pytest.mark.parametrize(
    "sub", ["u\n2026-01-01 INFO aircoach: forged", "u\r\nX", "\x1b[31mred", "victim\x00"]
)
def test_a_subject_with_control_characters_is_refused(target, sub):
    with client(target) as c:
        response = c.get("/api/history", headers=target.headers(sub))
    assert response.status_code == 401
    assert response.json()["message"] == (
        "Il soggetto (sub) del token contiene caratteri di controllo."
    )
    assert "forged" not in target.server.log()


def test_a_lone_surrogate_is_a_422(target):
    with client(target) as c:
        response = c.post(
            "/api/stream_query",
            content=b'{"query": "ciao \\ud800"}',
            headers={**target.headers(), "Content-Type": "application/json"},
        )
    assert response.status_code == 422 and response.json()["detail"]


def test_a_query_full_of_quotes_is_answered(target):
    # 4,000 '«' took 370 ms of event-loop CPU in the offline model; now ~2 ms.
    response = chat(target, {"query": "«" * 4000, "tools": {"domanda_teoria": True}})
    assert response.status_code == 200 and parse_sse(response.text)[-1]["type"] == "done"


def test_the_database_is_private(target):
    assert chat(target, {"query": "Cos'è lo stallo?"}).status_code == 200
    assert stat.S_IMODE(target.sqlite.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.sqlite.parent.stat().st_mode) == 0o700


def test_the_api_docs_are_public_by_decision(target):
    with client(target) as c:
        assert c.get("/openapi.json").status_code == 200
        assert c.get("/docs").status_code == 200


# --- Low: slowloris ---


def test_trickling_requests_are_cut_and_others_still_served(tmp_path, data_dir):
    server = ServerProcess(
        tmp_path / "server", server_env(data_dir, REQUEST_RECEIPT_TIMEOUT_S="1")
    ).start()
    try:
        with ThreadPoolExecutor(64) as pool:
            trickling = [pool.submit(trickle_head, server.url) for _ in range(60)]
            with httpx.Client(base_url=server.url, timeout=TIMEOUT) as c:
                assert c.get("/api/health").status_code == 200  # while 60 trickle
            answers = [f.result() for f in trickling]
        # Each was cut (trickle_head fails after 30 s otherwise); a client that wrote one
        # more line as the server closed may see a reset instead of the 408.
        assert all(a.status in (408, None) for a in answers), answers[:3]
        assert sum(a.status == 408 for a in answers) >= 30
        assert server.alive
    finally:
        server.stop()

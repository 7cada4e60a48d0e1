"""The second attack round (issue 29), replayed against a real server: each hole a clear 4xx
(or a clean answer), never a 500, a stall or a leak. The tasks, triage and grounding cases
live beside their features' tests."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from aircoach.auth import webhook
from tests.abuse.conftest import WEBHOOK_SECRET, Target

pytestmark = pytest.mark.integration

TIMEOUT = httpx.Timeout(60.0)


def client(target: Target) -> httpx.Client:
    return httpx.Client(base_url=target.url, timeout=TIMEOUT)


def post_json(target: Target, path: str, raw: bytes, **headers: str) -> httpx.Response:
    with client(target) as c:
        return c.post(path, content=raw, headers={"Content-Type": "application/json", **headers})


def assert_error_shape(response: httpx.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["error"] == error and body["message"], body
    assert "detail" not in body or status == 422
    assert response.headers.get("x-request-id")


# --- 1. Dev sign-in by DNS rebinding ---


def test_dev_sign_in_refuses_a_page_whose_name_points_at_loopback(target):
    port = target.server.port
    rebound = f"attacker.example:{port}"
    with client(target) as c:
        response = c.post(
            "/api/dev/token",
            json={"name": "eve", "admin": True},
            headers={"Host": rebound, "Origin": f"http://{rebound}"},
        )
    assert_error_shape(response, 403, "forbidden")
    assert "access_token" not in response.text


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_dev_sign_in_still_answers_its_own_page(target, host):
    here = f"{host}:{target.server.port}"
    with client(target) as c:
        response = c.post(
            "/api/dev/token",
            json={"name": "giulia"},
            headers={"Host": here, "Origin": f"http://{here}"},
        )
    assert response.status_code == 200 and response.json()["sub"] == "dev|giulia"


def test_dev_sign_in_refuses_a_loopback_name_on_another_port(target):
    with client(target) as c:
        response = c.post("/api/dev/token", json={"name": "eve"}, headers={"Host": "localhost:1"})
    assert_error_shape(response, 403, "forbidden")


# --- 2. Header values that are not UTF-8 ---


@pytest.mark.parametrize("name", [b"x-vercel-id", b"x-request-id", b"accept-language", b"origin"])
@pytest.mark.parametrize(
    ("method", "path", "authorized"),
    [("GET", "/api/health", False), ("GET", "/api/history", True), ("GET", "/api/nope", False)],
)
def test_a_header_that_is_not_utf8_is_ignored(target, name, method, path, authorized):
    headers = [(name, b"\xff\xfe\x80")]
    if authorized:
        headers.append((b"authorization", f"Bearer {target.token()}".encode()))
    with client(target) as c:
        response = c.request(method, path, headers=headers)
    assert response.status_code == (404 if path == "/api/nope" else 200), response.text[:300]
    assert response.headers["content-type"].startswith("application/json")
    request_id = response.headers["x-request-id"]
    assert request_id.isascii() and "\ufffd" not in request_id


# --- 3. Non-finite numbers in JSON ---


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_number_is_a_422_naming_its_field(target, literal):
    raw = b'{"query": "ciao", "chat_history": %s}' % literal.encode()
    response = post_json(target, "/api/stream_query", raw, **target.headers())
    assert_error_shape(response, 422, "invalid_request")
    assert "chat_history" in response.json()["message"]


@pytest.mark.parametrize("literal", ["NaN", "1e400"])
def test_a_non_finite_number_in_a_quiz_answer_is_a_422(target, literal):
    raw = b'{"capitolo": %s, "numero": 1, "risposta": "a"}' % literal.encode()
    response = post_json(target, "/api/quiz/answers", raw, **target.headers())
    assert_error_shape(response, 422, "invalid_request")
    assert "capitolo" in response.json()["message"]


# --- 4. Deep JSON ---


@pytest.mark.parametrize("depth", [40, 1000, 30_000])  # 60 KB: under every route's limit
def test_deep_json_is_a_422_on_every_parsing_route(target, depth):
    deep = b"[" * depth + b"]" * depth
    triage = target.headers(permissions=["tasks:email_triage"])
    for path, headers in (
        ("/api/stream_query", target.headers()),
        ("/api/tasks/email_triage", triage),
        ("/api/tasks/email_triage/batch", triage),
        ("/api/quiz/answers", target.headers()),
    ):
        response = post_json(target, path, deep, **headers)
        assert_error_shape(response, 422, "invalid_request")


# --- 5. A huge webhook timestamp ---


@pytest.mark.parametrize("timestamp", ["9" * 5000, "1" * 400, "1e9", "-1"])
def test_a_webhook_timestamp_that_is_not_unix_seconds_is_refused(target, timestamp):
    body = b"{}"
    headers = {
        webhook.TIMESTAMP_HEADER: timestamp,
        webhook.SIGNATURE_HEADER: webhook.signature(WEBHOOK_SECRET, timestamp, body),
    }
    response = post_json(target, "/api/update_docs", body, **headers)
    assert_error_shape(response, 401, "invalid_signature")
    assert timestamp[:50] not in response.text


# --- 6. A batch made of unknown keys, counted before any model is built ---


def test_a_batch_of_380000_keys_is_refused_without_holding_the_server(target):
    keys = ",".join(f'"k{n}":0' for n in range(380_000))
    raw = b'{"inputs": [{' + keys.encode() + b"}]}"
    assert len(raw) > 3_500_000
    headers = target.headers(permissions=["tasks:email_triage"])
    before, _ = target.server.memory_mb()
    with client(target) as c, httpx.Client(base_url=target.url, timeout=TIMEOUT) as other:
        started = time.monotonic()
        response = c.post(
            "/api/tasks/email_triage/batch",
            content=raw,
            headers={**headers, "Content-Type": "application/json"},
        )
        elapsed = time.monotonic() - started
        health = other.get("/api/health")
    assert_error_shape(response, 422, "invalid_request")
    # Refused by the count, before a model (and its 380,000 errors) was built.
    assert response.json()["detail"][0]["type"] == "json_too_many_items"
    assert health.status_code == 200
    after, _ = target.server.memory_mb()
    # It was 2.3 s and 600 MB: one C parse and a count now. Bounds far from both.
    assert after - before < 300, (before, after)
    assert len(response.content) < 4000
    print(f"380,000 keys refused in {elapsed:.2f} s; RSS {before:.0f} -> {after:.0f} MB")


# --- 11. Every error in one shape ---


def test_an_unknown_path_is_a_json_404_with_cors_and_a_request_id(target):
    with client(target) as c:
        response = c.get("/api/nope?x=1", headers={"Origin": "https://app.example"})
    assert_error_shape(response, 404, "not_found")
    assert response.headers["access-control-allow-origin"] in ("*", "https://app.example")


def test_a_wrong_method_is_a_json_405_that_names_the_allowed_ones(target):
    with client(target) as c:
        response = c.delete("/api/health", headers={"Origin": "https://app.example"})
    assert_error_shape(response, 405, "method_not_allowed")
    assert "GET" in response.headers["allow"]
    assert "DELETE" in response.json()["message"]
    assert response.headers["access-control-allow-origin"]


def test_a_body_that_is_not_json_is_a_json_422(target):
    response = post_json(target, "/api/quiz/answers", b"{nope", **target.headers())
    assert_error_shape(response, 422, "invalid_request")


# --- 12. The access log holds no query values ---


def test_the_access_log_keeps_paths_and_drops_query_values(target):
    secret, words = "acc3ss-t0ken-S3GRETO", "portanza-segreta-dello-studente"
    with client(target) as c:
        response = c.get(f"/api/history?access_token={secret}&q={words}", headers=target.headers())
    assert response.status_code == 200
    deadline = time.monotonic() + 30
    log = target.server.log()
    # The access line is written after the answer: wait for it, not for a fixed time.
    while "/api/history?access_token=" not in log and time.monotonic() < deadline:
        time.sleep(0.05)
        log = target.server.log()
    assert "/api/history?access_token=…&q=…" in log
    assert secret not in log and words not in log
    json.dumps(log)  # the log is text we can carry

"""Logs: JSON lines that survive a runtime's own handlers, a request id on every line and in
the response, one summary line per turn with no query text and no token."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from mangum import Mangum

from aircoach.logs import APP_LOGGER, JsonFormatter, configure_logging, log_fields
from aircoach.stages import STAGES
from tests.helpers import app_with, asgi_client, served
from tests.lambda_events import chat_event, response_body
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.sse import parse_sse


@pytest.fixture
def pristine_logging() -> Iterator[logging.Handler]:
    """A root logger as the Lambda runtime leaves it (its own handler, level WARNING); the
    logging state is restored afterwards, so that other tests' caplog keeps working."""
    root, app_logger = logging.getLogger(), logging.getLogger(APP_LOGGER)
    saved = (root.handlers[:], root.level, app_logger.handlers[:], app_logger.level)
    saved_propagate = app_logger.propagate
    runtime = logging.Handler()
    runtime.records = []  # type: ignore[attr-defined]
    runtime.emit = runtime.records.append  # type: ignore[method-assign]
    root.handlers[:] = [runtime]
    root.setLevel(logging.WARNING)
    yield runtime
    root.handlers[:], app_logger.handlers[:] = saved[0], saved[2]
    root.setLevel(saved[1])
    app_logger.setLevel(saved[3])
    app_logger.propagate = saved_propagate


def json_lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


async def test_json_lines_reach_stderr_past_the_runtimes_handler(
    settings, auth, capsys, pristine_logging
):
    """On Lambda the runtime owns the root logger at WARNING: basicConfig did nothing there,
    and the INFO lines were dropped. Now each is one JSON object, written once."""
    json_settings = settings.model_copy(update={"log_format": "json"})
    script = Script([call("domanda_teoria", capitolo=3)])
    app = app_with(json_settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query",
            json={"query": "Dammi una domanda del capitolo 3 SEGRETO"},
            headers={**auth(), "X-Request-ID": "req-abc.123"},
        )
    token = auth()["Authorization"].removeprefix("Bearer ")
    err = capsys.readouterr().err
    lines = json_lines(err)
    assert len(lines) == len(err.strip().splitlines())  # nothing but JSON objects
    assert {line["request_id"] for line in lines} == {"req-abc.123"}
    assert pristine_logging.records == []  # not repeated by the runtime's handler
    (summary,) = [line for line in lines if line.get("event") == "turn"]
    done = parse_sse(response.text)[-1]
    assert response.headers["X-Request-ID"] == done["request_id"] == "req-abc.123"
    assert summary["turn_id"] == done["turn_id"]
    assert {k: summary[k] for k in ("user", "prompt_version", "model", "tools", "outcome")} == {
        "user": "user-1",
        "prompt_version": done["prompt_version"],
        "model": "scripted",
        "tools": ["domanda_teoria"],
        "outcome": "ok",
    }
    assert summary["stored"] == "stored" and summary["errors"] == []
    assert isinstance(summary["latency_ms"], int) and summary["level"] == "INFO"
    assert "SEGRETO" not in err and token not in err  # no query text, no token


async def test_text_lines_go_through_the_root_logger(settings, client, auth, script, caplog):
    script([text("ciao")])
    with caplog.at_level(logging.INFO, logger=APP_LOGGER):
        response = await client.post("/api/stream_query", json={"query": "Saluta"}, headers=auth())
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("turn ")]
    turn_id = parse_sse(response.text)[-1]["turn_id"]
    assert f"turn user=user-1 turn_id={turn_id} " in line
    assert " outcome=ok " in line and " tools=- " in line and "Saluta" not in line


def test_configuring_twice_keeps_one_handler(settings, pristine_logging):
    json_settings = settings.model_copy(update={"log_format": "json"})
    for _ in range(3):
        configure_logging(json_settings)
    assert len(logging.getLogger(APP_LOGGER).handlers) == 1
    configure_logging(settings)  # back to text: lines go to the root's (runtime's) handler
    app_logger = logging.getLogger(APP_LOGGER)
    assert app_logger.handlers == [] and app_logger.propagate
    logging.getLogger("aircoach.test").info("through the runtime")
    assert [r.getMessage() for r in pristine_logging.records] == ["through the runtime"]


def test_without_handlers_the_root_gets_ours(settings, pristine_logging, capsys):
    logging.getLogger().handlers.clear()
    configure_logging(settings.model_copy(update={"log_format": "json"}))
    logging.getLogger("httpx").info("HTTP Request: GET https://x/?key=1")  # dropped
    logging.getLogger("somelib").warning("disk almost full")
    (line,) = json_lines(capsys.readouterr().err)
    assert (line["logger"], line["msg"], line["level"]) == (
        "somelib",
        "disk almost full",
        "WARNING",
    )


def test_the_task_worker_logs_like_the_http_entries(
    monkeypatch, data_dir, pristine_logging, capsys
):
    """The SQS worker called basicConfig, which does nothing on Lambda (the runtime's handler
    is there): its INFO lines were lost, and none was JSON."""
    from aircoach.entry.tasks_worker import worker_from_environment

    monkeypatch.chdir(data_dir)  # no .env
    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.setenv("LOG_FORMAT", "json")
    monkeypatch.setenv("LOG_LEVEL", "INFO")
    worker_from_environment()
    logging.getLogger("aircoach.tasks.engine").info("task_run status=ok")
    lines = [
        line for line in json_lines(capsys.readouterr().err) if line["msg"] == "task_run status=ok"
    ]
    assert [(line["logger"], line["level"]) for line in lines] == [
        ("aircoach.tasks.engine", "INFO")
    ]
    assert pristine_logging.records == []  # not wrapped or repeated by the runtime's handler


@pytest.mark.integration  # a real uvicorn server on loopback
def test_under_serve_uvicorns_own_lines_are_json_too(settings, pristine_logging, capsys):
    """uvicorn's default logging config gave its loggers handlers of their own: its lifecycle
    and access lines were plain text in JSON mode."""
    logging.getLogger().handlers.clear()  # a plain process, as under `serve`
    app = app_with(settings.model_copy(update={"log_format": "json"}))
    with served(app, log_level="info") as url:
        response = httpx.get(
            f"{url}/api/health?access_token=s3cr3t", headers={"X-Request-ID": "req-serve.1"}
        )
    assert response.status_code == 200
    err = capsys.readouterr().err
    lines = json_lines(err)
    assert len(lines) == len(err.strip().splitlines())  # nothing but JSON objects
    (access,) = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert (
        access["request_id"] == "req-serve.1" and "GET /api/health?access_token=" in access["msg"]
    )
    assert "s3cr3t" not in err
    assert any(line["logger"] == "uvicorn.error" for line in lines)  # "Started server process"


@pytest.mark.parametrize(
    ("given", "echoed"),
    [
        ("abc-123", "abc-123"),
        ("-trace/7+=:.", "-trace/7+=:."),  # any character of the documented alphabet first
        ("x" * 128, "x" * 128),
        ("x" * 129, None),  # too long: replaced, never echoed
        ("two words", None),
        ('"><script>', None),
    ],
)
async def test_the_request_id_header_is_taken_only_when_sane(client, given, echoed):
    response = await client.get("/api/health", headers={"X-Request-ID": given})
    request_id = response.headers["X-Request-ID"]
    if echoed:
        assert request_id == echoed
    else:
        assert request_id != given and len(request_id) == 32


async def test_every_response_gets_an_id_even_errors(client):
    first = await client.get("/api/history")
    second = await client.get("/api/history")
    assert first.status_code == 401
    assert first.headers["X-Request-ID"] != second.headers["X-Request-ID"]


async def test_cors_lets_browsers_read_the_request_id(client):
    response = await client.get("/api/health", headers={"Origin": "https://app.example"})
    assert "x-request-id" in response.headers["access-control-expose-headers"].lower()


def test_lambda_invocations_use_the_platforms_request_id(settings, token):
    """Mangum hands the Lambda context to the app: its id is the one in the runtime's
    START/END/REPORT lines, so the app's lines join them in CloudWatch."""
    handler = Mangum(app_with(settings), lifespan="off")
    context = SimpleNamespace(aws_request_id="8f5c6b5e-lambda")
    response = handler(
        chat_event(token("lambda-user"), "Dammi una domanda del capitolo 3"), context
    )
    assert response["headers"]["x-request-id"] == "8f5c6b5e-lambda"
    assert parse_sse(response_body(response))[-1]["request_id"] == "8f5c6b5e-lambda"
    # Without a context (API Gateway's id is the next best)
    response = handler(chat_event(token("lambda-user"), "Dammi una domanda del capitolo 4"), {})
    assert response["headers"]["x-request-id"] == "req"


async def test_vercel_id_is_used_when_the_client_sends_none(client):
    response = await client.get("/api/health", headers={"x-vercel-id": "fra1::iad1::abc-1700"})
    assert response.headers["X-Request-ID"] == "fra1::iad1::abc-1700"


async def test_the_json_answer_carries_the_request_id(client, auth, script):
    script([text("ciao")])
    response = await client.post(
        "/api/stream_query",
        json={"query": "Saluta", "stream": False},
        headers={**auth(), "X-Request-ID": "json-1"},
    )
    assert response.json()["request_id"] == response.headers["X-Request-ID"] == "json-1"


async def test_the_summary_line_says_where_the_turn_spent_its_time(
    settings, auth, capsys, pristine_logging
):
    """Every stage of the turn is on its summary line, in ms; a stage the turn went through
    counts more than nothing, one it skipped counts 0."""
    json_settings = settings.model_copy(update={"log_format": "json"})
    # A tool call that fails (no chapter 99): the model answers, and the guard checks it.
    script = Script([call("domanda_teoria", capitolo=99), text("Il capitolo 99 non esiste.")])
    app = app_with(json_settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query",
            json={"query": "Dammi una domanda del capitolo 99", "user_data": False},
            headers=auth(),
        )
    assert response.status_code == 200
    (summary,) = [
        line for line in json_lines(capsys.readouterr().err) if line.get("event") == "turn"
    ]
    stages = {k: v for k, v in summary.items() if k.endswith("_ms") and k != "latency_ms"}
    assert list(stages) == [f"{stage}_ms" for stage in STAGES]
    ran = {k for k, v in stages.items() if v > 0}
    # `user_data: false`: no profile nor progress sections; the long-term memory still runs.
    assert ran == {f"{stage}_ms" for stage in STAGES} - {"user_data_ms"}
    assert stages["user_data_ms"] == 0
    assert all(v < summary["latency_ms"] + 1 for v in stages.values())


def test_a_list_item_cannot_pass_for_another_field_of_the_text_line(caplog):
    """`retrieved` holds titles a web search returned: in the text line, an item with a space,
    `=` or `,` is quoted like any string value, so `outcome=error` in a page's title is not
    read as the turn's outcome."""
    logger = logging.getLogger(f"{APP_LOGGER}.test")
    title = "web_search:Esame PPL, outcome=error"
    with caplog.at_level(logging.INFO, logger=APP_LOGGER):
        log_fields(logger, "turn", {"retrieved": [title, "kb_search:3.1|3.2"], "outcome": "ok"})
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == f"turn retrieved={title!r},kb_search:3.1|3.2 outcome=ok"


def test_the_text_line_stays_one_line_whatever_a_value_holds(caplog):
    """A value with a line break, a tab or another control character (a web page's title in
    `retrieved`, a token's `sub`) was written as it is: the text line broke in two, and the
    second half could read as a line of its own. Such a value is quoted like one with a
    space, its control characters escaped."""
    logger = logging.getLogger(f"{APP_LOGGER}.test")
    forged = "\n2025-01-01\tERROR\taircoach.turn\t[req]:\tturn\tforged"
    fields = {
        "user": "auth0|1\r\n",
        "retrieved": [f"web_search:Esame{forged}", "web_search:a\u2028b", "kb_search:3.1"],
        "outcome": "ok",
    }
    with caplog.at_level(logging.INFO, logger=APP_LOGGER):
        log_fields(logger, "turn", fields)
    (line,) = [r.getMessage() for r in caplog.records]
    assert len(line.splitlines()) == 1 and line.isprintable()
    assert line.startswith("turn user='auth0|1\\r\\n' retrieved='web_search:Esame\\n2025")
    assert line.endswith(",kb_search:3.1 outcome=ok")


def test_a_json_line_stays_one_line_for_every_line_splitter():
    """JSON escapes `\\n` and `\\r`, but wrote U+2028, U+0085 and the other characters that
    `str.splitlines` (and log tools built on it) break lines at as they are."""
    title = "web_search:a\u2028b\x85c\u2029d\x1ce"
    record = logging.LogRecord("aircoach.turn.turn", logging.INFO, __file__, 1, "turn", (), None)
    record.fields = {"event": "turn", "retrieved": [title]}
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert json.loads(line)["retrieved"] == [title]


async def test_a_refusal_is_logged_with_its_reason_and_never_its_input(client, auth, caplog):
    """A 401, 403 or 422 logged nothing of its own (on Lambda and Vercel, nothing at all): a
    burst of refusals after an Auth0 change could not be told apart."""
    secret = "s3cr3t-" * 800
    with caplog.at_level(logging.INFO, logger="aircoach"):
        bad = await client.get("/api/history", headers={"Authorization": "Bearer abc.def.ghi"})
        forbidden = await client.get("/api/tasks/runs", headers=auth())
        long = await client.post("/api/stream_query", json={"query": secret}, headers=auth())
    assert (bad.status_code, forbidden.status_code, long.status_code) == (401, 403, 422)
    lines = [r.getMessage() for r in caplog.records]
    assert any("'/api/history' -> 401 invalid_token: " in line for line in lines), lines
    assert any("'/api/tasks/runs' -> 403 " in line and "tasks:review" in line for line in lines)
    assert "POST '/api/stream_query' -> 422 invalid_request: body.query string_too_long" in lines
    assert not any("s3cr3t" in line or "abc.def" in line for line in lines)


async def test_a_long_path_is_cut_in_every_log_line(client, auth, caplog):
    """A 15 KB id in the path was written whole into two lines of a refusal (the app's and
    uvicorn's access line), 30 KB of log for one anonymous request."""
    from aircoach.text import MAX_LOGGED_PATH, redact_query

    long_id = "a" * 15_000
    with caplog.at_level(logging.INFO, logger="aircoach"):
        refused = await client.get(f"/api/turns/{long_id}", headers=auth())
        unknown = await client.get(f"/api/tasks/runs/{long_id}", headers=auth())
    assert refused.status_code == unknown.status_code == 422  # an id past its length
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all(len(line) < 2 * MAX_LOGGED_PATH + 200 for line in lines), lines
    assert any(f"'/api/turns/{'a' * 100}" in line for line in lines)
    access = redact_query(f"/api/nope/{long_id}?token=s3cr3t")
    assert access == f"/api/nope/{long_id[: MAX_LOGGED_PATH - len('/api/nope/')]}…?token=…"

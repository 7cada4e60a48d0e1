"""Traces and metrics of the app, read from the SDK's in-memory exporter and reader: the span
tree of a tool turn, a quiz turn, a task run and a failed model call; the metric points after
a few turns; JSON log lines joined to their trace; no secret or user text in any attribute."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from typing import Any

from langchain_core.messages import AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aircoach.entry.tasks_worker import SqsTaskWorker
from aircoach.logs import APP_LOGGER, JsonFormatter
from aircoach.services import Services
from aircoach.tasks.contacts import seed_demo_contacts
from aircoach.telemetry.otel import OtelTelemetry
from tests.clock import quota_clock
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedChatModel, call, text
from tests.telemetry.conftest import Traced, traced_app

STAGES = ["auth", "admission", "prompt", "user_data", "history", "agent_build"]


class _Reporting(ScriptedChatModel):
    """Streams like a provider does: usage and finish reason on the last chunk."""

    usage: dict[str, int]

    async def _astream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any):
        async for chunk in super()._astream(messages, stop, run_manager, **kw):
            yield chunk
        last = AIMessageChunk(
            content="", usage_metadata=self.usage, response_metadata={"finish_reason": "STOP"}
        )
        yield ChatGenerationChunk(message=last)


class _ReportingModels:
    def __init__(self, script: Script, usage: dict[str, int]):
        self.script, self.usage = script, usage

    async def models_for(self, tools: list[Any]) -> list[Any]:
        return [_Reporting(script=self.script, usage=self.usage)]


def _names(tree: list[tuple[int, str]], depth: int = 1) -> list[str]:
    return [name for d, name in tree if d == depth]


async def test_a_tool_turn_is_one_trace_with_its_stages_model_and_tool_spans(
    traced: Traced, client, auth
):
    response = await client.post(
        "/api/stream_query", json={"query": "Cos'è la densità dell'aria?"}, headers=auth()
    )
    assert response.status_code == 200
    [root] = traced.roots()
    assert root.name == "POST /api/stream_query"
    assert root.attributes["http.route"] == "/api/stream_query"
    assert root.attributes["http.response.header.x_turn_id"] == (response.headers["X-Turn-ID"],)
    assert root.attributes["http.response.header.x_request_id"] == (
        response.headers["X-Request-ID"],
    )
    tree = traced.tree(root)
    top = _names(tree)
    for stage in [*STAGES, "model", "tools", "grounding", "persist"]:
        assert stage in top, (stage, tree)
    assert "encode" not in top  # once per event: no span
    assert top.index("auth") < top.index("model") < top.index("tools") < top.index("persist")
    assert _names(tree, 2) == ["chat offline", "execute_tool kb_search", "chat offline"]
    spans = {s.name: s for s in traced.spans()}
    model = spans["chat offline"]
    assert model.attributes["gen_ai.operation.name"] == "chat"
    assert model.attributes["gen_ai.request.model"] == "offline"
    assert model.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert model.attributes["gen_ai.response.time_to_first_token"] > 0
    tool = spans["execute_tool kb_search"]
    assert dict(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "kb_search",
        "aircoach.tool.status": "ok",
    }


async def test_a_quiz_turn_traces_the_quiz_tool(traced: Traced, client, auth):
    events = await chat(client, auth(), "Fammi una domanda di teoria sul capitolo 3")
    assert events[0]["tool_name"] == "domanda_teoria"
    [root] = traced.roots()
    tree = traced.tree(root)
    assert "execute_tool domanda_teoria" in _names(tree, 2)
    assert _names(tree).count("model") >= 1 and "persist" in _names(tree)


async def test_a_failed_model_call_is_an_error_span_and_the_turn_still_answers(
    traced: Traced, client, auth, script
):
    script([RuntimeError("model down: quoted user words")])
    events = await chat(client, auth(), "Ciao")
    assert [e["type"] for e in events][-1] == "done"
    assert any(e["type"] == "error" for e in events)
    [root] = traced.roots()
    failed = [s for s in traced.spans() if s.name == "chat scripted"]
    assert failed and all(s.status.status_code.name == "ERROR" for s in failed)
    assert failed[0].attributes["error.type"] == "RuntimeError"
    stage = next(s for s in traced.spans() if s.name == "model")
    assert stage.attributes["error.type"] == "ModelUnavailable"  # after the failover
    assert traced.tree(root)[0] == (1, "auth")
    assert "persist" in _names(traced.tree(root))  # the turn is stored all the same
    assert traced.points("aircoach.turns") == [
        (
            {
                "aircoach.turn.status": "error",
                "gen_ai.request.model": "scripted",
                "aircoach.turn.stored": "stored",
                "error.type": "model_unavailable",
            },
            1,
        )
    ]


def _summary(caplog) -> dict[str, Any]:
    [line] = [r for r in caplog.records if r.getMessage().startswith("turn user=")]
    return {"text": line.getMessage(), **line.fields}


async def test_a_turn_whose_model_fails_says_so_in_its_line_metric_and_root_span(
    traced: Traced, client, auth, script, caplog
):
    """The provider failed (every model of the failover): the reason beside the code that the
    client gets, the same reason on the turn counter and on the request's span."""
    script([RuntimeError("model down")])
    with caplog.at_level(logging.INFO, logger=APP_LOGGER):
        events = await chat(client, auth(), "Ciao")
    assert [e["code"] for e in events if e["type"] == "error"] == ["model_unavailable"]
    summary = _summary(caplog)
    assert summary["errors"] == ["model_unavailable"]
    assert summary["reasons"] == ["model_unavailable"]
    assert " errors=model_unavailable reasons=model_unavailable " in summary["text"]
    [(labels, _)] = traced.points("aircoach.turns")
    assert labels["error.type"] == "model_unavailable"
    [root] = traced.roots()
    assert root.attributes["aircoach.turn.status"] == "error"
    assert root.attributes["error.type"] == "model_unavailable"


async def test_a_turn_cut_by_the_deadline_says_so_in_its_line_metric_and_root_span(
    settings, auth, caplog
):
    """TURN_TIMEOUT_S cut it: the client still reads `model_unavailable`, the operator reads
    `turn_timeout` in the summary line, on the turn counter and on the request's span."""
    cut = settings.model_copy(update={"turn_timeout_s": 0.05})  # the timeout is the outcome
    app = app_with(cut, models=_HangingModels())
    traced = traced_app(app, cut)
    with caplog.at_level(logging.INFO, logger=APP_LOGGER):
        async with asgi_client(app) as client:
            events = await chat(client, auth(), "Ciao")
    assert [e["code"] for e in events if e["type"] == "error"] == ["model_unavailable"]
    summary = _summary(caplog)
    assert summary["outcome"] == "error" and summary["errors"] == ["model_unavailable"]
    assert summary["reasons"] == ["turn_timeout"]
    assert " errors=model_unavailable reasons=turn_timeout " in summary["text"]
    assert traced.points("aircoach.turns") == [
        (
            {
                "aircoach.turn.status": "error",
                "gen_ai.request.model": "scripted",
                "aircoach.turn.stored": "stored",
                "error.type": "turn_timeout",
            },
            1,
        )
    ]
    [root] = traced.roots()
    assert root.attributes["aircoach.turn.status"] == "error"
    assert root.attributes["error.type"] == "turn_timeout"
    traced.telemetry.shutdown()


async def test_an_answered_turn_carries_no_error_type(traced: Traced, client, auth, script):
    script([text("Ciao!")])
    await chat(client, auth(), "Ciao")
    [(labels, _)] = traced.points("aircoach.turns")
    assert "error.type" not in labels
    [root] = traced.roots()
    assert root.attributes["aircoach.turn.status"] == "ok"
    assert "error.type" not in root.attributes


async def test_a_turn_the_store_refused_is_counted_as_spooled(
    traced: Traced, settings, client, auth, script
):
    """The store refused the turn, which waits in the dead-letter spool: it was counted
    `aircoach.turn.status=ok` like any other, and only a log line said where it went."""
    from tests.store.test_dead_letters import refuse_writes

    script([text("Salvata."), text("Nel file di attesa.")])
    await chat(client, auth(), "Prima")
    refuse_writes(settings.sqlite_file)
    await chat(client, auth(), "Seconda")
    assert sorted(
        (labels["aircoach.turn.stored"], count) for labels, count in traced.points("aircoach.turns")
    ) == [("spooled", 1), ("stored", 1)]
    assert [root.attributes["aircoach.turn.stored"] for root in traced.roots()] == [
        "stored",
        "spooled",
    ]


class _Hanging(ScriptedChatModel):
    """A model whose reply never comes: the turn's deadline or a cancel ends the call."""

    started: Any = None

    async def _astream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any):
        self.started.set()
        await asyncio.Event().wait()
        yield  # never reached: makes this an async generator


class _HangingModels:
    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def models_for(self, tools: list[Any]) -> list[Any]:
        return [_Hanging(script=Script([]), started=self.started)]


async def test_a_model_call_cut_by_the_turn_timeout_ends_its_span_as_an_error(settings, auth):
    """LangChain reports no end for a model call whose task is cancelled (TURN_TIMEOUT_S, a
    cancel): its `chat` span stayed open, so it was never exported (until 256 later calls
    pushed it out, as `abandoned`, in another request's export). It ends with its stage."""
    cut = settings.model_copy(update={"turn_timeout_s": 0.05})  # the timeout is the outcome
    app = app_with(cut, models=_HangingModels())
    traced = traced_app(app, cut)
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "Ciao")
    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    stage = next(s for s in traced.spans() if s.name == "model")
    [call] = [s for s in traced.spans() if s.name == "chat scripted"]
    assert call.parent.span_id == stage.context.span_id
    assert call.status.status_code.name == "ERROR"
    assert call.attributes["error.type"] == stage.attributes["error.type"] == "CancelledError"
    assert call.end_time <= stage.end_time
    assert traced.points("gen_ai.client.operation.duration") == [
        ({"gen_ai.request.model": "scripted", "error.type": "CancelledError"}, 1)
    ]
    traced.telemetry.shutdown()


async def test_tokens_and_finish_reason_of_a_model_that_reports_them(
    traced: Traced, client, auth, script, models
):
    usage = {"input_tokens": 120, "output_tokens": 7, "total_tokens": 127}
    models.provider = _ReportingModels(script([text("Ciao!")]), usage)
    await chat(client, auth(), "Ciao")
    span = next(s for s in traced.spans() if s.name == "chat scripted")
    assert span.attributes["gen_ai.usage.input_tokens"] == 120
    assert span.attributes["gen_ai.usage.output_tokens"] == 7
    assert span.attributes["gen_ai.response.finish_reasons"] == ("STOP",)
    tokens = {a["gen_ai.token.type"]: v for a, v in traced.points("gen_ai.client.token.usage")}
    assert tokens == {"input": 1, "output": 1}  # one recorded call of each (histogram counts)


async def test_a_task_run_traces_its_attempt_and_counts_its_outcome(settings, auth):
    app = app_with(settings)
    traced = traced_app(app, settings)
    await seed_demo_contacts(app.state.services.task_stores.contacts)
    mail = {"subject": "Lezione", "from": "sara.conti@outlook.it", "body": "C'è nebbia?"}
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/tasks/email_triage", json=mail, headers=auth(permissions=["tasks:email_triage"])
        )
    assert response.status_code == 200, response.text
    [root] = traced.roots()
    assert root.attributes["http.route"] == "/api/tasks/{task}"
    attempt = next(s for s in traced.spans() if s.name == "task_attempt")
    assert attempt.parent.span_id == root.context.span_id
    assert attempt.attributes["gen_ai.request.model"] == "offline-rules"
    assert traced.points("aircoach.task.runs") == [
        ({"aircoach.task": "email_triage", "outcome": "ok"}, 1)
    ]
    traced.telemetry.shutdown()


async def test_metric_points_after_a_few_turns(settings, auth):
    app = app_with(settings.model_copy(update={"quota_turns_per_minute": 3}), clock=quota_clock())
    traced = traced_app(app, settings)
    async with asgi_client(app) as client:
        await chat(client, auth(), "Cos'è la densità dell'aria?")
        await chat(client, auth(), "Fammi una domanda di teoria sul capitolo 3")
        third = await chat(client, auth(), "Che cos'è la portanza?")
        refused = await client.post("/api/stream_query", json={"query": "x"}, headers=auth())
        assert refused.status_code == 429
        turn_id = third[-1]["turn_id"]
        voted = await client.post(
            f"/api/turns/{turn_id}/feedback", json={"voto": "utile"}, headers=auth()
        )
        assert voted.status_code == 200, voted.text
    assert traced.points("aircoach.turns") == [
        (
            {
                "aircoach.turn.status": "ok",
                "gen_ai.request.model": "offline",
                "aircoach.turn.stored": "stored",
            },
            3,
        )
    ]
    [(labels, count)] = traced.points("aircoach.turn.duration")
    assert count == 3 and labels["aircoach.turn.status"] == "ok"
    assert traced.points("aircoach.turn.time_to_first_event") == [
        ({"http.route": "/api/stream_query"}, 3)
    ]
    tools = {a["gen_ai.tool.name"]: v for a, v in traced.points("aircoach.tool.calls")}
    assert tools["kb_search"] >= 1 and tools["domanda_teoria"] == 1
    assert sum(v for _, v in traced.points("aircoach.grounding.verdicts")) == 3
    assert traced.points("aircoach.feedback") == [({"aircoach.feedback.vote": "utile"}, 1)]
    assert traced.points("aircoach.quota.refusals") == [({"http.route": "/api/stream_query"}, 1)]
    [(labels, count)] = traced.points("gen_ai.client.operation.duration")
    # Two model calls for each answer from the manual (the search, then the answer), one for
    # the quiz question (the tool's result is the answer).
    assert labels == {"gen_ai.request.model": "offline"} and count == 5
    traced.telemetry.shutdown()


async def test_json_log_lines_carry_the_trace_and_span_ids(traced: Traced, client, auth):
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(APP_LOGGER)
    logger.addHandler(handler)
    try:
        await chat(client, auth(), "Ciao")
    finally:
        logger.removeHandler(handler)
    [root] = traced.roots()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    turn = next(line for line in lines if line.get("event") == "turn")
    assert turn["trace_id"] == format(root.context.trace_id, "032x")
    span_ids = {format(s.context.span_id, "016x") for s in traced.spans()}
    assert all(line["span_id"] in span_ids for line in lines if "trace_id" in line)


SECRET = "webhook-s3cret-CANARY"
TOOL_KEY = "K3Y-S3GRETA-CANARY"
WORDS = "ZANZIBARCANARY"


async def test_no_span_or_metric_attribute_holds_a_secret_token_or_user_text(
    settings, models, token, script
):
    """The canaries of the security tests (a webhook secret, a tool key, a bearer token, the
    student's words in the body and in a query string) appear in no exported attribute."""
    app = app_with(
        settings.model_copy(
            update={"update_docs_secret": SECRET, "tool_env": {"TOOL_METEO_KEY": TOOL_KEY}}
        ),
        models=models,
    )
    traced = traced_app(app, settings)
    bearer = token("canary-user")
    headers = {"Authorization": f"Bearer {bearer}"}
    script([call("domanda_teoria", capitolo=3)])
    async with asgi_client(app) as client:
        await chat(client, headers, f"Parlami di {WORDS}")
        history = await client.get(f"/api/history?q={WORDS}&access_token={bearer}", headers=headers)
        assert history.status_code == 200
        await client.post("/api/update_docs", headers=headers)
    canaries = [SECRET, TOOL_KEY, bearer, WORDS, "canary-user"]
    exported: list[Any] = []
    for span in traced.spans():
        exported += [span.name, *span.attributes.items(), span.status.description]
        exported += [e.attributes for e in span.events]
        exported += [span.resource.attributes]
    for name in _metric_names(traced):
        exported += traced.points(name)
    text_seen = repr(exported)
    assert "http.route" in text_seen and "/api/history" in text_seen  # the scan saw them
    assert [c for c in canaries if c in text_seen] == []
    target = next(s for s in traced.spans() if s.attributes.get("http.route") == "/api/history")
    assert target.attributes["http.url"] == "http://t/api/history?q=…&access_token=…"
    assert target.attributes["http.target"] == "/api/history"


def _metric_names(traced: Traced) -> set[str]:
    data = traced.metrics_in.get_metrics_data()
    return {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}


async def test_a_console_trace_is_a_compact_tree(settings, client, auth, capsys):
    from aircoach.telemetry.otel import CompactConsole, OtelTelemetry

    printed = io.StringIO()
    app = app_with(settings)
    telemetry = OtelTelemetry(
        settings, span_exporter=CompactConsole(printed), metric_reader=None, batch=False
    )
    telemetry.instrument(app)
    async with asgi_client(app) as c:
        await chat(c, auth(), "Cos'è la densità dell'aria?")
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith("trace ") and "POST /api/stream_query" in lines[0]
    assert " 200 turn=" in lines[0]
    assert any(line.startswith("    execute_tool kb_search ") for line in lines)
    assert len(lines) < 30  # a trace is a screenful, not a page per span
    telemetry.shutdown()


async def test_text_answer_turn(traced: Traced, client, auth, script):
    script([text("Ciao!")])
    await chat(client, auth(), "Ciao")
    [root] = traced.roots()
    assert _names(traced.tree(root), 2) == ["chat scripted"]


async def test_task_numbers_and_the_review_queue_read_from_the_store(settings, auth):
    """Runs by outcome, attempts, duration, and the review queue's size as the store counts it:
    a second app instance on the same store sees the queue the first one filled."""
    doubtful = settings.model_copy(update={"task_review_below": {"email_triage": 0.95}})
    first, second = app_with(doubtful), app_with(settings)
    traced_first, traced_second = traced_app(first, doubtful), traced_app(second, settings)
    run = {"permissions": ["tasks:email_triage"]}
    mail = {"subject": "Lezione", "from": "a@b.it", "body": "Vorrei prenotare una lezione."}
    async with asgi_client(first) as client:
        for n in range(2):
            response = await client.post(
                "/api/tasks/email_triage", json={**mail, "subject": f"L{n}"}, headers=auth(**run)
            )
            assert response.json()["low_confidence"] is True
    assert traced_first.points("aircoach.task.runs") == [
        ({"aircoach.task": "email_triage", "outcome": "low_confidence"}, 2)
    ]
    assert traced_first.points("aircoach.task.attempts") == [({"aircoach.task": "email_triage"}, 2)]
    assert traced_first.points("aircoach.task.review_queue.size") == [
        ({"aircoach.task": "email_triage"}, 2)
    ]
    async with asgi_client(second) as client:
        queue = await client.get("/api/tasks/review", headers=auth(permissions=["tasks:review"]))
        review_id = queue.json()["items"][0]["review_id"]
        confirmed = await client.post(
            f"/api/tasks/review/{review_id}/resolve",
            json={"confirm": True},
            headers=auth(permissions=["tasks:review"]),
        )
        assert confirmed.status_code == 200, confirmed.text
    # The second instance never queued anything: its gauge is the store's count.
    assert traced_second.points("aircoach.task.review_queue.size") == [
        ({"aircoach.task": "email_triage"}, 1)
    ]
    assert traced_second.points("aircoach.task.runs") == []  # a reviewer's run is no task run
    [(_, age)] = traced_second.points("aircoach.task.review_queue.oldest_age")
    assert age >= 0
    traced_first.telemetry.shutdown()
    traced_second.telemetry.shutdown()


class _CountingFlush(OtelTelemetry):
    flushes = 0

    async def flush(self) -> None:
        self.flushes += 1
        await super().flush()


def test_an_sqs_batch_is_one_trace_flushed_per_run(settings):
    """The worker's root span, a span per message with its run's spans under it, and a flush
    after every run and before the handler returns."""
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    recorder = _CountingFlush(settings, span_exporter=exporter, metric_reader=reader, batch=False)
    worker = SqsTaskWorker(Services.build(settings), recorder)
    mail = {"subject": "Fattura", "from": "a@b.it", "body": "Non ho ricevuto la fattura."}
    records = [
        {"messageId": "m-1", "body": json.dumps({"task": "email_triage", "input": mail})},
        {"messageId": "m-2", "body": "{not json"},
    ]
    assert worker.handle({"Records": records}) == {"batchItemFailures": [{"itemIdentifier": "m-2"}]}
    assert recorder.flushes == 3  # after each message, and after the batch's root span
    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.parent is None]
    assert root.name == "sqs_batch" and root.attributes["messaging.batch.message_count"] == 2
    messages = {s.attributes["messaging.message.id"]: s for s in spans if s.name == "sqs_message"}
    assert {m.parent.span_id for m in messages.values()} == {root.context.span_id}
    attempt = next(s for s in spans if s.name == "task_attempt")
    assert attempt.parent.span_id == messages["m-1"].context.span_id
    assert messages["m-2"].attributes["error.type"] == "message_failed"
    points = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = [dict(p.attributes) for p in metric.data.data_points]
    assert points["aircoach.task.runs"] == [{"aircoach.task": "email_triage", "outcome": "ok"}]
    recorder.shutdown()

"""The OpenTelemetry side of `aircoach.telemetry`: the SDK's providers, the OTLP/HTTP (or
compact console) exporters, FastAPI's instrumentation, the app's instruments, and the flush
that serverless platforms need. Imported only when telemetry is on.

One trace per request: FastAPI's server span (route, status, `X-Request-ID` and `X-Turn-ID`
as captured response headers; never the query string), a span per stage of a chat turn
(`aircoach.stages`), a GenAI span per model call and per tool call (`telemetry.langchain`).

On Lambda and Vercel an instance may be frozen as soon as a response ends, with spans still in
the batch queue. With `OTEL_FLUSH_EACH_REQUEST` the last message of every response is held
back until the spans and metrics are exported, or `OTEL_FLUSH_TIMEOUT_MS` has passed: a slow
or dead collector costs a request that bound at most, and never fails it. The export runs on
one worker thread of ours (never the event loop, never anyio's pool): a flush still running
from an earlier request is waited on again, not doubled.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import anyio
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Span, StatusCode
from opentelemetry.util.re import parse_env_headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aircoach.settings import TelemetrySettings
from aircoach.telemetry.context import recording
from aircoach.text import redact_query

if TYPE_CHECKING:
    from aircoach.telemetry.langchain import GenAICallbacks

log = logging.getLogger(__name__)

# Seconds: where the turn latency and first-event histograms put their bucket edges.
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
_TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536, 262144)
# Attributes FastAPI's instrumentation may fill with the raw URL: a student's search words or
# a token travel in query strings.
_URL_ATTRIBUTES = ("http.target", "http.url", "url.full")


class OtelTelemetry:
    """The app's `Recorder` when telemetry is on (`aircoach.telemetry.instrument`)."""

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        span_exporter: SpanExporter,
        metric_reader: MetricReader | None,
        batch: bool = True,
    ):
        resource = Resource.create({"service.name": settings.otel_service_name})
        self.tracer_provider = TracerProvider(resource=resource)
        processor = (
            BatchSpanProcessor(span_exporter) if batch else SimpleSpanProcessor(span_exporter)
        )
        self.tracer_provider.add_span_processor(processor)
        readers = [metric_reader] if metric_reader is not None else []
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        self.tracer = self.tracer_provider.get_tracer("aircoach")
        self.flush_each_request = settings.otel_flush_each_request
        self.flush_timeout_s = settings.otel_flush_timeout_ms / 1000
        self._flusher: ThreadPoolExecutor | None = None
        self._flushing: Future[None] | None = None
        self._genai: GenAICallbacks | None = None  # once LangChain is loaded
        meter = self.meter_provider.get_meter("aircoach")
        self.turns = meter.create_counter(
            "aircoach.turns", unit="{turn}", description="Chat turns, by status and model."
        )
        self.turn_duration = meter.create_histogram(
            "aircoach.turn.duration",
            unit="s",
            description="A chat turn's latency, request to stored turn.",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.first_event = meter.create_histogram(
            "aircoach.turn.time_to_first_event",
            unit="s",
            description="Request to the first byte of a stream's first event.",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens per model call, by model and gen_ai.token.type.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.model_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="A model call's duration, by model.",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.tool_calls = meter.create_counter(
            "aircoach.tool.calls", unit="{call}", description="Tool calls, by tool and outcome."
        )
        self.verdicts = meter.create_counter(
            "aircoach.grounding.verdicts",
            unit="{turn}",
            description="The citation guard's verdict on answered turns.",
        )
        self.feedback = meter.create_counter(
            "aircoach.feedback", unit="{vote}", description="Feedback on turns, by vote."
        )
        self.quota_refusals = meter.create_counter(
            "aircoach.quota.refusals", unit="{request}", description="429s, by route."
        )
        self.task_runs = meter.create_counter(
            "aircoach.task.runs", unit="{run}", description="Task runs, by task and outcome."
        )
        self.task_attempts = meter.create_histogram(
            "aircoach.task.attempts",
            unit="{attempt}",
            description="Model attempts per task run, by task.",
            explicit_bucket_boundaries_advisory=[1, 2, 3, 4, 5, 6],
        )
        self.task_steps = meter.create_counter(
            "aircoach.task.fallback_steps",
            unit="{run}",
            description="Task runs that needed the shrunk request or the fallback model, by "
            "task and step.",
        )
        self.task_duration = meter.create_histogram(
            "aircoach.task.duration",
            unit="s",
            description="A task run's duration, by task and outcome.",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.task_tokens = meter.create_counter(
            "aircoach.task.tokens",
            unit="{token}",
            description="Tokens the task's models reported, by task and gen_ai.token.type.",
        )
        # Read from the store (an aggregation) after each run and review: the queue shared by
        # every instance, not what one instance happened to add and remove.
        self.review_queue = meter.create_gauge(
            "aircoach.task.review_queue.size",
            unit="{item}",
            description="Open items of the review queue, by task (read from the store).",
        )
        self.review_queue_age = meter.create_gauge(
            "aircoach.task.review_queue.oldest_age",
            unit="s",
            description="Age of the oldest open item of the review queue, by task.",
        )

    @classmethod
    def from_settings(cls, settings: TelemetrySettings) -> OtelTelemetry:
        if not settings.otel_exporter_otlp_endpoint:  # OTEL=console
            return cls(settings, span_exporter=CompactConsole(), metric_reader=None, batch=False)
        base = settings.otel_exporter_otlp_endpoint.rstrip("/")
        headers = dict(parse_env_headers(settings.otel_exporter_otlp_headers or "", liberal=True))
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics", headers=headers),
            export_interval_millis=settings.otel_metric_export_interval,
        )
        exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=headers)
        return cls(settings, span_exporter=exporter, metric_reader=reader)

    # --- wiring -----------------------------------------------------------------------------

    def instrument(self, app: FastAPI) -> None:
        """FastAPI's server spans and HTTP metrics, and our request scope around them."""
        FastAPIInstrumentor.instrument_app(
            app,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            server_request_hook=_without_query,
            exclude_spans=["receive", "send"],
            http_capture_headers_server_response=["X-Request-ID", "X-Turn-ID"],
        )
        app.state.telemetry = self  # for an operator's shell and the tests: flush, shutdown
        build_stack = app.build_middleware_stack

        def build_with_scope() -> ASGIApp:
            return RequestScope(build_stack(), self)

        app.build_middleware_stack = build_with_scope  # type: ignore[method-assign]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        if self._flusher is not None:
            self._flusher.shutdown(wait=False)

    # --- the Recorder -----------------------------------------------------------------------

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None) -> Iterator[Span]:
        self.hook_langchain()
        with self.tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as current:
            error = "abandoned"
            try:
                yield current
            except BaseException as exc:  # the type only: a message may quote user text
                error = type(exc).__qualname__
                current.set_attribute("error.type", error)
                current.set_status(StatusCode.ERROR)
                raise
            finally:
                if self._genai is not None:  # a model or tool call cut short with its stage
                    self._genai.end_runs_under(current.get_span_context().span_id, error)

    def observe(self, event: str, fields: Mapping[str, Any]) -> None:
        if event == "turn":
            status, model = str(fields.get("outcome")), str(fields.get("model"))
            labels = {"aircoach.turn.status": status, "gen_ai.request.model": model}
            # Why a failed turn failed, bounded (a message key of the catalogue): our deadline
            # (`turn_timeout`) or the provider (`model_unavailable`, `model_failed`).
            failure = _turn_failure(status, fields.get("reasons"))
            if failure is not None:
                labels["error.type"] = failure
            # Where it went: `stored`, `spooled` (a dead letter, the store refused it) or
            # `lost` (the spool too): what "nothing lost" is alerted on, instance by instance.
            stored = str(fields.get("stored"))
            if stored in _STORED:
                labels["aircoach.turn.stored"] = stored
            self.turns.add(1, labels)
            # The request's span (current while the turn ends), so that a trace search for
            # failed turns finds them: their HTTP status is 200 once the stream has begun.
            request_span = trace.get_current_span()
            request_span.set_attribute("aircoach.turn.status", status)
            if stored in _STORED:
                request_span.set_attribute("aircoach.turn.stored", stored)
            if failure is not None:
                request_span.set_attribute("error.type", failure)
            if isinstance(latency := fields.get("latency_ms"), int | float):
                self.turn_duration.record(latency / 1000, labels)
            if status == "ok":
                verdict = (
                    "unverified"
                    if fields.get("unverified")
                    else "verified"
                    if fields.get("cited")
                    else "no_citations"
                )
                self.verdicts.add(1, {"aircoach.grounding.verdict": verdict})
        elif event == "task_run":
            self._task_run(fields)
        elif event == "review_queue":
            task = {"aircoach.task": str(fields.get("task"))}
            self.review_queue.set(int(fields.get("open", 0)), task)
            if isinstance(age := fields.get("oldest_age_s"), int | float):
                self.review_queue_age.set(age, task)
        elif event == "feedback":
            self.feedback.add(1, {"aircoach.feedback.vote": str(fields.get("vote"))})

    def _task_run(self, fields: Mapping[str, Any]) -> None:
        task = {"aircoach.task": str(fields.get("task"))}
        labels = {**task, "outcome": str(fields.get("outcome"))}
        self.task_runs.add(1, labels)
        if isinstance(attempts := fields.get("attempts"), int):
            self.task_attempts.record(attempts, task)
        for step in ("shrunk", "fallback"):
            if fields.get(step):
                self.task_steps.add(1, {**task, "step": step})
        if isinstance(latency := fields.get("latency_ms"), int | float):
            self.task_duration.record(latency / 1000, labels)
        for kind in ("input", "output"):
            if tokens := fields.get(f"{kind}_tokens"):
                self.task_tokens.add(int(tokens), {**task, "gen_ai.token.type": kind})

    def trace_ids(self) -> tuple[str, str] | None:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return format(context.trace_id, "032x"), format(context.span_id, "016x")

    def hook_langchain(self) -> None:
        """Model and tool spans come from a LangChain callback handler, hooked in once
        LangChain is loaded (by the first chat turn or task run): importing it here would add
        its import time to the cold start of requests that never call a model."""
        if self._genai is None and "langchain_core.callbacks" in sys.modules:
            from aircoach.telemetry.langchain import HANDLER  # registers the handler

            self._genai = HANDLER

    # --- serverless flush -------------------------------------------------------------------

    async def flush(self) -> None:
        """Export what is buffered, waiting at most the flush bound."""
        if self._flushing is None or self._flushing.done():
            if self._flusher is None:
                self._flusher = ThreadPoolExecutor(1, thread_name_prefix="otel-flush")
            self._flushing = self._flusher.submit(self._flush_now)
        with anyio.move_on_after(self.flush_timeout_s):
            await asyncio.shield(asyncio.wrap_future(self._flushing))

    def _flush_now(self) -> None:
        try:
            self.tracer_provider.force_flush()
            self.meter_provider.force_flush()
        except Exception:  # the exporters log their own failures; a flush never fails a request
            log.warning("telemetry flush failed", exc_info=True)


_STORED = frozenset({"stored", "spooled", "lost"})  # the summary line's `stored`


def _turn_failure(status: str, reasons: object) -> str | None:
    """The first reason of a failed turn (`_OTHER` when it gave none), None for any other."""
    if status != "error":
        return None
    if isinstance(reasons, list | tuple) and reasons:
        return str(reasons[0])
    return "_OTHER"


class RequestScope:
    """Outermost layer of an instrumented app: makes the app's telemetry the request's, meters
    what only the response shows (first event, 429 quota refusals), and, with
    `flush_each_request`, holds the response's last message until the flush is done."""

    def __init__(self, app: ASGIApp, telemetry: OtelTelemetry):
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        telemetry = self.telemetry
        telemetry.hook_langchain()
        started = time.perf_counter()
        status = 0
        stream = False
        first_event: float | None = None
        last: Message | None = None

        async def observed_send(message: Message) -> None:
            nonlocal status, stream, first_event, last
            if message["type"] == "http.response.start":
                status = message["status"]
                content_type = dict(message.get("headers") or []).get(b"content-type", b"")
                stream = content_type.startswith(b"text/event-stream")
            elif message["type"] == "http.response.body":
                if stream and first_event is None and message.get("body"):
                    first_event = time.perf_counter() - started
                if telemetry.flush_each_request and not message.get("more_body", False):
                    last = message
                    return
            await send(message)

        try:
            with recording(telemetry):
                await self.app(scope, receive, observed_send)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            if first_event is not None:
                telemetry.first_event.record(first_event, {"http.route": route})
            if status == 429:  # QuotaExceeded is the app's only 429
                telemetry.quota_refusals.add(1, {"http.route": route})
            if telemetry.flush_each_request:
                with anyio.CancelScope(shield=True):
                    await telemetry.flush()
            if last is not None:
                await send(last)


def _without_query(span: Span, scope: Scope) -> None:
    """FastAPI's server span without query values (the names stay, as in the access log)."""
    if not span.is_recording():
        return
    attributes = getattr(span, "attributes", None) or {}
    for key in _URL_ATTRIBUTES:
        value = attributes.get(key)
        if isinstance(value, str) and "?" in value:
            span.set_attribute(key, redact_query(value))
    if isinstance(query := attributes.get("url.query"), str) and query:
        span.set_attribute("url.query", redact_query(f"?{query}")[1:])


class CompactConsole(SpanExporter):
    """`OTEL=console`: one indented tree per trace on stderr, printed when its root span ends
    (the SDK's console exporter prints a page of JSON per span)."""

    MAX_OPEN_TRACES = 64

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream
        self._open: OrderedDict[int, list[ReadableSpan]] = OrderedDict()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            trace_id = span.context.trace_id if span.context else 0
            self._open.setdefault(trace_id, []).append(span)
            if span.parent is None or span.parent.is_remote:
                print(self.render(self._open.pop(trace_id)), file=self.stream or sys.stderr)
        while len(self._open) > self.MAX_OPEN_TRACES:
            self._open.popitem(last=False)
        return SpanExportResult.SUCCESS

    @staticmethod
    def render(spans: list[ReadableSpan]) -> str:
        children: dict[int | None, list[ReadableSpan]] = {}
        ids = {s.context.span_id for s in spans if s.context}
        for span in spans:
            parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
            children.setdefault(parent, []).append(span)
        lines: list[str] = []

        def walk(parent: int | None, depth: int) -> None:
            for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
                lines.append("  " * depth + _line(span))
                if span.context:
                    walk(span.context.span_id, depth + 1)

        walk(None, 0)
        if spans and spans[-1].context:
            lines[0] = f"trace {format(spans[-1].context.trace_id, '032x')[:12]} {lines[0]}"
        return "\n".join(lines)


_SHOWN = {
    "http.response.status_code": "",
    "http.status_code": "",
    "http.response.header.x_turn_id": "turn=",
    "gen_ai.usage.input_tokens": "in=",
    "gen_ai.usage.output_tokens": "out=",
    "gen_ai.response.time_to_first_token": "ttft=",
    "aircoach.tool.status": "",
    "error.type": "error=",
}


def _line(span: ReadableSpan) -> str:
    ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
    attributes = span.attributes or {}
    shown = []
    for key, prefix in _SHOWN.items():
        value = attributes.get(key)
        if value is not None:
            value = value[0] if isinstance(value, tuple) and len(value) == 1 else value
            shown.append(f"{prefix}{value}")
    return " ".join([span.name, f"{ms:.1f}ms", *shown])

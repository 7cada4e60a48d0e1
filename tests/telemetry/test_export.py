"""OTLP over HTTP against a loopback receiver written here: the spans of a turn arrive before
its response ends; a receiver that hangs delays a turn by the flush bound at most, and the
turn succeeds. And with telemetry unset, nothing of OpenTelemetry's SDK is loaded."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from aircoach.settings import ROOT
from tests.helpers import app_with, served
from tests.loopback import LoopbackServer, QuietHandler
from tests.sse import parse_sse

pytestmark = pytest.mark.integration


class Collector:
    """What the receiver decoded: span names with their attributes, metric names."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, object]]] = []
        self.metrics: set[str] = set()
        self.hang = False
        self.lock = threading.Lock()


def receiver(collector: Collector) -> LoopbackServer:
    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if collector.hang:
                server.release.wait(60)  # a collector that never answers (until teardown)
                return
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                with collector.lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            for span in scope.spans:
                                attributes = {a.key: a.value for a in span.attributes}
                                collector.spans.append((span.name, attributes))
            elif self.path == "/v1/metrics":
                metrics = ExportMetricsServiceRequest.FromString(body)
                with collector.lock:
                    for resource in metrics.resource_metrics:
                        for scope in resource.scope_metrics:
                            collector.metrics.update(m.name for m in scope.metrics)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = LoopbackServer(Handler)
    return server


@pytest.fixture
def collector() -> Iterator[tuple[Collector, LoopbackServer]]:
    found = Collector()
    server = receiver(found).start()
    try:
        yield found, server
    finally:
        server.stop()


def _turn(url: str, headers: dict[str, str]) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as client:
        response = client.post(
            "/api/stream_query", json={"query": "Cos'è la densità dell'aria?"}, headers=headers
        )
    elapsed = time.perf_counter() - started
    assert response.status_code == 200
    return elapsed, parse_sse(response.text)


def test_the_spans_of_a_turn_arrive_before_its_response_ends(settings, auth, collector):
    found, server = collector
    app = app_with(
        settings.model_copy(
            update={
                "otel_exporter_otlp_endpoint": server.url,
                "otel_flush_each_request": True,
                "otel_flush_timeout_ms": 10_000,  # generous: this test is about arrival
            }
        )
    )
    try:
        with served(app) as url:
            _, events = _turn(url, auth())
            with found.lock:  # no waiting: the flush ran before the last byte
                names = [name for name, _ in found.spans]
                metrics = set(found.metrics)
    finally:
        app.state.telemetry.shutdown()
    assert events[-1]["type"] == "done"
    assert "POST /api/stream_query" in names
    for name in ("auth", "history", "model", "chat offline", "execute_tool kb_search", "persist"):
        assert name in names, (name, names)
    root = next(a for n, a in found.spans if n == "POST /api/stream_query")
    assert (
        root["http.response.header.x_turn_id"].array_value.values[0].string_value
        == (events[-1]["turn_id"])
    )
    assert {"aircoach.turns", "aircoach.tool.calls", "gen_ai.client.operation.duration"} <= metrics


def test_a_hanging_collector_delays_a_turn_by_the_bound_at_most(settings, auth, collector):
    found, server = collector
    plain = app_with(settings)
    with served(plain) as url:
        _turn(url, auth())  # warm: the first turn loads the agent's modules and the docs
        baseline, _ = _turn(url, auth())
    found.hang = True
    bound_ms = 250
    app = app_with(
        settings.model_copy(
            update={
                "otel_exporter_otlp_endpoint": server.url,
                "otel_flush_each_request": True,
                "otel_flush_timeout_ms": bound_ms,
            }
        )
    )
    try:
        with served(app) as url:
            elapsed = [_turn(url, auth())[0] for _ in range(3)]
            with httpx.Client(base_url=url, timeout=60) as client:
                assert client.get("/api/health").status_code == 200
        assert found.spans == []
    finally:
        found.hang = False
        server.release.set()  # the hung exports return; shutdown exports what is left
        app.state.telemetry.shutdown()
    # Generous margin (a shared machine): the bound is 0.25 s, a hung export takes 10 s.
    assert max(elapsed) < baseline + bound_ms / 1000 + 3, (baseline, elapsed)


def test_with_telemetry_unset_nothing_of_it_is_loaded(tmp_path, data_dir):
    """No exporter, no instrumentation and none of our SDK modules in a process that built the
    app and served a turn; no SDK at all until a turn runs. (FastAPI 0.165+ imports the
    OpenTelemetry API itself, and LangSmith, under LangChain, imports `opentelemetry.sdk.trace`
    for a type hint whenever the SDK is installed: neither is ours to stop.)"""
    code = (
        "import sys, httpx, asyncio\n"
        "from aircoach.app import create_app\n"
        "from aircoach.settings import Settings\n"
        "from aircoach.auth.tokens import DevIssuer\n"
        "from pathlib import Path\n"
        "def loaded(*prefixes):\n"
        "    return sorted(m for m in sys.modules if m.startswith(prefixes))\n"
        f"data = Path({str(data_dir)!r})\n"
        "settings = Settings(_env_file=None, data_dir=data, tool_env={})\n"
        "app = create_app(settings)\n"
        "print(loaded('opentelemetry.sdk', 'opentelemetry.exporter',\n"
        "             'opentelemetry.instrumentation', 'aircoach.telemetry.otel',\n"
        "             'aircoach.telemetry.langchain'))\n"
        "token = DevIssuer(data).mint('u', audience=settings.auth0_audience)\n"
        "async def turn():\n"
        "    transport = httpx.ASGITransport(app=app)\n"
        "    async with httpx.AsyncClient(transport=transport, base_url='http://t') as c:\n"
        "        r = await c.post('/api/stream_query', json={'query': 'Ciao'},\n"
        "                         headers={'Authorization': 'Bearer ' + token})\n"
        "        assert r.status_code == 200 and 'event: done' in r.text, r.text\n"
        "asyncio.run(turn())\n"
        "print(loaded('opentelemetry.exporter', 'opentelemetry.instrumentation',\n"
        "             'aircoach.telemetry.otel', 'aircoach.telemetry.langchain'))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-2:] == ["[]", "[]"]

"""Traces and metrics when an operator asks for them, and nothing at all when not.

This module is what the rest of the app calls: `span` (a stage of a request), `observe` (an
outcome worth counting: a turn, a task run, a vote) and `trace_ids` (for the log lines). It
imports no OpenTelemetry. Each call reads one context variable, set only inside a request of
an app that `instrument` wired (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL=console); otherwise it
returns at once. The SDK, its exporters and the FastAPI instrumentation live in
`aircoach.telemetry.otel`, imported by `instrument` only when telemetry is on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastapi import FastAPI

    from aircoach.settings import TelemetrySettings


class Recorder(Protocol):
    """What a telemetry backend records (the OpenTelemetry one: `otel.OtelTelemetry`)."""

    def span(
        self, name: str, attributes: Mapping[str, Any] | None
    ) -> AbstractContextManager[Any]: ...

    def observe(self, event: str, fields: Mapping[str, Any]) -> None: ...

    def trace_ids(self) -> tuple[str, str] | None: ...


_active: ContextVar[Recorder | None] = ContextVar("aircoach_telemetry", default=None)
_OFF: AbstractContextManager[None] = nullcontext()


def span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
    """A span named `name`, child of the current one (a no-op when telemetry is off).
    Attributes must never hold user text, a token or a secret."""
    recorder = _active.get()
    return _OFF if recorder is None else recorder.span(name, attributes)


def observe(event: str, fields: Mapping[str, Any]) -> None:
    """Count what a summary line reports (`turn`, `task_run`, `feedback`), when on."""
    recorder = _active.get()
    if recorder is not None:
        recorder.observe(event, fields)


def trace_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) of the current span, in hex; None when telemetry is off."""
    recorder = _active.get()
    return None if recorder is None else recorder.trace_ids()


@contextmanager
def recording(recorder: Recorder | None) -> Iterator[None]:
    """Make `recorder` the one this context (a request, a worker's run) records to."""
    token = _active.set(recorder)
    try:
        yield
    finally:
        _active.reset(token)


def instrument(app: FastAPI, settings: TelemetrySettings) -> None:
    """Trace and meter `app` when the settings ask for it; otherwise load nothing."""
    if not settings.telemetry_enabled:
        return
    from aircoach.telemetry.otel import OtelTelemetry

    OtelTelemetry.from_settings(settings).instrument(app)

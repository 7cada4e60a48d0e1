"""The recorder of the running context: what `aircoach.telemetry` reads on every call, apart
from the OpenTelemetry backend (`otel`), which records into it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, Protocol


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


def active() -> bool:
    """Whether this context records (an instrumented request or worker run): for numbers that
    cost a query to read, read only when someone listens."""
    return _active.get() is not None


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

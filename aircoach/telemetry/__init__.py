"""Traces and metrics when an operator asks for them, and nothing at all when not.

This module is what the rest of the app calls: `span` (a stage of a request), `observe` (an
outcome worth counting: a turn, a task run, a vote) and `trace_ids` (for the log lines). It
imports no OpenTelemetry. Each call reads one context variable, set only inside a request of
an app that `instrument` wired (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL=console); otherwise it
returns at once. The SDK, its exporters and the FastAPI instrumentation live in
`aircoach.telemetry.otel`, imported by `instrument` only when telemetry is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from aircoach.settings import TelemetrySettings


from aircoach.telemetry.context import (
    Recorder,
    active,
    observe,
    recording,
    span,
    trace_ids,
)

__all__ = ["Recorder", "active", "instrument", "observe", "recording", "span", "trace_ids"]


def instrument(app: FastAPI, settings: TelemetrySettings) -> None:
    """Trace and meter `app` when the settings ask for it; otherwise load nothing."""
    if not settings.telemetry_enabled:
        return
    from aircoach.telemetry.otel import OtelTelemetry

    OtelTelemetry.from_settings(settings).instrument(app)

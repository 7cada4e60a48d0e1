"""An app traced into the SDK's in-memory exporter and metric reader."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aircoach.settings import Settings
from aircoach.telemetry.otel import OtelTelemetry


@dataclass
class Traced:
    telemetry: OtelTelemetry
    spans_out: InMemorySpanExporter
    metrics_in: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return list(self.spans_out.get_finished_spans())

    def roots(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.parent is None]

    def tree(self, root: ReadableSpan) -> list[tuple[int, str]]:
        """(depth, name) of every span of `root`'s trace, depth-first in start order."""
        spans = [s for s in self.spans() if s.context.trace_id == root.context.trace_id]
        out: list[tuple[int, str]] = []

        def walk(span_id: int, depth: int) -> None:
            children = [s for s in spans if s.parent and s.parent.span_id == span_id]
            for child in sorted(children, key=lambda s: s.start_time or 0):
                out.append((depth, child.name))
                walk(child.context.span_id, depth + 1)

        walk(root.context.span_id, 1)
        return out

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, value or count) of every point of metric `name`."""
        data = self.metrics_in.get_metrics_data()
        found: list[tuple[dict[str, Any], Any]] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            value = getattr(point, "value", None)
                            found.append(
                                (
                                    dict(point.attributes or {}),
                                    point.count if value is None else value,
                                )
                            )
        return found


def traced_app(app: FastAPI, settings: Settings, **overrides: Any) -> Traced:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    telemetry = OtelTelemetry(
        settings.model_copy(update=overrides),
        span_exporter=exporter,
        metric_reader=reader,
        batch=False,
    )
    telemetry.instrument(app)
    return Traced(telemetry, exporter, reader)


@pytest.fixture
def traced(app: FastAPI, settings: Settings) -> Iterator[Traced]:
    traced = traced_app(app, settings)
    yield traced
    traced.telemetry.shutdown()

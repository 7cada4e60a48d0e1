"""The stream's events in the OpenAPI document's `components/schemas`: one schema per event
(`ToolResult`, `AgentMessage`, `Grounding`, `ErrorEvent`, `Done`) and `StreamEvent`, their
union discriminated by `type`, so that generated clients can narrow an event by its `type`
(`openapi-typescript` types the `itemSchema` content of a stream as `unknown`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI
from pydantic import Field, TypeAdapter

from aircoach.turn.events import TurnEvent

STREAM_EVENT = "StreamEvent"
_REF = "#/components/schemas/{model}"


def event_ref(event: type) -> dict[str, str]:
    """A `$ref` to the event's component schema."""
    return {"$ref": _REF.format(model=event.__name__)}


def event_components() -> dict[str, Any]:
    """The component schemas of the events and of `StreamEvent`."""
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[TurnEvent, Field(discriminator="type")])
    union = adapter.json_schema(mode="serialization", ref_template=_REF)
    # Each lists every field as required: the events are `ResponseModel`s.
    components: dict[str, Any] = union.pop("$defs")
    components[STREAM_EVENT] = union
    return components


def install_event_components(app: FastAPI) -> None:
    """Make `app.openapi()` carry the event components (generated once, as FastAPI does)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, component in event_components().items():
                schemas.setdefault(name, component)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]

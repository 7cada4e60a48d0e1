"""The event contract clients depend on (DESIGN.md, "SSE events"). A field added to an event
changes this file, DESIGN.md and the README in the same commit."""

from __future__ import annotations

import json

from aircoach.app import create_app
from aircoach.turn.events import EVENT_TYPES, sse_item_schema
from tests.helpers import chat
from tests.scripted_model import call

# Every event's `data` keys, exactly.
CONTRACT = {
    "tool_result": {"type", "tool_name", "data", "final"},
    "agent_message": {"type", "content"},
    "error": {"type", "code", "message"},
    "done": {"type", "turn_id", "prompt_version", "model", "context_turns", "request_id"},
}


def test_the_event_models_are_the_contract():
    assert {e.model_fields["type"].default: set(e.model_fields) for e in EVENT_TYPES} == CONTRACT


def test_the_openapi_stream_schema_is_generated_from_the_events(settings):
    schema = create_app(settings).openapi()
    content = schema["paths"]["/api/stream_query"]["post"]["responses"]["200"]["content"]
    assert content["text/event-stream"]["itemSchema"] == json.loads(json.dumps(sse_item_schema()))
    alternatives = content["text/event-stream"]["itemSchema"]["oneOf"]
    described = {
        a["properties"]["event"]["const"]: set(a["properties"]["data"]["contentSchema"]["required"])
        for a in alternatives
    }
    assert described == CONTRACT


async def test_every_event_on_the_wire_has_exactly_its_fields(client, auth, script):
    script(
        [
            call("domanda_teoria", capitolo=11),  # a failed tool: a tool_result, not final
            RuntimeError("model down"),  # then an error, the fallback answer, done
        ]
    )
    events = await chat(client, auth(), "Dammi una domanda del capitolo 11")
    assert [e["type"] for e in events] == ["tool_result", "error", "agent_message", "done"]
    for event in events:
        assert set(event) == CONTRACT[event["type"]], event
    tool, error, answer, done = events
    assert isinstance(tool["data"], dict) and tool["final"] is False
    assert isinstance(error["code"], str) and isinstance(answer["content"], str)
    assert isinstance(done["context_turns"], int) and done["turn_id"]


async def test_a_return_direct_result_is_final_and_ends_the_stream(client, auth, script):
    script([call("domanda_teoria", capitolo=3)])  # a second model call would exhaust it
    events = await chat(client, auth(), "Dammi una domanda del capitolo 3")
    assert [e["type"] for e in events] == ["tool_result", "done"]
    assert events[0]["final"] is True

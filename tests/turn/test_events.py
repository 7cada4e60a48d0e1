"""The event contract clients depend on (DESIGN.md, "SSE events"). A field added to an event
changes this file, DESIGN.md and the README in the same commit."""

from __future__ import annotations

import json

from aircoach.grounding.feedback import Feedback
from aircoach.grounding.models import CitationCheck, GroundingResult, ResponseGrounding, Retrieved
from aircoach.models import HistoryTurn, MessageResponse
from aircoach.routes.sse import sse_item_schema
from aircoach.turn.events import EVENT_TYPES
from aircoach.turn.records import ToolCall, ToolUse, Turn
from tests.helpers import chat
from tests.scripted_model import call

# Every event's `data` keys, exactly.
CONTRACT = {
    "tool_result": {"type", "tool_name", "arguments", "data", "final"},
    "agent_message": {"type", "content"},
    "grounding": {"type", "citations", "unverified", "withheld"},
    "error": {"type", "code", "message"},
    "done": {
        "type",
        "status",
        "turn_id",
        "prompt_version",
        "model",
        "context_turns",
        "request_id",
    },
}

# A stored turn's fields (DESIGN.md, "Stored turn"), and what `/api/history` returns of it.
TURN = {
    "conversation_id",
    "userId",
    "human",
    "system",
    "tool",
    "tools",
    "timestamp",
    "prompt_version",
    "model",
    "thread_id",
    "turn_id",
    "status",
    "error_code",
    "grounding",
    "retrieved",
    "feedback",
}
STORED_TOOL_CALL = {
    "tool_name",
    "call_id",
    "arguments",
    "text",
    "data",
    "status",
    "step",
    "offset",
}
RETURNED_TOOL_CALL = {"tool_name", "arguments", "data"}  # never the model's `text`
# The guard's verdict (the `grounding` event, a stored turn's `grounding`) and its parts.
GROUNDING = {"citations", "unverified", "withheld"}
CITATION = {"text", "key", "verified", "reason", "sentence", "source_says", "source"}
RESPONSE_GROUNDING = GROUNDING | {"regenerated"}  # `MessageResponse.grounding`
RETRIEVED = {"tool_name", "call_id", "count", "refs"}  # never the tool's text
FEEDBACK = {"voto", "commento", "at"}


def test_the_event_models_are_the_contract():
    assert {e.model_fields["type"].default: set(e.model_fields) for e in EVENT_TYPES} == CONTRACT


def test_the_openapi_stream_schema_is_generated_from_the_events(openapi_schema):
    schema = openapi_schema
    # `itemSchema` is OpenAPI 3.2's: the document declares the version it uses.
    assert schema["openapi"] == "3.2.0"
    content = schema["paths"]["/api/stream_query"]["post"]["responses"]["200"]["content"]
    assert content["text/event-stream"]["itemSchema"] == json.loads(json.dumps(sse_item_schema()))
    alternatives = content["text/event-stream"]["itemSchema"]["oneOf"]
    components = schema["components"]["schemas"]

    def required(alternative):
        ref = alternative["properties"]["data"]["contentSchema"]["$ref"]
        return set(components[ref.removeprefix("#/components/schemas/")]["required"])

    described = {a["properties"]["event"]["const"]: required(a) for a in alternatives}
    assert described == CONTRACT
    # One component per event, and their union discriminated by `type`.
    union = components["StreamEvent"]
    assert union["discriminator"]["propertyName"] == "type"
    assert set(union["discriminator"]["mapping"]) == set(CONTRACT)
    assert [a["properties"]["data"]["contentSchema"] for a in alternatives] == union["oneOf"]
    # A failed tool's data, described where generated clients read it.
    tool_data = components["ToolResult"]["properties"]["data"]["description"]
    assert "`error`" in tool_data and "`messaggio`" in tool_data
    # ...and typed there, in the event and in a stored turn's tools: a bare object was
    # `{[key: string]: unknown}` to openapi-typescript, so `data.messaggio` was no string.
    for owner in ("ToolResult", "ToolRecord"):
        data = components[owner]["properties"]["data"]
        assert data["additionalProperties"] is True
        assert {k: v["type"] for k, v in data["properties"].items()} == {
            "error": "string",
            "messaggio": "string",
            "message": "string",
        }
        # One name for the student's sentence: the quiz's no-match `message` is deprecated.
        assert "no question matched" in data["properties"]["messaggio"]["description"]
        assert data["properties"]["message"]["deprecated"] is True
        assert "deprecated" not in data["properties"]["messaggio"]


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


def test_the_stored_turn_and_its_history_view_are_the_contract():
    assert set(Turn.model_fields) == TURN == set(HistoryTurn.model_fields)
    assert set(ToolCall.model_fields) == STORED_TOOL_CALL
    assert set(ToolUse.model_fields) == RETURNED_TOOL_CALL


def test_the_grounding_shapes_are_the_contract():
    assert set(GroundingResult.model_fields) == GROUNDING
    assert set(CitationCheck.model_fields) == CITATION
    assert set(ResponseGrounding.model_fields) == RESPONSE_GROUNDING
    assert set(Retrieved.model_fields) == RETRIEVED
    assert set(Feedback.model_fields) == FEEDBACK
    assert "grounding" in MessageResponse.model_fields


async def test_history_returns_every_tool_call_without_the_model_text(client, auth, script):
    script([call("domanda_teoria", capitolo=3, numero=1)])
    await chat(client, auth(), "Dammi la domanda 1 del capitolo 3")
    response = await client.get("/api/history", headers=auth())
    (turn,) = response.json()["turns"]
    assert set(turn) == TURN
    (used,) = turn["tools"]
    assert set(used) == RETURNED_TOOL_CALL
    assert used["arguments"] == {"capitolo": 3, "numero": 1}
    assert turn["tool"] == {"tool_name": "domanda_teoria", "data": used["data"]}
    assert "Capitolo 3, domanda 1" not in response.text  # the model's text stays inside

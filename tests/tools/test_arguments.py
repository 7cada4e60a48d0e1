"""Tool arguments from the model checked against the tool's JSON Schema: safe coercions
first (`"5"` -> 5, so caps apply), then required fields, types, enums and unknown keys; a
violation is a tool error the model reads, never an exception out of the turn."""

from __future__ import annotations

import pytest

from aircoach.tools.arguments import InvalidArguments, check_arguments
from aircoach.tools.http import cap_arguments
from tests.helpers import chat
from tests.scripted_model import call

SEARCH = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "top_k": {"type": "integer"},
        "score": {"type": "number"},
        "exact": {"type": "boolean"},
        "capitoli": {"type": "array", "items": {"type": "integer"}},
        "modo": {"type": "string", "enum": ["ripasso"]},
    },
    "required": ["query"],
}


def test_safe_coercions_then_caps():
    arguments = check_arguments(
        SEARCH,
        {
            "query": "QNH",
            "top_k": "500",
            "score": "0.5",
            "exact": "True",
            "capitoli": ["2", 5.0],
            "modo": None,
        },
    )
    assert arguments == {
        "query": "QNH",
        "top_k": 500,
        "score": 0.5,
        "exact": True,
        "capitoli": [2, 5],
    }
    assert cap_arguments(arguments, {"top_k": 20})["top_k"] == 20


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "'query' is a required property"),
        ({"query": "x", "top_k": "venti"}, "'top_k': 'venti' is not of type 'integer'"),
        ({"query": "x", "top_k": 2.5}, "'top_k': 2.5 is not of type 'integer'"),
        ({"query": 5}, "'query': 5 is not of type 'string'"),
        ({"query": "x", "modo": "tutto"}, "'modo': 'tutto' is not one of ['ripasso']"),
        ({"query": "x", "topk": 3}, "('topk' was unexpected)"),
        ({"query": "x", "score": "nan"}, "'score': 'nan' is not of type 'number'"),
    ],
)
def test_a_violation_names_the_argument(arguments, expected):
    with pytest.raises(InvalidArguments) as caught:
        check_arguments(SEARCH, arguments)
    assert expected in str(caught.value)


def test_a_schema_may_allow_more_keys_and_a_message_is_bounded():
    open_schema = {**SEARCH, "additionalProperties": True}
    assert check_arguments(open_schema, {"query": "x", "extra": 1}) == {"query": "x", "extra": 1}
    many = {f"k{i}": i for i in range(50)}
    with pytest.raises(InvalidArguments) as caught:
        check_arguments(SEARCH, {"query": "x" * 10, **many, "top_k": "y" * 10_000})
    assert len(str(caught.value)) < 1200


async def test_a_bad_argument_goes_back_to_the_model_as_a_tool_error(client, auth, script):
    s = script(
        [
            call("domanda_teoria", capitolo="due"),
            call("domanda_teoria", capitolo="2"),  # quoted, as models do: coerced
        ]
    )
    events = await chat(client, auth(), "Dammi una domanda del capitolo 2")
    first, second = (e for e in events if e["type"] == "tool_result")
    assert first["final"] is False and "invalid arguments" in first["data"]["error"]
    assert first["data"]["messaggio"].startswith("Lo strumento 'Quiz di teoria' non è riuscito")
    assert "'capitolo': 'due' is not of type 'integer'" in s.calls[1][-1].content
    assert second["final"] is True and second["data"]["question"]["capitolo"] == 2
    assert events[-1]["type"] == "done"
    s.assert_used()

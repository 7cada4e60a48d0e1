"""POST /api/stream_query over SSE: event order and shapes."""

from __future__ import annotations

from tests.conftest import chat
from tests.scripted_model import call, text


async def test_text_turn_streams_deltas_then_done(client, auth, script):
    s = script([text("La portanza nasce dalla differenza di pressione.")])
    events = await chat(client, auth(), "Cos'è la portanza?")
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"agent_message"} and len(kinds) > 3
    assert (
        "".join(e["content"] for e in events[:-1])
        == "La portanza nasce dalla differenza di pressione."
    )
    done = events[-1]
    assert done["model"] == "scripted" and done["context_turns"] == 0
    assert set(done) == {"type", "turn_id", "prompt_version", "model", "context_turns"}
    assert s.bound == [["domanda_teoria"]]


async def test_return_direct_tool_ends_the_run_after_its_result(client, auth, script):
    script([call("domanda_teoria", capitolo=3)])
    events = await chat(client, auth(), "Dammi una domanda del capitolo 3")
    assert [e["type"] for e in events] == ["tool_result", "done"]
    result = events[0]
    assert result["tool_name"] == "domanda_teoria" and result["final"] is True
    assert isinstance(result["data"], dict) and result["data"]["question"]["capitolo"] == 3

"""POST /api/stream_query: SSE event order and shapes, JSON mode, persistence of each turn."""

from __future__ import annotations

import json

import pytest

from aircoach.routes.sse import encode_event
from aircoach.tools.registry import ToolSpec
from tests.helpers import app_with, asgi_client, chat, copy_prompt_docs, prepared_turn
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.turn.test_events import CONTRACT

# A handler of the tests' own package: allowed through PYTHON_TOOL_MODULES, as a deployment
# adds its packages.
TEST_MODULES = ("aircoach", "tests")
ECHO = ToolSpec.model_validate(
    {
        "name": "echo",
        "description": "Repeats its input.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
        "python": "tests.tool_handlers:echo",
    },
    context={"python_tool_modules": TEST_MODULES},
)


async def stored(app, sub="user-1"):
    return await app.state.services.chats.history(sub, limit=50, before=None)


async def test_text_turn_streams_deltas_then_done(app, client, auth, script):
    s = script([text("La portanza nasce dalla differenza di pressione.")])
    events = await chat(client, auth(), "Cos'è la portanza?")
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"agent_message"} and len(kinds) > 3
    answer = "".join(e["content"] for e in events[:-1])
    assert answer == "La portanza nasce dalla differenza di pressione."
    done = events[-1]
    assert set(done) == CONTRACT["done"]
    assert done["model"] == "scripted" and done["context_turns"] == 0
    assert s.bound == [["domanda_teoria", "verifica_risposta", "kb_search"]]  # kb_search embedded
    [turn] = await stored(app)
    assert (turn.human, turn.system, turn.tool, turn.status) == (
        "Cos'è la portanza?",
        answer,
        None,
        "ok",
    )
    assert turn.turn_id == done["turn_id"] and turn.thread_id == f"user-1:v{done['prompt_version']}"


async def test_return_direct_tool_ends_the_run_after_its_result(app, client, auth, script):
    script([call("domanda_teoria", capitolo=3)])
    events = await chat(client, auth(), "Dammi una domanda del capitolo 3")
    assert [e["type"] for e in events] == ["tool_result", "done"]
    result = events[0]
    assert set(result) == {"type", "tool_name", "arguments", "data", "final"}
    assert result["tool_name"] == "domanda_teoria" and result["final"] is True
    assert result["arguments"] == {"capitolo": 3}  # the model's call, as the AI SDK's input
    assert isinstance(result["data"], dict) and result["data"]["question"]["capitolo"] == 3
    [turn] = await stored(app)
    assert turn.system == "" and turn.tool.tool_name == "domanda_teoria"
    assert turn.tool.data == result["data"]


async def test_tool_turn_feeds_the_result_back_to_the_model(settings, auth, tmp_path):
    docs = copy_prompt_docs(tmp_path / "docs", markdown_only=True)
    tools = {"tools": [ECHO.model_dump(exclude_defaults=True)]}
    (docs / "tools.json").write_text(json.dumps(tools))
    s = Script([call("echo", word="ciao"), text("Il tool ha detto ciao.")])
    app = app_with(
        settings.model_copy(update={"prompt_docs_dir": docs, "python_tool_modules": TEST_MODULES}),
        models=ScriptedModels(s),
    )
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "ripeti ciao")
    kinds = [e["type"] for e in events]
    assert kinds[0] == "tool_result" and kinds[-1] == "done"
    assert set(kinds[1:-1]) == {"agent_message"}
    assert events[0] == {
        "type": "tool_result",
        "tool_name": "echo",
        "arguments": {"word": "ciao"},
        "data": {"echo": "ciao"},
        "final": False,
    }
    tool_message = s.calls[1][-1]
    assert tool_message.type == "tool" and tool_message.content == "echo: ciao"
    s.assert_used()


async def test_failed_return_direct_tool_goes_back_to_the_model(app, client, auth, script):
    s = script(
        [call("domanda_teoria", capitolo=11), text("Il capitolo 11 non esiste: scegli da 1 a 10.")]
    )
    events = await chat(client, auth(), "Dammi una domanda del capitolo 11")
    assert events[0]["type"] == "tool_result" and events[0]["final"] is False
    assert "capitolo must be between 1 and 10" in events[0]["data"]["error"]
    # The student reads, in Italian, which tool failed, by the name the tool list shows.
    assert events[0]["data"]["messaggio"] == (
        "Lo strumento 'Quiz di teoria' non è riuscito a completare la richiesta."
    )
    assert events[-1]["type"] == "done"
    assert "capitolo must be between 1 and 10" in s.calls[1][-1].content
    assert "messaggio" not in s.calls[1][-1].content  # the model reads the English text only
    [turn] = await stored(app)
    assert turn.tool.data == events[0]["data"]  # a replay shows the same sentence


async def test_a_tool_that_raises_is_named_to_the_student_in_the_request_language(
    settings, auth, tmp_path
):
    docs = copy_prompt_docs(tmp_path / "docs", markdown_only=True)
    broken = {**ECHO.model_dump(exclude_defaults=True), "python": "tests.tool_handlers:broken"}
    (docs / "tools.json").write_text(json.dumps({"tools": [{**broken, "label": "Ripetitore"}]}))
    s = Script(
        [call("echo", word="ciao"), text("Non ci riesco."), call("echo", word="hi"), text("No.")]
    )
    app = app_with(
        settings.model_copy(update={"prompt_docs_dir": docs, "python_tool_modules": TEST_MODULES}),
        models=ScriptedModels(s),
    )
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "ripeti ciao")
        result = events[0]
        assert result["type"] == "tool_result" and result["final"] is False
        assert result["data"] == {
            "error": "[Tool echo failed: ValueError]",  # for the model and clients, unchanged
            "messaggio": "Lo strumento 'Ripetitore' non è riuscito a completare la richiesta.",
        }
        english = await chat(client, {**auth(), "Accept-Language": "en"}, "repeat hi")
    s.assert_used()
    assert english[0]["data"]["messaggio"] == (
        "The 'Ripetitore' tool could not complete the request."
    )


async def test_empty_model_answer_gets_the_fallback_text(app, client, auth, script):
    script([text("")])
    events = await chat(client, auth(), "ciao")
    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    assert events[0]["code"] == "model_unavailable"
    assert events[1]["content"].startswith("Mi dispiace")
    [turn] = await stored(app)
    assert turn.system == events[1]["content"] and turn.status == "error"


async def test_model_failure_streams_error_then_fallback_and_stores_the_turn(
    app, client, auth, script
):
    script([RuntimeError("upstream 500")])
    events = await chat(client, auth(), "ciao")
    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    assert events[0]["code"] == "model_unavailable" and "upstream" not in events[0]["message"]
    [turn] = await stored(app)
    assert turn.status == "error" and turn.system == events[1]["content"]


async def test_a_failed_turn_is_stored_with_its_error_code_in_each_store(store_settings, auth):
    """The stored turn said only `status: "error"`: the history could not say why. It keeps
    the `error` event's code (never its message), and only a failed turn has one."""
    s = Script([RuntimeError("upstream 500 key=sk-secret"), text("Il QNH è la pressione.")])
    app = app_with(store_settings, models=ScriptedModels(s))
    async with asgi_client(app) as client:
        failed = await chat(client, auth(), "ciao")
        answered = await chat(client, auth(), "Cos'è il QNH?")
        page = (await client.get("/api/history", headers=auth())).json()
    s.assert_used()
    assert failed[0] == {**failed[0], "type": "error", "code": "model_unavailable"}
    newest, oldest = await stored(app)
    assert (oldest.status, oldest.error_code) == ("error", "model_unavailable")
    assert (newest.status, newest.error_code) == ("ok", None)
    assert [(t["status"], t["error_code"]) for t in page["turns"]] == [
        ("ok", None),
        ("error", "model_unavailable"),
    ]
    assert answered[-1]["status"] == "ok" and "sk-secret" not in json.dumps(page)


async def test_stream_false_returns_json(client, auth, script):
    script([text("Risposta completa.")])
    response = await client.post(
        "/api/stream_query", json={"query": "ciao", "stream": False}, headers=auth()
    )
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    assert (
        body["answer"] == "Risposta completa." and body["status"] == "ok" and body["tool"] is None
    )
    assert body["model"] == "scripted" and body["context_turns"] == 0 and body["turn_id"]


async def test_stream_headers_for_proxies(client, auth, script):
    script([text("ok")])
    response = await client.post("/api/stream_query", json={"query": "ciao"}, headers=auth())
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"


async def test_history_window_limits_what_the_model_sees(app, client, auth, script, settings):
    replies = [text(f"risposta {i}") for i in range(14)]
    s = script(replies)
    for i in range(14):
        done = (await chat(client, auth(), f"domanda {i}"))[-1]
    assert done["context_turns"] == settings.history_limit == 10
    shown = [m.content for m in s.calls[-1] if m.type == "human"]
    assert shown == [f"domanda {i}" for i in range(3, 14)]


async def test_chat_history_false_shows_no_earlier_turns(app, client, auth, script):
    s = script([text("uno"), text("due"), text("tre")])
    await chat(client, auth(), "prima")
    done = (await chat(client, auth(), "seconda", chat_history=False))[-1]
    assert done["context_turns"] == 0
    assert [m.content for m in s.calls[1] if m.type == "human"] == ["seconda"]
    done = (await chat(client, auth(), "terza"))[-1]
    assert done["context_turns"] == 2  # the store holds both earlier turns
    assert [m.content for m in s.calls[2] if m.type == "human"] == ["prima", "seconda", "terza"]


async def test_offline_model_answers_a_quiz_request_with_the_tool(client, auth):
    events = await chat(client, auth(), "Dammi una domanda del capitolo 3")
    assert [e["type"] for e in events] == ["tool_result", "done"]
    assert events[0]["data"]["question"]["capitolo"] == 3 and events[0]["final"] is True
    assert events[1]["model"] == "offline"


async def test_offline_model_streams_a_general_answer_word_by_word(client, auth):
    events = await chat(client, auth(), "Che tono usi con gli allievi?")
    deltas = [e["content"] for e in events if e["type"] == "agent_message"]
    assert len(deltas) > 5 and events[-1]["type"] == "done"
    assert "".join(deltas).startswith("[modello offline]")


def test_events_are_json_objects_not_strings():
    from aircoach.turn.events import ToolResult

    raw = encode_event(
        ToolResult(tool_name="x", arguments={}, data={"a": 1}, final=True), 7
    ).decode()
    assert raw.startswith("event: tool_result\ndata: ") and "\nid: 7\n" in raw
    assert json.loads(raw.split("data: ", 1)[1].split("\n", 1)[0])["data"] == {"a": 1}


async def test_a_failed_turn_whose_client_left_is_stored_failed_with_its_code(app, auth, script):
    """The model failed (an `error` event, then the fallback answer streams) and the client
    left before the end: the turn is stored as the failure it was, with its code, not as a
    turn cut short (`interrupted`, no code)."""
    script([RuntimeError("upstream 500")])
    turn = await prepared_turn(app, "user-1", "ciao")
    events = turn.events()
    assert (await anext(events)).type == "error"
    await events.aclose()  # the client leaves: the stream is closed before `done`
    [stored_turn] = await stored(app)
    assert (stored_turn.status, stored_turn.error_code) == ("error", "model_unavailable")


@pytest.mark.integration  # it waits out the turn's deadline
async def test_a_tool_cut_off_by_the_turn_deadline_is_named_in_the_log(
    settings, auth, tmp_path, caplog
):
    """A hung tool: the summary line listed only the tools whose result came (none) beside
    `tools_ms` of the whole wait, and the warning named the deadline, not the tool."""
    import logging

    docs = copy_prompt_docs(tmp_path / "docs", markdown_only=True)
    hangs = {**ECHO.model_dump(exclude_defaults=True), "python": "tests.tool_handlers:hangs"}
    (docs / "tools.json").write_text(json.dumps({"tools": [hangs]}))
    cut = settings.model_copy(
        update={"prompt_docs_dir": docs, "python_tool_modules": TEST_MODULES, "turn_timeout_s": 0.2}
    )
    app = app_with(cut, models=ScriptedModels(Script([call("echo", word="ciao")])))
    with caplog.at_level(logging.INFO, logger="aircoach"):
        async with asgi_client(app) as client:
            events = await chat(client, auth(), "ripeti ciao")
    assert [e["code"] for e in events if e["type"] == "error"] == ["model_unavailable"]
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("tool echo cut short after ") for line in lines), lines

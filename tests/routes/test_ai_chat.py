"""`POST /api/chat` and `GET /api/chat/{id}/stream`: the AI SDK's UI message stream v1 of the
same turn pipeline (the real `ai` package drives it in tests/ai_sdk)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from aircoach.grounding.guard import caveat
from tests.helpers import app_with, asgi_client, services_of
from tests.scripted_model import HeldModels, Script, ScriptedModels, call, never_answers, text

EN = {"Accept-Language": "en"}


def ui_body(query: str, *, chat_id: str = "chat-1", message_id: str = "m-1", **extra: Any):
    earlier = [
        {"id": "old-u", "role": "user", "parts": [{"type": "text", "text": "vecchia"}]},
        {"id": "old-a", "role": "assistant", "parts": [{"type": "text", "text": "x"}], "x": 1},
    ]
    last = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": query}]}
    return {"id": chat_id, "messages": [*earlier, last], "trigger": "submit-message", **extra}


def chunks(body: str) -> list[Any]:
    lines = [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


async def test_a_theory_turn_is_a_text_part_equal_to_the_stored_answer(app, client, auth, script):
    script([text("La portanza dipende.")])
    response = await client.post("/api/chat", json=ui_body("Cos'è la portanza?"), headers=auth())
    assert response.status_code == 200, response.text
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    got = chunks(response.text)
    turn_id = response.headers["X-Turn-ID"]
    assert got[0] == {"type": "start", "messageId": turn_id}
    deltas = "".join(c["delta"] for c in got if c["type"] == "text-delta")
    stored = await services_of(app).chats.get_turn("user-1", turn_id)
    assert stored is not None and deltas == stored.system
    assert stored.human == "Cos'è la portanza?" and stored.conversation_id == "chat-1"
    finish = got[-1]
    assert finish["type"] == "finish" and finish["finishReason"] == "stop"
    assert finish["messageMetadata"]["turn_id"] == turn_id
    assert {"prompt_version", "model", "context_turns"} <= set(finish["messageMetadata"])

    # The same message again (a resend) replays the stored turn: the model does not run.
    again = await client.post("/api/chat", json=ui_body("Cos'è la portanza?"), headers=auth())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "".join(c["delta"] for c in chunks(again.text) if c["type"] == "text-delta") == deltas


async def test_the_caveat_goes_with_the_verdict_and_the_text_stays_the_stored_answer(
    app, client, auth, script
):
    """An answer that cites an act no source names: the grounding verdict and its caveat are
    one `data-grounding` part, and the text parts are exactly the stored answer (our own SSE
    sends the caveat as an `agent_message` after the verdict)."""
    answer = "La definizione agevolata è disciplinata dalla Legge 197/2022."
    script([text(answer)])
    response = await client.post("/api/chat", json=ui_body("Quale legge?"), headers=auth())
    assert response.status_code == 200, response.text
    got = chunks(response.text)
    deltas = "".join(c["delta"] for c in got if c["type"] == "text-delta")
    stored = await services_of(app).chats.get_turn("user-1", response.headers["X-Turn-ID"])
    assert stored is not None and deltas == stored.system == answer
    (grounding,) = [c for c in got if c["type"] == "data-grounding"]
    assert grounding["data"]["unverified"] == ["Legge 197/2022"]
    assert grounding["data"]["caveat"] == caveat(["Legge 197/2022"])
    kinds = [c["type"] for c in got]
    last_delta = len(kinds) - 1 - kinds[::-1].index("text-delta")
    assert last_delta < kinds.index("data-grounding") < kinds.index("finish")


async def test_a_quiz_turn_is_a_tool_part_with_its_output_never_the_key(client, auth, script):
    script([call("domanda_teoria", capitolo=3, numero=1)])
    response = await client.post("/api/chat", json=ui_body("Una domanda"), headers=auth())
    got = chunks(response.text)
    (tool_in,) = [c for c in got if c["type"] == "tool-input-available"]
    (tool_out,) = [c for c in got if c["type"] == "tool-output-available"]
    assert tool_in["toolName"] == "domanda_teoria"
    assert tool_out["toolCallId"] == tool_in["toolCallId"]
    question = tool_out["output"]["question"]
    assert (question["capitolo"], question["numero"]) == (3, 1)
    assert "corretta" not in question and "spiegazione" not in question
    assert not [c for c in got if c["type"] == "data-progress"]  # nothing was graded


async def test_a_grading_sends_the_progress_after_it_as_a_data_part(client, auth, script):
    script([call("verifica_risposta", capitolo=3, numero=1, risposta="a"), text("Vediamo.")])
    response = await client.post("/api/chat", json=ui_body("la a"), headers=auth())
    got = chunks(response.text)
    kinds = [c["type"] for c in got]
    (output,) = [c for c in got if c["type"] == "tool-output-available"]
    (progress,) = [c for c in got if c["type"] == "data-progress"]
    assert kinds.index("data-progress") == kinds.index("tool-output-available") + 1
    assert progress["data"] == output["output"]["progresso"]
    assert progress["data"] == (await client.get("/api/progress", headers=auth())).json()
    assert progress["data"]["risposte"] == 1


async def test_a_message_whose_text_cannot_be_read_is_a_422_naming_its_part(client, auth):
    """A text part whose text was a number was a 422 on `messages.parts.text`, with no
    message or part index; a file alone was "String should have at least 1 character" on
    `parts`, an array: the app could not tell its user to add a text."""
    body = ui_body("ok")
    body["messages"][-1]["parts"].append({"type": "text", "text": 7})
    number = (await client.post("/api/chat", json=body, headers=auth())).json()["detail"][0]
    assert number["loc"] == ["body", "messages", 2, "parts", 1, "text"]
    assert number["input"] == "int" and number["msg"] == "a text part's text is a string"
    body = ui_body("ok")
    body["messages"][-1]["parts"] = [{"type": "file", "mediaType": "image/png", "url": "data:,"}]
    alone = (await client.post("/api/chat", json=body, headers=auth())).json()["detail"][0]
    assert alone["loc"] == ["body", "messages", 2, "parts"]
    assert alone["msg"].startswith("the last user message has no text")
    long = await client.post("/api/chat", json=ui_body("x" * 4001), headers=auth())
    (too_long,) = long.json()["detail"]
    assert too_long["type"] == "string_too_long" and too_long["input"] == "4001 characters"
    assert (await client.get("/api/history", headers=auth())).json()["turns"] == []


async def test_nothing_running_is_204_and_bad_bodies_are_422(client, auth):
    response = await client.get("/api/chat/chat-1/stream", headers=auth())
    assert response.status_code == 204
    no_user = {"id": "c", "messages": [{"id": "a", "role": "assistant", "parts": []}]}
    for body in (no_user, ui_body("x", chat_id="a:b"), ui_body("   "), {"id": "c"}):
        assert (await client.post("/api/chat", json=body, headers=auth())).status_code == 422
    # A text that is no string was asked as "None", "5", "{'a': 1}"; one that shows nothing
    # (NULs, a zero-width space, C1 controls) was answered: each was charged and stored. The
    # OpenAPI pattern of the query says the same (tests/load/test_schema.py generates from it).
    invisible = ("\u200b\u200b", "\x00", "\x01\x1b", "\u009c\u0093\u001e\u0010", "\ufeff ")
    for said in (None, 5, {"a": 1}, *invisible):
        refused = await client.post("/api/chat", json=ui_body(said), headers=auth())  # type: ignore[arg-type]
        assert refused.status_code == 422, (said, refused.text)
    for query in invisible:
        body = {"query": query, "stream": False}
        refused = await client.post("/api/stream_query", json=body, headers=auth())
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == [
            "body",
            "query",
        ]
    assert (await client.get("/api/history", headers=auth())).json()["turns"] == []
    shows = await client.post(
        "/api/stream_query", json={"query": "👍", "stream": False}, headers=auth()
    )
    assert shows.status_code == 200, shows.text


def long_chat(turns: int) -> dict[str, Any]:
    """A chat as `useChat` resends it whole: each answer with its metadata and parts."""
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        question = {"type": "text", "text": f"Domanda {i}"}
        messages.append({"id": f"u-{i}", "role": "user", "parts": [question]})
        grounding = {"verified": ["PHAK cap. 4"], "unverified": [], "caveat": None}
        metadata = {"turn_id": f"t-{i}", "model": "m", "prompt_version": "v1"}
        options = [{"lettera": letter, "testo": "Un'opzione"} for letter in "abcd"]
        question = {"capitolo": 3, "numero": 1, "testo": "Quale?", "opzioni": options}
        quiz = {
            "type": "tool-domanda_teoria",
            "toolCallId": f"call-{i}",
            "state": "output-available",
            "input": {"capitolo": 3, "numero": 1},
            "output": {"question": question},
        }
        parts = [
            {"type": "step-start"},
            quiz,
            {"type": "text", "text": "La portanza. " * 20, "state": "done"},
            {"type": "data-grounding", "data": grounding},
        ]
        messages.append({"id": f"t-{i}", "role": "assistant", "metadata": metadata, "parts": parts})
    last = {"id": "u-last", "role": "user", "parts": [{"type": "text", "text": "E adesso?"}]}
    return {"id": "chat-long", "messages": [*messages, last], "trigger": "submit-message"}


async def test_keys_the_chat_does_not_read_are_named_in_a_warning(client, auth, script):
    # A misspelt `if_busy` was ignored without a word: the client thought it asked `reject`.
    script([text("Uno."), text("Due.")])
    odd = {"if_bussy": "reject", "metadata": {"a": 1}, "bad\nkey": 1, "end\n": 2}
    response = await client.post("/api/chat", json=ui_body("Ciao", **odd), headers=auth())
    assert response.status_code == 200, response.text
    assert response.headers["Warning"] == '299 - "ignored request keys: if_bussy, metadata, 2 more"'
    plain = await client.post("/api/chat", json=ui_body("Ciao", message_id="m-2"), headers=auth())
    assert plain.status_code == 200 and "Warning" not in plain.headers


async def test_a_message_without_an_id_says_its_resend_is_a_new_turn(client, auth, script):
    """Two posts of a message with `"id": ""` ran the model twice, without a word: the id is
    the `client_message_id`."""
    script([text("Uno."), text("Due."), text("Tre.")])
    for _ in range(2):
        response = await client.post(
            "/api/chat", json=ui_body("Ciao", message_id=""), headers=auth()
        )
        assert response.status_code == 200, response.text
        assert "Idempotent-Replayed" not in response.headers
        assert response.headers["Warning"] == (
            '299 - "the last user message has no id: a resend of it is a new turn"'
        )
    both = await client.post(
        "/api/chat", json=ui_body("Ciao", message_id="", odd=1), headers=auth()
    )
    assert both.headers["Warning"] == (
        '299 - "ignored request keys: odd", '
        '299 - "the last user message has no id: a resend of it is a new turn"'
    )


async def test_a_chat_too_long_to_send_whole_is_a_422_on_messages_saying_what_to_send(
    app, client, auth
):
    """Past 1000 messages, or (with answers' parts and metadata) past the JSON values one body
    may hold, well before: a 422 naming `messages` that says to send the last message alone,
    the body never echoed, nothing stored. The values' cap named only `body`."""
    by_values = long_chat(450)  # 901 messages of some 24,000 values
    by_count = long_chat(0)
    by_count["messages"] = by_count["messages"] * 1001
    for body in (by_values, by_count):
        response = await client.post("/api/chat", json=body, headers=auth())
        assert response.status_code == 422, response.text
        got = response.json()
        assert got["error"] == "invalid_request"
        assert got["message"] == "La richiesta non è valida: controlla il campo 'messages'."
        (error,) = got["detail"]
        assert error["loc"] == ["body", "messages"] and error["type"] == "chat_too_long"
        assert "last user message" in error["msg"] and "prepareSendMessagesRequest" in error["msg"]
        assert error["input"] is None and len(response.content) < 1000
    assert await services_of(app).chats.history("user-1", limit=5, conversation="chat-long") == []


async def test_a_body_too_large_is_a_413_that_says_to_send_the_last_message_alone(settings, auth):
    """Past `CHAT_MAX_BODY_BYTES` (here 1024) the 413 keeps its code and says, in the
    request's language, what the client can do (as the 422 of a chat too long does); the
    body is never echoed."""
    app = app_with(settings.model_copy(update={"chat_max_body_bytes": 1024}))
    body = ui_body("Quanto è lungo? " * 100)
    async with asgi_client(app) as client:
        italian = await client.post("/api/chat", json=body, headers=auth())
        english = await client.post("/api/chat", json=body, headers={**auth(), **EN})
    assert italian.status_code == english.status_code == 413
    assert italian.json() == {
        "error": "body_too_large",
        "message": "Il corpo della richiesta supera 1024 byte: invia solo l'ultimo messaggio, "
        "la conversazione è conservata sul server.",
    }
    assert english.json()["message"] == (
        "The request body is larger than 1024 bytes: send the last message alone, the server "
        "keeps the conversation."
    )
    assert "Quanto" not in italian.text + english.text


async def test_the_last_message_alone_is_a_turn_of_the_stored_conversation(
    app, client, auth, script
):
    """What `prepareSendMessagesRequest` sends: the chat id and one message. The answer is
    given with the stored history (tests/ai_sdk drives it through the real `ai` package)."""
    scripted = script([text("Prima risposta."), text("Seconda risposta.")])
    for n, query in enumerate(("Cos'è la portanza?", "E la resistenza?")):
        message = {"id": f"m-{n}", "role": "user", "parts": [{"type": "text", "text": query}]}
        body = {"id": "chat-one", "messages": [message], "trigger": "submit-message"}
        response = await client.post("/api/chat", json=body, headers=auth())
        assert response.status_code == 200, response.text
    shown = [str(m.content) for m in scripted.calls[1]]
    assert "Cos'è la portanza?" in shown and "Prima risposta." in shown
    stored = await services_of(app).chats.history("user-1", limit=5, conversation="chat-one")
    assert [t.human for t in stored] == ["E la resistenza?", "Cos'è la portanza?"]


async def test_an_answer_the_store_refused_finishes_as_stop_with_its_error_part(
    settings, client, auth, script
):
    """The answer streamed whole and went to the dead-letter spool: the client is told in an
    `error` part, but the message itself ended normally (`status: ok`), so `finishReason` is
    `stop`; `error` is for a turn that did not end ok."""
    from tests.store.test_dead_letters import refuse_writes

    script([text("Il QNH è la pressione ridotta al livello del mare.")])
    await client.get("/api/history", headers=auth())  # creates the database
    refuse_writes(settings.sqlite_file)
    response = await client.post("/api/chat", json=ui_body("Cos'è il QNH?"), headers=auth())
    got = chunks(response.text)
    (error,) = [c for c in got if c["type"] == "error"]
    assert error["errorText"] and got[-1] == error  # after the finish (see the test below)
    finish = got[-2]
    assert finish["messageMetadata"]["status"] == "ok"
    assert finish["type"] == "finish" and finish["finishReason"] == "stop"


async def test_a_failed_turn_sends_its_error_chunk_after_the_finish(app, client, auth, script):
    """The AI SDK's `useChat` stops reading at an `error` chunk (its `onError` throws): sent
    where the error happened, the fallback answer, the message metadata (the turn id) and the
    finish after it never reached the message. So errors come last, after `finish`."""
    from aircoach.turn.answer import FALLBACK_ANSWER

    script([RuntimeError("the model is down")])
    response = await client.post("/api/chat", json=ui_body("Cos'è il QNH?"), headers=auth())
    assert response.status_code == 200, response.text
    got = chunks(response.text)
    kinds = [c["type"] for c in got]
    assert kinds[-3:] == ["finish-step", "finish", "error"], kinds
    assert kinds.count("error") == 1 and got[-1]["errorText"]
    assert "".join(c["delta"] for c in got if c["type"] == "text-delta") == FALLBACK_ANSWER
    finish = got[-2]
    assert finish["finishReason"] == "error"
    assert finish["messageMetadata"]["status"] == "error"
    assert finish["messageMetadata"]["turn_id"] == response.headers["X-Turn-ID"]


async def test_a_message_id_of_any_characters_still_makes_a_resend_replay(client, auth, script):
    """A client's own message ids need not fit `client_message_id`'s alphabet (a space, an
    accent): such an id is kept by its digest, so a resend still replays instead of running
    and paying for the turn again."""
    for message_id in ("messaggio n°1 è mio", "m-1\n"):  # "m-1\n" was a 422 (re's `$`)
        script([text("Il QNH è la pressione al livello del mare.")])
        body = ui_body("Cos'è il QNH?", message_id=message_id)
        first = await client.post("/api/chat", json=body, headers=auth())
        again = await client.post("/api/chat", json=body, headers=auth())
        assert first.status_code == again.status_code == 200, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.headers["X-Turn-ID"] == first.headers["X-Turn-ID"]
    other = ui_body("Cos'è il QNH?", message_id="messaggio n°2 è mio")
    script([text("Di nuovo.")])
    third = await client.post("/api/chat", json=other, headers=auth())
    assert "Idempotent-Replayed" not in third.headers


async def test_an_edited_message_keeps_its_id_and_gets_a_new_answer(client, auth, script):
    """useChat's `sendMessage({text, messageId})` replaces a user message and keeps its id,
    naming it in `messageId`: a new question, answered anew (not the old answer replayed,
    nor a 422 for a reused id); a resend of the edit replays the edit's answer."""
    script([text("Il QNH è la pressione al livello del mare."), text("Il QFE è in pista.")])
    first = await client.post("/api/chat", json=ui_body("Cos'è il QNH?"), headers=auth())
    assert first.status_code == 200
    edit = ui_body("Cos'è il QFE?", messageId="m-1")
    edited = await client.post("/api/chat", json=edit, headers=auth())
    assert edited.status_code == 200, edited.text
    assert "Idempotent-Replayed" not in edited.headers
    deltas = "".join(c["delta"] for c in chunks(edited.text) if c["type"] == "text-delta")
    assert deltas == "Il QFE è in pista."
    again = await client.post("/api/chat", json=edit, headers=auth())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["X-Turn-ID"] == edited.headers["X-Turn-ID"]


async def test_a_new_message_after_stop_replaces_the_turn_still_running(
    settings, models, client, auth
):
    """useChat's `stop()` only aborts the fetch: the turn runs on (a dropped connection must
    not lose it), so the student's next message finds it running. The AI SDK sends no
    `if_busy`, and `useChat` shows a refusal as its raw JSON: the chat route interrupts the
    running turn by default, and a client that wants the 409 sends `if_busy: "reject"`."""
    started = anyio.Event()

    models.provider = HeldModels(
        Script([text("La seconda domanda ha la sua risposta.")]), never_answers(1, started)
    )
    first: list[httpx.Response] = []
    async with anyio.create_task_group() as tg:

        async def ask_first() -> None:
            first.append(await client.post("/api/chat", json=ui_body("Prima"), headers=auth()))

        tg.start_soon(ask_first)
        await started.wait()  # the first turn runs; its client has stopped reading
        refused = await client.post(
            "/api/chat", json=ui_body("Altra", message_id="m-0", if_busy="reject"), headers=auth()
        )
        assert refused.status_code == 409 and refused.json()["error"] == "turn_in_progress"
        second = await client.post(
            "/api/chat", json=ui_body("Seconda", message_id="m-2"), headers=auth()
        )
    assert second.status_code == 200, second.text
    answer = "".join(c["delta"] for c in chunks(second.text) if c["type"] == "text-delta")
    assert answer == "La seconda domanda ha la sua risposta."
    # The replaced turn ends as stopped, not failed: `abort`, no `finish`, no `error`.
    stopped = chunks(first[0].text)
    assert stopped[-1] == {"type": "abort", "reason": "cancelled"}
    assert not [c for c in stopped if c["type"] in ("finish", "error")]
    (metadata,) = [c for c in stopped if c["type"] == "message-metadata"]
    assert metadata["messageMetadata"]["status"] == "cancelled"
    assert metadata["messageMetadata"]["turn_id"] == first[0].headers["X-Turn-ID"]


def regenerate_body(query: str, *, message_id: str = "m-2", **extra: Any) -> dict[str, Any]:
    """What `useChat`'s `regenerate()` sends (the answer dropped, the last message alone)."""
    last = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": query}]}
    return {"id": "chat-1", "messages": [last], "trigger": "regenerate-message", **extra}


def said(response: httpx.Response) -> str:
    return "".join(c["delta"] for c in chunks(response.text) if c["type"] == "text-delta")


async def test_a_regeneration_replaces_the_newest_answer_in_the_history_and_the_context(
    client, auth, script
):
    """`regenerate()` asks the last question again: its old answer leaves the stored history
    and the model's context (the model sees the question once, the old answer never), and
    the new answer takes its place."""
    scripted = script([text("Prima."), text("Vecchia risposta."), text("Nuova risposta.")])
    await client.post(
        "/api/chat", json=ui_body("Cos'è la portanza?", message_id="m-1"), headers=auth()
    )
    old = await client.post(
        "/api/chat", json=ui_body("E la resistenza?", message_id="m-2"), headers=auth()
    )
    old_id = old.headers["X-Turn-ID"]

    again = await client.post("/api/chat", json=regenerate_body("E la resistenza?"), headers=auth())
    assert again.status_code == 200, again.text
    assert said(again) == "Nuova risposta." and again.headers["X-Turn-ID"] != old_id
    shown = [str(m.content) for m in scripted.calls[2]]
    assert "Vecchia risposta." not in shown and shown.count("E la resistenza?") == 1
    assert "Cos'è la portanza?" in shown and "Prima." in shown
    finish = chunks(again.text)[-1]
    assert finish["messageMetadata"]["context_turns"] == 1

    page = (await client.get("/api/history?conversation_id=chat-1", headers=auth())).json()
    assert [(t["human"], t["system"]) for t in page["turns"]] == [
        ("E la resistenza?", "Nuova risposta."),
        ("Cos'è la portanza?", "Prima."),
    ]
    assert (await client.get(f"/api/turns/{old_id}", headers=auth())).status_code == 404


async def test_a_regeneration_of_another_answer_than_the_newest_is_a_new_turn(
    app, client, auth, script
):
    """Only the newest answer, to the same question, is replaced: `regenerate({messageId})`
    of an older answer (even to the same words), or a question the newest turn does not
    answer, runs a new turn and removes nothing."""
    script([text("Uno."), text("Due."), text("Tre."), text("Quattro.")])
    first = await client.post(
        "/api/chat", json=ui_body("Spiegami meglio", message_id="m-1"), headers=auth()
    )
    await client.post(
        "/api/chat", json=ui_body("Spiegami meglio", message_id="m-2"), headers=auth()
    )
    older = regenerate_body(
        "Spiegami meglio", message_id="m-1", messageId=first.headers["X-Turn-ID"]
    )
    assert (await client.post("/api/chat", json=older, headers=auth())).status_code == 200
    other = regenerate_body("Un'altra domanda", message_id="m-3")
    assert (await client.post("/api/chat", json=other, headers=auth())).status_code == 200
    stored = await services_of(app).chats.history("user-1", limit=10, conversation="chat-1")
    assert [t.system for t in stored] == ["Quattro.", "Tre.", "Due.", "Uno."]


@pytest.mark.parametrize("named", [False, True], ids=["newest", "messageId"])
async def test_a_regeneration_replaces_an_answer_waiting_in_the_spool(settings, auth, named):
    """The store refused the old answer (it waits in the dead-letter spool): the
    regeneration takes it out of the spool, so that it does not come back beside the new
    answer once the store takes writes again and the spool is replayed."""
    from tests.store.test_dead_letters import accept_writes, refuse_writes

    script = Script([text("Prima."), text("Vecchia risposta."), text("Nuova risposta.")])
    app = app_with(settings, models=ScriptedModels(script))
    services = services_of(app)
    async with asgi_client(app) as client:
        await client.post(
            "/api/chat", json=ui_body("Cos'è la portanza?", message_id="m-1"), headers=auth()
        )
        refuse_writes(settings.sqlite_file)
        old = await client.post(
            "/api/chat", json=ui_body("E la resistenza?", message_id="m-2"), headers=auth()
        )
        old_id = old.headers["X-Turn-ID"]
        assert await services.dead_letters.find("user-1", old_id) is not None
        extra = {"messageId": old_id} if named else {}
        body = regenerate_body("E la resistenza?", **extra)
        again = await client.post("/api/chat", json=body, headers=auth())
        assert said(again) == "Nuova risposta."
        assert await services.dead_letters.find("user-1", old_id) is None
        assert "Vecchia risposta." not in [str(m.content) for m in script.calls[2]]
        accept_writes(settings.sqlite_file)
        await services.dead_letters.drain(services.chats)
        page = (await client.get("/api/history?conversation_id=chat-1", headers=auth())).json()
    assert [(t["human"], t["system"]) for t in page["turns"]] == [
        ("E la resistenza?", "Nuova risposta."),
        ("Cos'è la portanza?", "Prima."),
    ]


class _ClaimedAfterTakeBack:
    """A chat store on which, just after a turn is taken back, `then()` runs (another
    instance's turn claims the chat: two requests racing)."""

    def __init__(self, chats: Any):
        self.chats = chats
        self.then: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.chats, name)

    async def delete_turn(self, user_id: str, turn_id: str) -> bool:
        taken = await self.chats.delete_turn(user_id, turn_id)
        if taken:
            await self.then()
        return taken


@pytest.mark.parametrize("store_refuses", [False, True], ids=["stored", "spooled"])
async def test_a_regeneration_refused_as_busy_puts_the_old_answer_back(
    settings, models, auth, script, store_refuses
):
    """The old answer leaves the store before the new turn is prepared, and comes back as it
    was when the new turn does not run (here: another instance's turn claims the chat just
    after, and the client asked for `if_busy: reject`). A store that refuses it then gets it
    through the dead-letter spool, at the next request once it takes writes again."""
    from aircoach.services import open_stores
    from aircoach.turn.conversations import conversation_thread
    from tests.store.test_dead_letters import accept_writes, refuse_writes

    stores = open_stores(settings)
    chats = _ClaimedAfterTakeBack(stores.chats)
    app = app_with(settings, models=models, chats=chats, quiz=stores.quiz, attempts=stores.attempts)
    services = services_of(app)
    running = "elsewhere-turn"

    async def claim() -> None:
        now = services.clock()
        thread = conversation_thread("user-1", "chat-1")
        held = await services.turn_log.claim(
            "user-1", thread, running, now=now, expires_at=now + 60
        )
        assert held is None
        if store_refuses:
            refuse_writes(settings.sqlite_file)

    chats.then = claim
    script([text("La risposta.")])
    async with asgi_client(app) as client:
        first = await client.post(
            "/api/chat", json=ui_body("Cos'è il QNH?", message_id="m-2"), headers=auth()
        )
        before = await services.chats.get_turn("user-1", first.headers["X-Turn-ID"])
        assert before is not None

        body = regenerate_body("Cos'è il QNH?", if_busy="reject")
        refused = await client.post("/api/chat", json=body, headers=auth())
        assert refused.status_code == 409 and refused.json()["turn_id"] == running
        if store_refuses:
            assert await services.chats.get_turn("user-1", before.turn_id) is None
            assert await services.dead_letters.find("user-1", before.turn_id) == before
            accept_writes(settings.sqlite_file)
        page = (await client.get("/api/history?conversation_id=chat-1", headers=auth())).json()
    assert [t["turn_id"] for t in page["turns"]] == [before.turn_id]
    assert await services.chats.get_turn("user-1", before.turn_id) == before


async def test_a_regeneration_while_the_answer_still_runs_removes_no_older_answer(
    settings, models, client, auth
):
    """`stop()` then `regenerate()`: the stopped answer still runs on the server, so the
    newest stored turn is the one before it. When that older turn asked the same words
    ("Spiegami meglio" twice), it is not the answer being regenerated and stays; the running
    one is interrupted, and then taken back: the new answer takes its place."""
    started = anyio.Event()

    replies = Script([text("Uno."), text("Tre.")])
    models.provider = HeldModels(replies, never_answers(2, started))
    first = await client.post(
        "/api/chat", json=ui_body("Spiegami meglio", message_id="m-1"), headers=auth()
    )
    async with anyio.create_task_group() as tg:
        body = ui_body("Spiegami meglio", message_id="m-2")
        tg.start_soon(lambda: client.post("/api/chat", json=body, headers=auth()))
        await started.wait()  # the second answer runs; its client has stopped reading
        again = await client.post(
            "/api/chat", json=regenerate_body("Spiegami meglio"), headers=auth()
        )
    assert again.status_code == 200 and said(again) == "Tre."
    page = (await client.get("/api/history?conversation_id=chat-1", headers=auth())).json()
    assert [t["status"] for t in page["turns"]] == ["ok", "ok"]
    assert [t["turn_id"] for t in page["turns"]][-1] == first.headers["X-Turn-ID"]
    assert [t["system"] for t in page["turns"]] == ["Tre.", "Uno."]


async def _running_turn_id(app: Any, conversation_id: str = "chat-1") -> str:
    """The id of the turn that holds the conversation's thread (what `start` gave useChat)."""
    import time

    from aircoach.turn.conversations import conversation_thread

    thread = conversation_thread("user-1", conversation_id)
    running = await services_of(app).turn_log.holder("user-1", thread, now=time.time())
    assert running is not None
    return running.turn_id


async def test_stop_then_regenerate_of_the_same_answer_leaves_only_the_new_one(
    app, settings, models, client, auth
):
    """`stop()` then `regenerate()`: the stopped answer still runs on the server when the
    regeneration comes. The new turn interrupts it, and then takes it back as it takes back a
    stored answer: the history holds one answer to the question, the new one, as the AI SDK's
    own backends show it."""
    started = anyio.Event()

    replies = Script([text("Prima."), text("Nuova risposta.")])
    models.provider = HeldModels(replies, never_answers(2, started))
    await client.post(
        "/api/chat", json=ui_body("Cos'è la portanza?", message_id="m-1"), headers=auth()
    )
    stopped: list[httpx.Response] = []
    async with anyio.create_task_group() as tg:
        body = ui_body("E la resistenza?", message_id="m-2")

        async def ask() -> None:
            stopped.append(await client.post("/api/chat", json=body, headers=auth()))

        tg.start_soon(ask)
        await started.wait()  # the answer runs; its client has stopped reading
        stopped_id = await _running_turn_id(app)
        again = await client.post(
            "/api/chat",
            json=regenerate_body("E la resistenza?", messageId=stopped_id),
            headers=auth(),
        )
    assert again.status_code == 200 and said(again) == "Nuova risposta."
    assert stopped[0].headers["X-Turn-ID"] == stopped_id
    page = (await client.get("/api/history?conversation_id=chat-1", headers=auth())).json()
    assert [(t["human"], t["system"], t["status"]) for t in page["turns"]] == [
        ("E la resistenza?", "Nuova risposta.", "ok"),
        ("Cos'è la portanza?", "Prima.", "ok"),
    ]
    assert (await client.get(f"/api/turns/{stopped_id}", headers=auth())).status_code == 404
    # The model saw the conversation as stored, and the question once.
    shown = [str(m.content) for m in replies.calls[-1]]
    assert shown[1:] == ["Cos'è la portanza?", "Prima.", "E la resistenza?"]


# Waits, by design, for the stopped turn to read its cancel flag (every TICK_S of real time).
@pytest.mark.integration
async def test_stop_then_regenerate_on_another_instance_leaves_only_the_new_one(
    settings, auth, monkeypatch
):
    """As above, with the stopped answer running on one instance and the regeneration coming
    to another (serverless instances share nothing but the store): the new turn waits until
    the stopped one has logged its end (it reads the cancel flag every TICK_S), then takes it
    back and reads the history."""
    from aircoach.turn import admission

    # A bound, never a delay: the wait ends when the end is logged, however busy the machine.
    monkeypatch.setattr(admission, "REMOTE_END_WAIT_S", 120.0)
    started = anyio.Event()
    first = app_with(
        settings, models=HeldModels(Script([text("Prima.")]), never_answers(2, started))
    )
    replies = Script([text("Nuova risposta.")])
    second = app_with(settings, models=ScriptedModels(replies))
    async with asgi_client(first) as on_first, asgi_client(second) as on_second:
        await on_first.post(
            "/api/chat", json=ui_body("Cos'è la portanza?", message_id="m-1"), headers=auth()
        )
        async with anyio.create_task_group() as tg:
            body = ui_body("E la resistenza?", message_id="m-2")
            tg.start_soon(lambda: on_first.post("/api/chat", json=body, headers=auth()))
            await started.wait()  # the answer runs on the first instance
            stopped_id = await _running_turn_id(first)
            again = await on_second.post(
                "/api/chat",
                json=regenerate_body("E la resistenza?", messageId=stopped_id),
                headers=auth(),
            )
        assert again.status_code == 200 and said(again) == "Nuova risposta."
        page = await on_second.get("/api/history?conversation_id=chat-1", headers=auth())
    assert [(t["human"], t["system"], t["status"]) for t in page.json()["turns"]] == [
        ("E la resistenza?", "Nuova risposta.", "ok"),
        ("Cos'è la portanza?", "Prima.", "ok"),
    ]
    shown = [str(m.content) for m in replies.calls[-1]]
    assert shown[1:] == ["Cos'è la portanza?", "Prima.", "E la resistenza?"]


async def test_stop_then_regenerate_whose_client_leaves_puts_the_stopped_answer_back(
    settings, auth
):
    """`stop()` then `regenerate()`, and the client leaves once the stopped answer has been
    taken back, while the new turn reads the history again: the new turn will not run, so the
    stopped answer is stored again (as it was: `interrupted`) and the conversation is free."""
    from aircoach.services import open_stores

    started, reading = anyio.Event(), anyio.Event()
    stores = open_stores(settings)
    taken_back = False

    class HeldAfterTheTakeBack:
        """The regeneration's read of the history, after it took the stopped answer back,
        never answers."""

        def __getattr__(self, name: str) -> Any:
            return getattr(stores.chats, name)

        async def delete_turn(self, user_id: str, turn_id: str) -> bool:
            nonlocal taken_back
            taken_back = True
            return await stores.chats.delete_turn(user_id, turn_id)

        async def latest_turn_ids(self, *args: Any, **kwargs: Any) -> Any:
            if taken_back and not reading.is_set():
                reading.set()
                await anyio.sleep_forever()
            return await stores.chats.latest_turn_ids(*args, **kwargs)

    replies = Script([text("Prima."), text("Terza.")])
    app = app_with(
        settings,
        models=HeldModels(replies, never_answers(2, started)),
        chats=HeldAfterTheTakeBack(),
        quiz=stores.quiz,
        attempts=stores.attempts,
    )
    leaving, left = anyio.CancelScope(), anyio.Event()

    async def regenerate(client: httpx.AsyncClient, stopped_id: str) -> None:
        with leaving:
            body = regenerate_body("E la resistenza?", messageId=stopped_id)
            await client.post("/api/chat", json=body, headers=auth())
        left.set()

    async with asgi_client(app) as client, anyio.create_task_group() as tg:
        body = ui_body("Cos'è la portanza?", message_id="m-1")
        assert (await client.post("/api/chat", json=body, headers=auth())).status_code == 200
        body = ui_body("E la resistenza?", message_id="m-2")
        tg.start_soon(lambda: client.post("/api/chat", json=body, headers=auth()))
        await started.wait()  # the answer runs; its client has stopped reading
        stopped_id = await _running_turn_id(app)
        tg.start_soon(regenerate, client, stopped_id)
        await reading.wait()
        leaving.cancel()
        await left.wait()
        page = (await client.get("/api/history?conversation_id=chat-1", headers=auth())).json()
        third = await client.post(
            "/api/stream_query",
            json={"query": "E il peso?", "conversation_id": "chat-1"},
            headers=auth(),
        )
    assert [(t["human"], t["status"]) for t in page["turns"]] == [
        ("E la resistenza?", "interrupted"),
        ("Cos'è la portanza?", "ok"),
    ]
    assert page["turns"][0]["turn_id"] == stopped_id
    assert third.status_code == 200 and "Terza." in third.text, third.text


async def test_a_regeneration_interrupting_another_question_keeps_it_interrupted(
    app, settings, models, client, auth
):
    """A regeneration that finds a turn of ANOTHER question running (the student asked again
    and then regenerated the answer before: the AI SDK sends the newest question, so only a
    client of its own does this) interrupts it as any new message does: stored
    `interrupted`, not taken back."""
    started = anyio.Event()

    replies = Script([text("Prima."), text("Seconda.")])
    models.provider = HeldModels(replies, never_answers(2, started))
    await client.post(
        "/api/chat", json=ui_body("Cos'è la portanza?", message_id="m-1"), headers=auth()
    )
    async with anyio.create_task_group() as tg:
        body = ui_body("E la resistenza?", message_id="m-2")
        tg.start_soon(lambda: client.post("/api/chat", json=body, headers=auth()))
        await started.wait()
        running_id = await _running_turn_id(app)
        again = await client.post(
            "/api/chat",
            json=regenerate_body("Cos'è la portanza?", message_id="m-1"),
            headers=auth(),
        )
    assert again.status_code == 200 and said(again) == "Seconda."
    page = (await client.get("/api/history?conversation_id=chat-1", headers=auth())).json()
    assert [(t["human"], t["status"]) for t in page["turns"]] == [
        ("Cos'è la portanza?", "ok"),
        ("E la resistenza?", "interrupted"),
        ("Cos'è la portanza?", "ok"),
    ]
    assert (await client.get(f"/api/turns/{running_id}", headers=auth())).status_code == 200
    shown = [str(m.content) for m in replies.calls[-1]]
    assert shown[1:] == ["Cos'è la portanza?", "Prima.", "E la resistenza?", "Cos'è la portanza?"]


class _StallsAfterTakeBack:
    """A chat store whose first thread read after a turn is taken back waits for ever (a slow
    store, or a slow Auth0 read, while the new turn is prepared): `reading` says it waits."""

    def __init__(self, chats: Any):
        self.chats = chats
        self.took_back = False
        self.reading = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.chats, name)

    async def delete_turn(self, user_id: str, turn_id: str) -> bool:
        self.took_back = await self.chats.delete_turn(user_id, turn_id)
        return self.took_back

    async def latest_turn_ids(self, *args: Any, **kwargs: Any) -> list[str]:
        if self.took_back:
            self.took_back = False
            self.reading.set()
            await anyio.sleep_forever()
        return await self.chats.latest_turn_ids(*args, **kwargs)


async def test_a_regeneration_cancelled_before_it_runs_puts_the_old_answer_back(settings, auth):
    """A regeneration whose request is cancelled while its turn is prepared (the client
    left, the server's deadline) runs no turn: the old answer, already out of the store, is
    stored again as it was, not lost."""
    from aircoach.services import open_stores

    stores = open_stores(settings)
    chats = _StallsAfterTakeBack(stores.chats)
    replies = Script([text("La risposta.")])
    app = app_with(
        settings,
        models=ScriptedModels(replies),
        chats=chats,
        quiz=stores.quiz,
        attempts=stores.attempts,
    )
    async with asgi_client(app) as client:
        first = await client.post(
            "/api/chat", json=ui_body("Cos'è il QNH?", message_id="m-2"), headers=auth()
        )
        before = await chats.get_turn("user-1", first.headers["X-Turn-ID"])
        assert before is not None
        async with anyio.create_task_group() as tg:
            body = regenerate_body("Cos'è il QNH?")
            tg.start_soon(lambda: client.post("/api/chat", json=body, headers=auth()))
            await chats.reading.wait()
            tg.cancel_scope.cancel()
    replies.assert_used()
    assert await chats.get_turn("user-1", before.turn_id) == before


def test_the_chat_routes_document_every_status_and_header_of_the_turn_pipeline(openapi_schema):
    """`POST /api/chat` runs `/api/stream_query`'s pipeline: the same refusals (409
    `turn_in_progress`, 429 `quota_exceeded`...) reach it, and a client reads the turn's id
    and the replay flag from the same headers; the resume route reads the store."""
    paths = openapi_schema["paths"]
    ui = paths["/api/chat"]["post"]["responses"]
    sse = paths["/api/stream_query"]["post"]["responses"]
    assert set(sse) - set(ui) == set()
    assert ui["409"]["content"] == sse["409"]["content"]
    assert {"X-Turn-ID", "Idempotent-Replayed", "Warning"} <= set(ui["200"].get("headers", {}))
    body = paths["/api/chat"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "additionalProperties" not in body  # other keys allowed (and named), as before
    resume = paths["/api/chat/{chat_id}/stream"]["get"]["responses"]
    assert "503" in resume and "X-Turn-ID" in resume["200"].get("headers", {})


async def test_a_replay_s_metadata_is_the_first_stream_s_until_its_log_is_gone(
    settings, client, auth, script, tmp_path
):
    """The message metadata is `done`'s (docs/http.md). A resend of the same message replays
    the turn's logged stream, metadata included (the first request's `request_id`); once the
    log is gone, the turn rebuilt from the store carries its `turn_id`, `model`,
    `prompt_version` and `status`, the replay's own `request_id` (its `X-Request-ID`) and
    `context_turns` 0 (neither is stored)."""
    from aircoach.services import build_turn_log

    script([text("La portanza dipende.")])

    def metadata(response: httpx.Response) -> dict[str, Any]:
        (chunk,) = [c for c in chunks(response.text) if c["type"] == "message-metadata"]
        return chunk["messageMetadata"]

    body = ui_body("Cos'è la portanza?")
    first = await client.post("/api/chat", json=body, headers={**auth(), "X-Request-ID": "req-1"})
    again = await client.post("/api/chat", json=body, headers={**auth(), "X-Request-ID": "req-2"})
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["X-Request-ID"] == "req-2"
    was = metadata(first)
    assert was["request_id"] == "req-1" and metadata(again) == was

    (tmp_path / "other").mkdir()
    elsewhere = settings.model_copy(update={"data_dir": tmp_path / "other"})
    async with asgi_client(app_with(settings, turn_log=build_turn_log(elsewhere))) as later:
        rebuilt = await later.post(
            "/api/chat", json=body, headers={**auth(), "X-Request-ID": "req-3"}
        )
    assert rebuilt.headers["Idempotent-Replayed"] == "true"
    now = metadata(rebuilt)
    assert now["request_id"] == "req-3" and now["context_turns"] == 0
    turn = ("turn_id", "prompt_version", "model", "status")
    assert {k: now[k] for k in turn} == {k: was[k] for k in turn}
    assert now["turn_id"] == first.headers["X-Turn-ID"]


async def test_a_message_that_interrupts_a_running_turn_keeps_the_conversation_s_history(
    settings, auth
):
    """A new message while an answer runs (useChat's default: the running turn is
    interrupted). The interrupted turn stores what it had and, being cut short, drops the
    conversation's warm thread; when that happens before the new turn's agent reads the
    thread, the new turn must still see the conversation: its earlier question and answer,
    and the interrupted question with what was stored of it; its `context_turns` counts
    both."""
    from aircoach.services import build_memory_store, open_stores

    started, old_stored = anyio.Event(), anyio.Event()

    stores, memory = open_stores(settings), build_memory_store(settings)

    class SignalsTheStoredTurn:
        def __getattr__(self, name: str) -> Any:
            return getattr(stores.chats, name)

        async def append_turn(self, turn: Any) -> Any:
            result = await stores.chats.append_turn(turn)
            if turn.status == "interrupted":
                old_stored.set()  # the recorder drops the warm thread in this same step
            return result

    class WaitsForTheInterruptedTurn:
        """The new turn's first write (the memory, before its agent reads the thread) waits
        until the interrupted turn has stored itself: the order a busy machine may give."""

        def __getattr__(self, name: str) -> Any:
            return getattr(memory, name)

        async def add(self, user_id: str, items: Any, **kwargs: Any) -> Any:
            if started.is_set():
                await old_stored.wait()
            return await memory.add(user_id, items, **kwargs)

    replies = Script([text("Prima."), text("Terza.")])
    app = app_with(
        settings,
        models=HeldModels(replies, never_answers(2, started)),
        chats=SignalsTheStoredTurn(),
        quiz=stores.quiz,
        attempts=stores.attempts,
        memory_items=WaitsForTheInterruptedTurn(),
    )
    async with asgi_client(app) as client:
        body = ui_body("Cos'è la portanza?", message_id="m-1")
        assert (await client.post("/api/chat", json=body, headers=auth())).status_code == 200
        async with anyio.create_task_group() as tg:
            body = ui_body("E la resistenza?", message_id="m-2")
            tg.start_soon(lambda: client.post("/api/chat", json=body, headers=auth()))
            await started.wait()
            third = await client.post(
                "/api/chat", json=ui_body("E il peso?", message_id="m-3"), headers=auth()
            )
    assert third.status_code == 200 and said(third) == "Terza.", third.text
    shown = [str(m.content) for m in replies.calls[-1]][1:]  # after the system prompt
    assert shown[:2] == ["Cos'è la portanza?", "Prima."], shown
    assert shown[-1] == "E il peso?" and "E la resistenza?" in shown, shown
    # What it says it saw counts the interrupted turn, stored after the new turn was prepared.
    assert chunks(third.text)[-1]["messageMetadata"]["context_turns"] == 2


async def test_a_message_whose_client_leaves_while_it_waits_for_an_interrupted_turn_frees_the_thread(
    settings, auth
):
    """A new message interrupts a running answer and waits for it to store what it had; the
    client leaves meanwhile (or the server shuts down). The message will not run: it stops
    waiting, closes its model clients and frees the conversation at once, so the next message
    is answered instead of refused as busy until the claim's lease lapses; and its message id
    is given back, so a resend runs it."""
    from aircoach.services import open_stores

    started, storing, store_it = anyio.Event(), anyio.Event(), anyio.Event()
    stores = open_stores(settings)

    class HoldsTheInterruptedTurn:
        """The interrupted turn's store write waits: the new message waits for it."""

        def __getattr__(self, name: str) -> Any:
            return getattr(stores.chats, name)

        async def append_turn(self, turn: Any) -> Any:
            if turn.status == "interrupted":
                storing.set()
                await store_it.wait()
            return await stores.chats.append_turn(turn)

    models = HeldModels(Script([text("Terza."), text("Seconda.")]), never_answers(1, started))
    app = app_with(
        settings,
        models=models,
        chats=HoldsTheInterruptedTurn(),
        quiz=stores.quiz,
        attempts=stores.attempts,
    )
    leaving, left = anyio.CancelScope(), anyio.Event()

    async def second(client: httpx.AsyncClient) -> None:
        with leaving:
            body = ui_body("E la resistenza?", message_id="m-2")
            await client.post("/api/chat", json=body, headers=auth())
        left.set()

    async with asgi_client(app) as client, anyio.create_task_group() as tg:
        body = ui_body("Cos'è la portanza?", message_id="m-1")
        tg.start_soon(lambda: client.post("/api/chat", json=body, headers=auth()))
        await started.wait()
        tg.start_soon(second, client)
        await storing.wait()  # the second message holds the thread and waits
        leaving.cancel()
        with anyio.fail_after(10):  # it waited until the interrupted turn ended (never, here)
            await left.wait()
        assert models.was_closed(models.opened[1])
        third = await client.post(
            "/api/stream_query",
            json={"query": "E il peso?", "conversation_id": "chat-1"},
            headers=auth(),
        )
        store_it.set()
        body = ui_body("E la resistenza?", message_id="m-2")
        again = await client.post("/api/chat", json=body, headers=auth())
    assert third.status_code == 200, third.text
    assert "Terza." in third.text
    # Its message id was given back: sent again, it runs (not a 409 naming a turn that never ran).
    assert again.status_code == 200 and said(again) == "Seconda.", again.text


# Waits out REMOTE_END_WAIT_S of real time, by design.
@pytest.mark.integration
async def test_a_turn_that_interrupts_one_whose_instance_died_goes_on_after_a_bounded_wait(
    app, client, auth, script, monkeypatch, caplog
):
    """The interrupted turn holds the conversation's claim but its instance is gone: no end
    is ever logged. The new turn waits REMOTE_END_WAIT_S for it, says so in the log, and
    answers."""
    import logging
    import time

    from aircoach.turn import admission
    from aircoach.turn.conversations import conversation_thread

    monkeypatch.setattr(admission, "REMOTE_END_WAIT_S", 0.3)
    script([text("Eccomi.")])
    thread = conversation_thread("user-1", "chat-1")
    now = time.time()
    claimed = await services_of(app).turn_log.claim(
        "user-1", thread, "t-gone", now=now, expires_at=now + 30
    )
    assert claimed is None  # the claim is t-gone's
    with caplog.at_level(logging.WARNING, logger="aircoach.turn.admission"):
        response = await client.post("/api/chat", json=ui_body("Ci sei?"), headers=auth())
    assert response.status_code == 200 and said(response) == "Eccomi."
    assert any("t-gone" in r.getMessage() for r in caplog.records)

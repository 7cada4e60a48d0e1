"""The real `ai` npm package (pinned in package.json) under Node talks to a real server on
loopback: DefaultChatTransport sends, readUIMessageStream assembles a message whose text is
the stored answer, a quiz tool part with its output (never the key), a grading's tool part
with the student's progress after it as a `data-progress` part, and, for a turn whose model
failed, the fallback answer and its metadata with the error reported."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import anyio
import pytest

from aircoach.settings import ROOT
from aircoach.turn.answer import FALLBACK_ANSWER
from tests.helpers import app_with, served, services_of
from tests.scripted_model import HeldModels, Script, ScriptedModels, call, never_answers, text

pytestmark = pytest.mark.integration

SCRIPT = ROOT / "tests" / "ai_sdk" / "use_chat.mjs"
ANSWER = "La portanza è la forza che sostiene l'aereo in volo."
EXPLAINED = "Vediamo insieme perché la risposta giusta è un'altra."


def node() -> str:
    found = shutil.which("node")
    assert found, "node (20+) is missing"
    assert (ROOT / "node_modules" / "ai").exists(), "run `npm ci` (make test does)"
    return found


async def test_use_chat_assembles_the_stored_answer_and_the_quiz_tool_part(settings, token):
    script = Script(
        [
            text(ANSWER),
            call("domanda_teoria", capitolo=3, numero=1),
            call("verifica_risposta", capitolo=3, numero=1, risposta="a"),
            text(EXPLAINED),
            RuntimeError("the model is down"),
        ]
    )
    app = app_with(settings, models=ScriptedModels(script))
    with served(app) as url:
        env = {
            **os.environ,
            "BASE_URL": url,
            "TOKEN": token(),
            "CHAT_ID": "chat-ai-sdk",
            "THEORY_QUESTION": "Che cos'è la portanza?",
            "QUIZ_QUESTION": "Fammi la domanda 1 del capitolo 3",
            "QUIZ_ANSWER": "la a",
            "FAILING_QUESTION": "Che cos'è il QNH?",
        }
        with anyio.fail_after(120):
            done = await anyio.run_process([node(), str(SCRIPT)], env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()
    got = json.loads(done.stdout)
    script.assert_used()

    theory, quiz, grading = got["theory"], got["quiz"], got["grading"]
    services = services_of(app)
    stored = await services.chats.history("user-1", limit=5, conversation="chat-ai-sdk")
    failed_turn, grading_turn, quiz_turn, theory_turn = stored
    assert theory["id"] == theory_turn.turn_id and theory["role"] == "assistant"
    texts = [p["text"] for p in theory["parts"] if p["type"] == "text"]
    assert "".join(texts) == theory_turn.system == ANSWER
    assert theory["metadata"]["turn_id"] == theory_turn.turn_id
    assert {"prompt_version", "model", "context_turns"} <= set(theory["metadata"])

    (part,) = [p for p in quiz["parts"] if p["type"] == "tool-domanda_teoria"]
    assert part["state"] == "output-available"
    question = part["output"]["question"]
    assert (question["capitolo"], question["numero"]) == (3, 1)
    assert "corretta" not in json.dumps(part["output"])
    assert quiz_turn.tools[0].data == part["output"]

    (graded,) = [p for p in grading["parts"] if p["type"] == "tool-verifica_risposta"]
    (progress,) = [p for p in grading["parts"] if p["type"] == "data-progress"]
    assert graded["output"]["capitolo"] == 3 and "corretta" in graded["output"]
    assert progress["data"] == graded["output"]["progresso"]
    assert (
        progress["data"] == (await (await services.quiz_service()).progress("user-1")).model_dump()
    )
    assert progress["data"]["risposte"] == 1
    texts = [p["text"] for p in grading["parts"] if p["type"] == "text"]
    assert "".join(texts) == grading_turn.system == EXPLAINED

    # The model failed: the student still gets the fallback answer, the app the turn's id,
    # and the error is reported (it comes after the finish, where it cuts nothing off).
    failed = got["failed"]
    assert failed["status"] == "error" and failed["error"]
    message = failed["message"]
    assert message["role"] == "assistant" and message["id"] == failed_turn.turn_id
    assert "".join(p["text"] for p in message["parts"] if p["type"] == "text") == FALLBACK_ANSWER
    assert message["metadata"]["turn_id"] == failed_turn.turn_id
    assert message["metadata"]["status"] == "error"
    assert got["resumed"] is None  # nothing runs in the chat any more: 204


LAST_MESSAGE = ROOT / "tests" / "ai_sdk" / "last_message.mjs"
QUESTIONS = ["Che cos'è la portanza?", "E la resistenza?", "Come si combinano?"]
ANSWERS = [
    "La portanza sostiene l'aereo.",
    "La resistenza si oppone al moto.",
    "Insieme danno l'efficienza.",
    "In equilibrio, portanza e peso si bilanciano.",
]


async def test_prepare_send_messages_request_sends_one_message_and_the_store_keeps_the_chat(
    settings, token
):
    """docs/integrating.md's transport: `prepareSendMessagesRequest` sends the chat id and the
    last message alone (the body's switches kept), through `useChat`'s own chat class, for
    new messages and for a regeneration. Each answer is given with the stored history; the
    regenerated answer replaces the old one on the client, in the store and in the model's
    context."""
    script = Script([text(answer) for answer in ANSWERS])
    app = app_with(settings, models=ScriptedModels(script))
    with served(app) as url:
        env = {
            **os.environ,
            "BASE_URL": url,
            "TOKEN": token(),
            "CHAT_ID": "chat-last-message",
            "QUESTIONS": json.dumps(QUESTIONS),
        }
        with anyio.fail_after(120):
            done = await anyio.run_process(
                [node(), str(LAST_MESSAGE)], env=env, cwd=ROOT, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    got = json.loads(done.stdout)
    script.assert_used()
    assert got["status"] == "ready" and got["error"] is None

    sent = got["sent"]
    assert [body["trigger"] for body in sent] == ["submit-message"] * 3 + ["regenerate-message"]
    for body in sent:
        assert body["id"] == "chat-last-message" and body["tools"] == {"web_search": False}
        (message,) = body["messages"]
        assert message["role"] == "user"
    asked = [body["messages"][0]["parts"][0]["text"] for body in sent]
    assert asked == [*QUESTIONS, QUESTIONS[-1]]

    # The model saw the earlier turns, from the store: no request carried them.
    shown = [[str(m.content) for m in call] for call in script.calls]
    assert QUESTIONS[0] in shown[1] and ANSWERS[0] in shown[1]
    assert {*QUESTIONS[:2], *ANSWERS[:2]} <= set(shown[2])
    assert ANSWERS[2] not in shown[3] and shown[3].count(QUESTIONS[2]) == 1

    def said(message: dict[str, Any]) -> str:
        return "".join(p["text"] for p in message["parts"] if p["type"] == "text")

    messages = got["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert [said(m) for m in messages] == [
        QUESTIONS[0],
        ANSWERS[0],
        QUESTIONS[1],
        ANSWERS[1],
        QUESTIONS[2],
        ANSWERS[3],  # the regeneration replaced the third answer
    ]
    services = services_of(app)
    stored = await services.chats.history("user-1", limit=10, conversation="chat-last-message")
    assert [turn.system for turn in reversed(stored)] == [*ANSWERS[:2], ANSWERS[3]]
    assert messages[-1]["id"] == stored[0].turn_id


INTERRUPTED = ROOT / "tests" / "ai_sdk" / "interrupted.mjs"
SECOND_ANSWER = "La seconda domanda ha la sua risposta."


async def test_a_turn_replaced_by_a_newer_message_is_stopped_not_failed(settings, token):
    """A newer message interrupts the running turn (`if_busy: interrupt`, the chat route's
    default): the stream of the replaced turn ends with `abort`, as the AI SDK's own
    `streamText` ends one its abort signal stopped. `useChat` keeps the message with its
    metadata (`status: cancelled`) and shows no error: status `ready`, no `error`, and
    `onFinish` is told no `finishReason` (never `error`) and no error."""
    script = Script([text(SECOND_ANSWER)])
    # The first call never answers: its turn is interrupted.
    app = app_with(settings, models=HeldModels(script, never_answers(1)))
    with served(app) as url:
        env = {
            **os.environ,
            "BASE_URL": url,
            "TOKEN": token(),
            "CHAT_ID": "chat-interrupted",
            "FIRST_QUESTION": "Che cos'è la portanza?",
            "SECOND_QUESTION": "E la resistenza?",
        }
        with anyio.fail_after(120):
            done = await anyio.run_process(
                [node(), str(INTERRUPTED)], env=env, cwd=ROOT, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    got = json.loads(done.stdout)
    script.assert_used()

    stored = await services_of(app).chats.history(
        "user-1", limit=5, conversation="chat-interrupted"
    )
    answered_turn, interrupted_turn = stored
    assert interrupted_turn.status == "interrupted" and answered_turn.system == SECOND_ANSWER

    assert got["status"] == "ready" and got["error"] is None
    assert got["finished"] == {"finishReason": None, "isAbort": False, "isError": False}
    message = got["message"]
    assert message["role"] == "assistant" and message["id"] == interrupted_turn.turn_id
    assert message["metadata"]["status"] == "cancelled"
    assert message["metadata"]["turn_id"] == interrupted_turn.turn_id

    second = got["second"]
    assert second["status"] == "ready" and second["message"]["id"] == answered_turn.turn_id
    said = "".join(p["text"] for p in second["message"]["parts"] if p["type"] == "text")
    assert said == SECOND_ANSWER

"""A cancel stops a turn in every phase that waits on a model: here the rewrite of a JSON
answer whose citation is unverified (GROUNDING_POLICY `regenerate`, the default). A `POST
/api/turns/{id}/cancel`, or a `DELETE /api/conversations/{id}`, during the rewrite stops it
(at once on its own instance); the deleted conversation never comes back."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
from fastapi import FastAPI
from langchain_core.outputs import ChatGenerationChunk
from pydantic import Field

from aircoach.errors import TurnInProgress
from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, services_of
from tests.scripted_model import Script, ScriptedChatModel, text

# Cites a regulation nothing in the turn's context holds: the JSON answer is rewritten.
UNVERIFIED = "Secondo SERA.5010 la visibilità minima in volo VFR è di 5 km sotto FL 100."
REWRITTEN = "La visibilità minima in volo VFR è di 5 km sotto FL 100."
# A cancel reaches a turn on its own instance at once (on another, in about 0.5 s); without it
# the turn waits for the model, which this test never lets answer. The bound only tells the
# two apart, far above either, so that it never fails by chance on a busy machine.
PROMPTLY_S = 30.0


class _Gate:
    def __init__(self) -> None:
        self.rewriting = anyio.Event()  # the second model call (the rewrite) has begun
        self.release = anyio.Event()  # lets it answer


class _SlowRewrite(ScriptedChatModel):
    """The script's model, whose second call (the rewrite) waits for `gate.release`."""

    gate: Any = Field(exclude=True)

    async def _astream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        if len(self.script.calls) == 1:
            self.gate.rewriting.set()
            await self.gate.release.wait()
        async for chunk in super()._astream(messages, stop, run_manager, **kw):
            yield chunk


class _SlowRewrites:
    def __init__(self, script: Script, gate: _Gate):
        self.script, self.gate = script, gate

    async def models_for(self, tools: list[Any]) -> list[Any]:
        return [_SlowRewrite(script=self.script, gate=self.gate)]


def _app(settings: Settings, gate: _Gate) -> FastAPI:
    script = Script([text(UNVERIFIED), text(REWRITTEN)])
    return app_with(settings, models=_SlowRewrites(script, gate))


async def _ask_json(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> Any:
    response = await client.post(
        "/api/stream_query",
        json={"query": "Visibilità minima VFR?", "stream": False, **body},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _running_turn(app: FastAPI, thread: str) -> str:
    services = services_of(app)
    held = await services.turn_log.holder("user-1", thread, now=services.clock())
    assert held is not None
    return held.turn_id


async def test_a_cancel_during_the_rewrite_stops_the_turn_and_keeps_the_first_answer(
    settings: Settings, auth: Callable[..., dict[str, str]]
):
    gate = _Gate()
    app = _app(settings, gate)
    me = auth()
    answers: list[Any] = []
    answered = anyio.Event()
    async with asgi_client(app) as client, anyio.create_task_group() as tg:

        async def ask() -> None:
            answers.append(await _ask_json(client, me))
            answered.set()

        tg.start_soon(ask)
        await gate.rewriting.wait()
        turn_id = await _running_turn(app, "user-1")
        cancel = await client.post(f"/api/turns/{turn_id}/cancel", headers=me)
        assert cancel.status_code == 202, cancel.text
        cancelled_at = time.monotonic()
        try:
            with anyio.fail_after(PROMPTLY_S):
                await answered.wait()
        finally:
            gate.release.set()  # a turn that did not stop ends here (the test has failed)
        ended_in = time.monotonic() - cancelled_at

        (body,) = answers
        assert body["status"] == "interrupted", body
        assert body["answer"] == UNVERIFIED and body["grounding"] is None
        logged = await services_of(app).turn_log.read("user-1", turn_id)
        assert logged[-1].data["type"] == "done" and logged[-1].data["status"] == "cancelled"
        stored = (await client.get(f"/api/turns/{turn_id}", headers=me)).json()
        assert stored["status"] == "interrupted" and stored["system"] == UNVERIFIED
    assert ended_in < PROMPTLY_S


async def test_a_delete_during_the_rewrite_leaves_nothing_of_the_conversation(
    settings: Settings, auth: Callable[..., dict[str, str]]
):
    gate = _Gate()
    app = _app(settings, gate)
    me = auth()
    answers: list[Any] = []
    async with asgi_client(app) as client, anyio.create_task_group() as tg:

        async def ask() -> None:
            answers.append(await _ask_json(client, me, conversation_id="c2"))

        tg.start_soon(ask)
        await gate.rewriting.wait()
        deleted = await client.delete("/api/conversations/c2", headers=me)
        gate.release.set()  # a turn that did not stop finishes now, after the delete

    assert deleted.status_code == 204, deleted.text
    async with asgi_client(app) as client:
        history = await client.get("/api/history?conversation_id=c2", headers=me)
        listed = await client.get("/api/conversations", headers=me)
    assert history.json()["turns"] == []
    assert listed.json()["conversations"] == []
    (body,) = answers
    assert body["status"] == "interrupted", body


async def test_a_delete_whose_turn_does_not_stop_removes_nothing(
    settings: Settings, auth: Callable[..., dict[str, str]]
):
    """A running turn that has not let go of the conversation when the delete stops waiting
    (its store write slow, its instance stuck) could still store itself afterwards: the delete
    is then refused with its id, and removes nothing."""
    script = Script([text("Risposta uno")])
    app = app_with(settings, models=_SlowRewrites(script, _Gate()))
    me = auth()
    services = services_of(app)
    async with asgi_client(app) as client:
        body = await _ask_json(client, me, conversation_id="c3")
        assert body["status"] == "ok", body
        now = services.clock()
        # A turn of c3 runs somewhere and never lets go of it.
        thread = "conversation:c3"
        held = await services.turn_log.claim(
            "user-1", thread, "t-stuck", now=now, expires_at=now + 30
        )
        assert held is None
        eraser = dataclasses.replace(services.conversation_eraser, cancel_wait_s=0.05)
        try:
            await eraser.erase("user-1", "c3")
        except TurnInProgress as exc:
            refused = exc
        else:
            raise AssertionError("the delete went ahead while the turn still ran")
        assert refused.status == 409 and refused.fields == {"turn_id": "t-stuck"}
        assert await services.turn_log.cancel_requested("t-stuck")
        history = await client.get("/api/history?conversation_id=c3", headers=me)
        assert [t["human"] for t in history.json()["turns"]] == ["Visibilità minima VFR?"]


class _NeverAnswers(ScriptedChatModel):
    """A model whose call never answers (a JSON turn calls it whole, not streamed)."""

    started: Any = Field(exclude=True)

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        self.started.set()
        await anyio.sleep_forever()


class _NeverAnswering:
    def __init__(self, started: anyio.Event):
        self.started = started

    async def models_for(self, tools: list[Any]) -> list[Any]:
        return [_NeverAnswers(script=Script([]), started=self.started)]


async def test_a_json_turn_cancelled_before_it_wrote_anything_answers_as_it_is_stored(
    settings: Settings, auth: Callable[..., dict[str, str]]
):
    """It answered the fallback ("Mi dispiace, non sono riuscito ...") and stored no answer:
    what the client got was not what its history holds."""
    started = anyio.Event()
    app = app_with(settings, models=_NeverAnswering(started))
    me = auth()
    answers: list[Any] = []
    answered = anyio.Event()
    async with asgi_client(app) as client, anyio.create_task_group() as tg:

        async def ask() -> None:
            answers.append(await _ask_json(client, me))
            answered.set()

        tg.start_soon(ask)
        await started.wait()  # the model's first call, which never answers
        turn_id = await _running_turn(app, "user-1")
        cancel = await client.post(f"/api/turns/{turn_id}/cancel", headers=me)
        assert cancel.status_code == 202, cancel.text
        with anyio.fail_after(PROMPTLY_S):
            await answered.wait()
        (body,) = answers
        stored = (await client.get(f"/api/turns/{turn_id}", headers=me)).json()
    assert body["status"] == stored["status"] == "interrupted", body
    assert body["answer"] == stored["system"] == ""

"""The Lambda entry (functions/chat.py, Mangum) with Gemini configured: warm invocations reuse
the process, and must not reuse a model client bound to an earlier event loop ("Event loop is
closed" on the second serverless request)."""

from __future__ import annotations

import asyncio
import runpy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mangum import Mangum

from aircoach.auth.tokens import DevIssuer
from aircoach.llm.factory import build_model
from aircoach.settings import ROOT, Settings
from tests.helpers import app_with
from tests.lambda_events import chat_event
from tests.llm.fakes import gemini_text
from tests.sse import parse_sse


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The loop Mangum finds with `asyncio.get_event_loop()`, as in a Lambda process."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def lambda_handler(
    monkeypatch, data_dir: Path, gemini_api, loop
) -> tuple[Callable[..., dict[str, Any]], str]:
    """functions/chat.py loaded fresh with the environment of a Gemini deployment."""
    for name, value in {
        "GOOGLE_API_KEY": "fake-key",
        "MODEL_BASE_URL": gemini_api.url,
        "MODEL_TIMEOUT_S": "30",  # the fake answers at once; no test here waits for it
        "MODEL_MAX_RETRIES": "0",
        "DATA_DIR": str(data_dir),
        "PROMPT_DOCS_DIR": str(ROOT / "prompt_docs"),
    }.items():
        monkeypatch.setenv(name, value)
    handler = runpy.run_path(str(ROOT / "functions" / "chat.py"))["handler"]
    token = DevIssuer(data_dir).mint("user-1", audience=Settings(_env_file=None).auth0_audience)
    return handler, token


def _answer(response: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    assert response["statusCode"] == 200, response
    events = parse_sse(response["body"])
    text = "".join(e["content"] for e in events if e["type"] == "agent_message")
    return text, events


def test_two_warm_invocations_both_answer(lambda_handler, gemini_api):
    handler, token = lambda_handler
    gemini_api.script(gemini_text("Prima ", "risposta."), gemini_text("Seconda ", "risposta."))

    first, first_events = _answer(handler(chat_event(token, "Prima domanda"), None))
    second, second_events = _answer(handler(chat_event(token, "Seconda domanda"), None))

    assert (first, second) == ("Prima risposta.", "Seconda risposta.")
    for events in (first_events, second_events):
        assert [e["type"] for e in events][-1] == "done"
        assert "error" not in {e["type"] for e in events}
    assert len(gemini_api.requests) == 2


def test_a_new_event_loop_per_invocation_still_answers(lambda_handler, gemini_api, loop):
    """Runtimes that start a loop per request (as Vercel's did): the first loop is
    closed before the second request, and the model client must not come from it."""
    handler, token = lambda_handler
    gemini_api.script(gemini_text("Uno."), gemini_text("Due."))

    first, _ = _answer(handler(chat_event(token, "Prima domanda"), None))
    second_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(second_loop)
    loop.close()
    try:
        second, events = _answer(handler(chat_event(token, "Seconda domanda"), None))
    finally:
        asyncio.set_event_loop(loop)
        second_loop.close()

    assert (first, second) == ("Uno.", "Due.")
    assert "error" not in {e["type"] for e in events}


def test_a_client_kept_across_loops_would_break(
    lambda_handler, gemini_api, loop, caplog, monkeypatch
):
    """The control experiment: one Gemini client kept across requests (and so never closed)
    reproduces the bug the per-request factory avoids, so the test above can fail."""
    handler, token = lambda_handler

    async def keep_open(model: Any) -> None:
        pass

    monkeypatch.setattr("aircoach.turn.chat_models.aclose_model", keep_open)
    # The second request still reaches the server over the pooled connection; its answer
    # never reaches the client.
    gemini_api.script(gemini_text("Uno."), gemini_text("Due."))
    settings = Settings(_env_file=None)  # the deployment's environment (the fixture's)

    class KeptModels:
        """What the factory avoids: one model client for every request."""

        def __init__(self) -> None:
            self.cached: list[Any] = []

        async def models_for(self, tools: list[Any]) -> list[Any]:
            if not self.cached:
                self.cached.append(build_model(settings, tools))
            return self.cached

    handler = Mangum(app_with(settings, models=KeptModels()), lifespan="off")
    first, _ = _answer(handler(chat_event(token, "Prima domanda"), None))
    second_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(second_loop)
    loop.close()
    try:
        _, events = _answer(handler(chat_event(token, "Seconda domanda"), None))
    finally:
        asyncio.set_event_loop(loop)
        second_loop.close()

    assert first == "Uno."
    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    assert "Event loop is closed" in caplog.text
    # The request was written before the client failed; wait for the server to read it.
    assert gemini_api.wait_for_requests(2) == 2

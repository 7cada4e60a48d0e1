"""The phrases students use in a quiz, through the chat with the offline model."""

from __future__ import annotations

from typing import Any

from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, chat

EXPLANATION = "La portanza è proporzionale al quadrato della velocità"  # chapter 1, question 1


def said(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "agent_message")


async def test_why_right_after_a_grading_explains_it_from_the_manual(settings: Settings, auth):
    async with asgi_client(app_with(settings)) as client:
        for query in ("perché è sbagliata?", "perché?", "spiegamelo meglio"):
            await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
            graded = await chat(client, auth(), "boh, la b")
            assert graded[0]["data"]["corretta"] is False
            assert graded[0]["data"]["riferimento"] == "1.2"
            events = await chat(client, auth(), query)
            text = said(events)
            assert not [e for e in events if e["type"] == "tool_result"], query  # no new question
            assert EXPLANATION in text and "(Fonte: § 1.2" in text, query
            assert "c) quadruplica" in text
        # Not right after a grading: no explanation of it.
        assert EXPLANATION not in said(await chat(client, auth(), "perché?"))

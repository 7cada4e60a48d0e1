"""The citation guard end to end: the real Gemini and OpenAI clients against fake model
servers, a fake kb service on loopback, the stream, the JSON answer and the stored turn."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from aircoach.grounding.guard import caveat
from tests.helpers import chat
from tests.llm.conftest import app_client
from tests.llm.fakes import gemini_call, gemini_text, openai_call, openai_text
from tests.tools.conftest import tool_urls
from tests.tools.fake_service import FakeToolService, Reply

pytestmark = pytest.mark.integration

PASSAGE = {
    "results": [
        {
            "riferimento": "ADeR-12134",
            "materia": "riscossione",
            "score": 0.82,
            "testo": "La Legge n. 199/2025 disciplina la definizione agevolata dei carichi.",
        }
    ]
}
QUESTION = "Quale legge disciplina la definizione agevolata?"
WRONG = "La definizione agevolata è disciplinata dalla Legge 197/2022."
RIGHT = "La definizione agevolata è disciplinata dalla L. 199/2025."


@pytest.fixture
def kb() -> Iterator[FakeToolService]:
    service = FakeToolService().start()
    service.plan("/kb", Reply(200, PASSAGE))
    yield service
    service.stop()


def _gemini(gemini_settings: Any, kb: FakeToolService, **overrides: Any) -> Any:
    return gemini_settings(tool_env=tool_urls(kb), **overrides)


async def test_a_citation_the_passage_does_not_make_is_unverified_with_a_caveat(
    gemini_api, gemini_settings, kb, auth
):
    gemini_api.script(gemini_call("kb_search", query="definizione agevolata"), gemini_text(WRONG))
    async with app_client(_gemini(gemini_settings, kb)) as (client, app):
        events = await chat(client, auth(), QUESTION, tools={"kb_search": True})
        (turn,) = await app.state.services.chats.recent_turns("user-1", 5)

    types = [e["type"] for e in events]
    assert types == ["tool_result", "agent_message", "grounding", "agent_message", "done"]
    grounding = events[2]
    assert grounding["citations"] == [
        {
            "text": "Legge 197/2022",
            "key": "legge 197/2022",
            "verified": False,
            "reason": "not_in_context",
            "sentence": {"start": 0, "end": len(WRONG)},
            "source_says": [],
            "source": None,
        }
    ]
    assert grounding["unverified"] == ["Legge 197/2022"]
    assert events[3]["content"] == caveat(["Legge 197/2022"])
    assert "Attenzione: non trovo conferma nelle fonti per Legge 197/2022" in events[3]["content"]
    assert "verifica con il tuo istruttore" in events[3]["content"]

    assert turn.system == WRONG  # the caveat is the client's note, not the model's answer
    assert turn.grounding is not None
    assert turn.grounding.model_dump() == {
        k: grounding[k] for k in ("citations", "unverified", "withheld")
    }
    assert [(r.tool_name, r.count, r.refs) for r in turn.retrieved] == [
        ("kb_search", 1, ["ADeR-12134"])
    ]
    # The model was told to cite only its context.
    system = gemini_api.requests[0].body["systemInstruction"]["parts"][0]["text"]
    assert "## Citazioni" in system and "solo se compaiono nel tuo contesto" in system


async def test_the_same_citation_written_differently_is_verified_and_no_caveat(
    gemini_api, gemini_settings, kb, auth
):
    gemini_api.script(gemini_call("kb_search", query="definizione agevolata"), gemini_text(RIGHT))
    async with app_client(_gemini(gemini_settings, kb)) as (client, app):
        events = await chat(client, auth(), QUESTION, tools={"kb_search": True})
        (turn,) = await app.state.services.chats.recent_turns("user-1", 5)

    assert [e["type"] for e in events] == ["tool_result", "agent_message", "grounding", "done"]
    assert events[2] == {
        "type": "grounding",
        "citations": [_verified("L. 199/2025", "legge 199/2025", RIGHT)],
        "unverified": [],
        "withheld": [],
    }
    assert turn.grounding is not None and turn.grounding.unverified == []


async def test_the_caveat_can_be_switched_off(gemini_api, gemini_settings, kb, auth):
    gemini_api.script(gemini_call("kb_search", query="definizione agevolata"), gemini_text(WRONG))
    settings = _gemini(gemini_settings, kb, grounding_caveat=False)
    async with app_client(settings) as (client, _):
        events = await chat(client, auth(), QUESTION, tools={"kb_search": True})
    assert [e["type"] for e in events] == ["tool_result", "agent_message", "grounding", "done"]
    assert events[2]["unverified"] == ["Legge 197/2022"]


def _verified(text: str, key: str, sentence: str) -> dict[str, Any]:
    return {
        "text": text,
        "key": key,
        "verified": True,
        "reason": None,
        "sentence": {"start": 0, "end": len(sentence)},
        "source_says": [],
        "source": None,
    }


def _openai(model_settings: Any, openai_api: Any, kb: FakeToolService, **overrides: Any) -> Any:
    return model_settings(
        model_provider="openai",
        model_name="fake-llama",
        openai_base_url=f"{openai_api.url}/v1",
        tool_env=tool_urls(kb),
        **overrides,
    )


async def test_a_json_answer_is_regenerated_once_with_a_correction(
    openai_api, model_settings, kb, auth
):
    openai_api.script(
        openai_call("kb_search", query="definizione agevolata"),
        openai_text(WRONG),
        openai_text("La definizione agevolata è prevista dalla Legge n. 199/2025."),
    )
    async with app_client(_openai(model_settings, openai_api, kb)) as (client, app):
        response = await client.post(
            "/api/stream_query",
            json={"query": QUESTION, "stream": False, "tools": {"kb_search": True}},
            headers=auth(),
        )
        (turn,) = await app.state.services.chats.recent_turns("user-1", 5)

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["answer"] == "La definizione agevolata è prevista dalla Legge n. 199/2025."
    assert body["grounding"] == {
        "citations": [_verified("Legge n. 199/2025", "legge 199/2025", body["answer"])],
        "unverified": [],
        "withheld": [],
        "regenerated": True,
    }
    correction = openai_api.requests[2].body["messages"][-1]
    assert correction["role"] == "user"
    assert "Legge 197/2022" in correction["content"]  # what it cited wrongly
    assert "Legge n. 199/2025" in correction["content"]  # what the context does cite
    assert "tools" not in openai_api.requests[2].body  # a plain rewrite, no tool calls
    assert turn.system == body["answer"] and turn.grounding is not None
    assert [t.offset for t in turn.tools] == [0]


async def test_a_json_answer_still_unverified_after_the_rewrite_gets_the_caveat(
    openai_api, model_settings, kb, auth
):
    openai_api.script(
        openai_call("kb_search", query="definizione agevolata"),
        openai_text(WRONG),
        openai_text(WRONG),
    )
    async with app_client(_openai(model_settings, openai_api, kb)) as (client, _):
        response = await client.post(
            "/api/stream_query",
            json={"query": QUESTION, "stream": False, "tools": {"kb_search": True}},
            headers=auth(),
        )
    body = response.json()
    assert body["answer"] == WRONG + caveat(["Legge 197/2022"])
    assert body["grounding"]["unverified"] == ["Legge 197/2022"]
    assert body["grounding"]["regenerated"] is True

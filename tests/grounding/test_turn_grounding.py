"""The guard inside a chat turn (scripted model, in process): the context it reads (prompt
docs, the course manual, tool texts of this turn and of the turns the model was shown), the
event and caveat, the stored turn, the JSON rewrite, follow-ups and the summary line."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, SystemMessage

from aircoach.grounding.context import ThreadView
from aircoach.grounding.guard import caveat
from aircoach.grounding.models import GroundingResult
from aircoach.settings import Settings
from aircoach.turn.memory import messages_from_turns
from tests.helpers import ObservedChats, app_with, asgi_client, chat, copy_prompt_docs
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.sse import parse_sse
from tests.tools.conftest import tool_urls
from tests.tools.fake_service import FakeToolService, Reply

MANUAL = """# Spazio aereo

Le quote minime VFR sono fissate dalla SERA.5005(f) del Reg. (UE) n. 923/2012.
"""
AIRSPACE = "Quali sono le classi di spazio aereo e i minimi VFR?"


@pytest.fixture
def manual_settings(settings: Settings, tmp_path: Path) -> Settings:
    """The shipped docs with a small course manual of the test's own (the `manual/` area)."""
    docs = copy_prompt_docs(tmp_path / "docs")
    shutil.rmtree(docs / "manual")
    (docs / "manual").mkdir()
    (docs / "manual" / "01_spazio.md").write_text(MANUAL, "utf-8")
    return settings.model_copy(update={"prompt_docs_dir": docs})


def shape(events: list[dict]) -> list[str]:
    """The event types, a run of answer deltas as one `agent_message`."""
    types: list[str] = []
    for event in events:
        if not (event["type"] == "agent_message" and types and types[-1] == "answer"):
            types.append("answer" if event["type"] == "agent_message" else event["type"])
    return types


def by_type(events: list[dict], kind: str) -> dict:
    (event,) = [e for e in events if e["type"] == kind]
    return event


def _check(text: str, key: str, reason: str | None, sentence: dict) -> dict:
    return {
        "text": text,
        "key": key,
        "verified": reason is None,
        "reason": reason,
        "sentence": sentence,
        "source_says": [],
        "source": None,
    }


async def _stored(app, user: str = "user-1"):
    return await app.state.services.chats.recent_turns(user, 10)


async def test_the_manual_is_context_and_an_invented_rule_gets_the_caveat(manual_settings, auth):
    answer = "Lo dice la SERA.5005(f) del Regolamento (UE) 923/2012, e anche la SERA.5010."
    script = Script([text(answer)])
    app = app_with(manual_settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "Quali sono le quote minime VFR?")
    (turn,) = await _stored(app)

    # The caveat is its own delta after the grounding event.
    assert shape(events) == ["answer", "grounding", "answer", "done"]
    assert events[-2] == {"type": "agent_message", "content": caveat(["SERA.5010"])}
    whole = {"start": 0, "end": len(answer)}  # one sentence
    assert by_type(events, "grounding")["citations"] == [
        _check("SERA.5005(f)", "sera.5005(f)", None, whole),
        _check("Regolamento (UE) 923/2012", "reg. ue 923/2012", None, whole),
        # The manual names SERA and other points of it, not this one.
        _check("SERA.5010", "sera.5010", "article_not_in_context", whole),
    ]
    assert turn.system == answer and turn.grounding is not None
    assert turn.grounding.unverified == ["SERA.5010"]


async def test_without_the_manual_the_same_rule_is_unverified(settings, auth):
    script = Script([text("Lo dice la SERA.5005(f).")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "Quali sono le quote minime VFR?")
    assert by_type(events, "grounding")["unverified"] == ["SERA.5005(f)"]


async def test_an_answer_that_cites_nothing_gets_no_grounding(settings, auth, caplog):
    caplog.set_level(logging.INFO, logger="aircoach.turn.turn")
    app = app_with(settings, models=ScriptedModels(Script([text("Ciao! Come posso aiutarti?")])))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "ciao")
    (turn,) = await _stored(app)
    assert shape(events) == ["answer", "done"]
    assert turn.grounding is None and turn.retrieved == []
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("turn ")]
    assert "followup=False retrieved=- cited=- unverified=0 regenerated=False" in line


async def test_the_system_prompt_tells_the_model_to_cite_only_its_context(settings, auth):
    script = Script([text("Ciao!")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await chat(client, auth(), "ciao")
    system = script.calls[0][0]
    assert isinstance(system, SystemMessage)
    assert "## Citazioni" in system.text and "secondo la normativa vigente" in system.text


async def test_a_json_answer_is_rewritten_once_and_the_thread_follows_the_store(
    manual_settings, auth
):
    wrong = "Lo prevede la SERA.5010."
    right = "Lo prevede la SERA.5005(f)."
    script = Script([text(wrong), text(right), text("Prego!")])
    chats = ObservedChats(app_with(manual_settings).state.services.chats)
    app = app_with(manual_settings, models=ScriptedModels(script), chats=chats)
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query",
            json={"query": "Quali sono le quote minime VFR?", "stream": False},
            headers=auth(),
        )
        await chat(client, auth(), "grazie")
    body = response.json()
    assert body["answer"] == right
    assert body["grounding"] == {
        "citations": [
            _check("SERA.5005(f)", "sera.5005(f)", None, {"start": 0, "end": len(right)})
        ],
        "unverified": [],
        "withheld": [],
        "regenerated": True,
    }
    correction = script.calls[1][-1]
    assert correction.type == "human" and "SERA.5010" in correction.text
    assert "SERA.5005(f)" in correction.text  # what the context cites
    # The next turn's thread was rebuilt from the store: it holds the second answer only.
    answers = [m.text for m in script.calls[2] if isinstance(m, AIMessage)]
    assert answers == [right]
    assert chats.reseeds == 1  # the rebuild (a warm thread is never reread)


async def test_the_rewrite_can_be_switched_off(manual_settings, auth):
    wrong = "Lo prevede la SERA.5010."
    settings = manual_settings.model_copy(update={"grounding_regenerate": False})
    app = app_with(settings, models=ScriptedModels(Script([text(wrong)])))
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query", json={"query": "Quote minime?", "stream": False}, headers=auth()
        )
    body = response.json()
    assert body["answer"] == wrong + caveat(["SERA.5010"])
    assert body["grounding"]["regenerated"] is False
    assert body["grounding"]["unverified"] == ["SERA.5010"]


async def test_a_followup_gets_the_concise_prefix(settings, auth, caplog):
    caplog.set_level(logging.INFO, logger="aircoach.turn.turn")
    script = Script([text("Le classi vanno dalla A alla G."), text("In classe D: 5 km.")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await chat(client, auth(), AIRSPACE)
        await chat(client, auth(), "e in classe D?")
    first, second = (calls[0].text for calls in script.calls)
    assert not first.startswith("## Domanda di seguito")
    assert second.startswith("## Domanda di seguito")
    assert "spazio, aereo, minimi, VFR" in second.splitlines()[1]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("turn ")]
    assert "followup=False" in lines[0] and "followup=True" in lines[1]


async def test_no_history_means_no_followup(settings, auth):
    script = Script([text("Le classi vanno dalla A alla G."), text("In classe D: 5 km.")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await chat(client, auth(), AIRSPACE)
        await chat(client, auth(), "e in classe D?", chat_history=False)
    assert not script.calls[1][0].text.startswith("## Domanda di seguito")


# --- with a kb service on loopback ---


@pytest.fixture
def kb() -> Iterator[FakeToolService]:
    service = FakeToolService().start()
    yield service
    service.stop()


def _passage(text_: str, ref: str) -> Reply:
    return Reply(200, {"results": [{"riferimento": ref, "materia": "regole", "testo": text_}]})


@pytest.mark.integration
async def test_a_followup_searches_the_topic_first_and_keeps_the_models_arguments(
    settings, auth, kb, caplog
):
    caplog.set_level(logging.INFO, logger="aircoach.turn.turn")
    kb.plan("/kb", _passage("In classe D la visibilità minima è 5 km.", "7.3"))
    settings = settings.model_copy(update={"tool_env": tool_urls(kb)})
    script = Script(
        [
            text("Le classi vanno dalla A alla G."),
            call("kb_search", query="e in classe D?"),  # the student's words, as they came
            text("In classe D: 5 km."),
        ]
    )
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await chat(client, auth(), AIRSPACE)
        events = await chat(client, auth(), "e in classe D?", tools={"kb_search": True})
    _, turn = await _stored(app)

    expanded = "spazio aereo minimi VFR classe D"
    (hit,) = kb.hits("/kb")
    assert hit.json["query"] == expanded  # what the service was asked
    assert events[0]["data"]["meta"]["expanded_query"] == expanded
    (stored,) = turn.tools
    assert stored.arguments == {"query": "e in classe D?"}  # the model's own arguments
    assert stored.data["meta"]["expanded_query"] == expanded
    assert [(r.tool_name, r.refs) for r in turn.retrieved] == [("kb_search", ["7.3"])]
    line = [r.getMessage() for r in caplog.records if r.getMessage().startswith("turn ")][-1]
    assert "followup=True retrieved=kb_search:7.3" in line

    # The topic is rebuilt exactly from the store: the reseeded thread shows the same view.
    memory = app.state.services.memory
    state = await memory.checkpointer.aget_tuple(memory.config("user-1:v" + turn.prompt_version))
    warm = ThreadView.of(state.checkpoint["channel_values"]["messages"], 10)
    cold = ThreadView.of(messages_from_turns(await _stored(app)), 10)
    assert warm == cold and warm.questions == [AIRSPACE, "e in classe D?"]


@pytest.mark.integration
async def test_what_an_earlier_turns_tool_said_is_context(settings, auth, kb):
    # A regulation that neither the prompt docs nor the shipped manual cite.
    kb.plan("/kb", _passage("L'EASA nasce dal Reg. (UE) n. 2018/1139.", "2.1"))
    settings = settings.model_copy(update={"tool_env": tool_urls(kb)})
    cited = "È il Regolamento (UE) 2018/1139."
    script = Script(
        [
            call("kb_search", query="nascita EASA"),
            text("Te lo dice il manuale."),
            text(cited),
            text(cited),
        ]
    )
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await chat(client, auth(), "Quando nasce l'EASA?", tools={"kb_search": True})
        # The answer's sentence has no subject: the question's (`nasce`) is compared.
        shown = await chat(client, auth(), "Da quale regolamento nasce, di preciso?")
        hidden = await chat(client, auth(), "Da quale regolamento nasce?", chat_history=False)
    # A tool text the model was shown verifies; when the history is not shown, it does not.
    assert by_type(shown, "grounding")["citations"][0]["verified"] is True
    assert by_type(hidden, "grounding")["unverified"] == ["Regolamento (UE) 2018/1139"]


@pytest.mark.parametrize("caveats", [True, False])
async def test_a_retried_answer_keeps_its_verdict_and_its_caveat(settings, auth, caveats):
    settings = settings.model_copy(
        update={"grounding_policy": "caveat", "grounding_caveat": caveats}
    )
    cited = "Secondo la SERA.5010 la visibilità minima in volo VFR è di 5 km sotto FL 100."
    app = app_with(settings, models=ScriptedModels(Script([text(cited)])))
    body = {"query": "visibilità minima VFR?", "stream": False, "client_message_id": "m-1"}
    async with asgi_client(app) as client:
        first = (await client.post("/api/stream_query", json=body, headers=auth())).json()
        again = await client.post("/api/stream_query", json=body, headers=auth())
        streamed = await client.post(
            "/api/stream_query", json={**body, "stream": True}, headers=auth()
        )
    assert first["grounding"]["unverified"] == ["SERA.5010"]
    note = caveat(GroundingResult(**first["grounding"])) if caveats else ""
    assert first["answer"] == cited + note
    # The JSON replay: the same answer, the same verdict and caveat.
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["answer"] == first["answer"]
    assert again.json()["grounding"] == first["grounding"]
    # The streamed replay: the answer, the verdict, then the caveat, as the live stream.
    events = parse_sse(streamed.text)
    assert [e["type"] for e in events] == ["agent_message", "grounding"] + (
        ["agent_message"] if caveats else []
    ) + ["done"]
    assert events[1]["unverified"] == ["SERA.5010"]
    assert "".join(e["content"] for e in events if e["type"] == "agent_message") == first["answer"]

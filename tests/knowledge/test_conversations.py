"""The five conversations of issue 34, through the API with the offline coach: a new subject
after an off-topic one, a change of subject after a short exchange, a bare "perché?", an
off-topic question, a question of several parts; and a request too vague to search."""

from __future__ import annotations

import re

import pytest

from tests.helpers import chat

# A student's conversation played through the app: an integration module (docs/testing.md).
pytestmark = pytest.mark.integration

NOT_FOUND = "Non ho trovato questo argomento"
_CITED = re.compile(r"§ (\d+\.\d+) \(")


def _answer(events: list[dict]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "agent_message")


def _results(events: list[dict]) -> list[dict]:
    return [e["data"] for e in events if e["type"] == "tool_result"]


def _expanded(events: list[dict]) -> list[str]:
    """The queries the search service expanded with the conversation's topic."""
    return [r["meta"]["expanded_query"] for r in _results(events) if "expanded_query" in r["meta"]]


def _best(events: list[dict]) -> list[str]:
    """Each search's best section."""
    return [r["items"][0]["riferimento"] if r["items"] else "" for r in _results(events)]


async def test_carbonara_then_qnh_searches_the_qnh_alone(client, auth):
    headers = auth()
    first = await chat(client, headers, "Come si prepara la carbonara?")
    assert NOT_FOUND in _answer(first) and not _CITED.findall(_answer(first))
    events = await chat(client, headers, "Spiegami il QNH")
    answer = _answer(events)
    assert _expanded(events) == [] and _best(events) == ["3.2"]
    assert _CITED.findall(answer)[0] == "3.2" and "QNH" in answer


async def test_variometro_after_load_factor_answers_the_variometro(client, auth):
    headers = auth()
    await chat(client, headers, "Spiegami il fattore di carico in virata")
    events = await chat(client, headers, "come funziona il variometro")
    answer = _answer(events)
    assert _CITED.findall(answer) == ["3.7"] and "variometro" in answer.lower()
    assert _expanded(events) == [] and _best(events) == ["3.7"]


async def test_why_after_the_carburettor_explains_the_carburettor(client, auth):
    headers = auth()
    await chat(client, headers, "come mi accorgo del ghiaccio al carburatore")
    events = await chat(client, headers, "perché?")
    answer = _answer(events)
    assert _CITED.findall(answer)[0] == "4.3" and "3.5" not in _CITED.findall(answer)
    assert "carburatore" in answer and "ghiaccio" in answer


async def test_an_off_topic_question_cites_nothing_and_offers_the_chapters(client, auth):
    events = await chat(client, auth(), "Chi ha vinto il campionato di serie A?")
    answer = _answer(events)
    assert NOT_FOUND in answer and not _CITED.findall(answer)
    assert "1. Principi di aerodinamica" in answer or "Aerodinamica" in answer


async def test_a_question_of_several_parts_is_searched_by_part_and_each_cited(client, auth):
    events = await chat(client, auth(), "cos'è il wind shear? e il microburst?")
    assert sorted(_best(events)) == ["5.14", "5.15"]  # one search per part, side by side
    answer = _answer(events)
    assert set(_CITED.findall(answer)) >= {"5.14", "5.15"}
    assert answer.index("- cos'è il wind shear:") < answer.index("- il microburst:")


async def test_qnh_qfe_and_1013_answers_each_part(client, auth):
    events = await chat(client, auth(), "Differenza tra QNH e QFE e quando si usa il 1013?")
    assert len(_results(events)) == 2
    answer = _answer(events)
    assert "QFE" in answer and "1013" in answer and "3.2" in _CITED.findall(answer)


@pytest.mark.parametrize("question", ["spiegami quella cosa", "ho un problema", "ho dei dubbi"])
async def test_a_request_too_vague_to_search_gets_a_clarifying_question(client, auth, question):
    events = await chat(client, auth(), question)
    answer = _answer(events)
    assert [e for e in events if e["type"] == "tool_call"] == []
    assert answer.rstrip().endswith("«fattore di carico».") and "?" in answer
    assert not _CITED.findall(answer)

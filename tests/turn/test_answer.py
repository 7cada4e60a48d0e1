"""The JSON answer of a turn is never empty."""

from __future__ import annotations

from aircoach.turn.answer import json_answer
from aircoach.turn.records import ToolRecord

QUESTION = {
    "capitolo": 2,
    "numero": 3,
    "testo": "Che cos'è il QNH?",
    "risposte": {"b": "B", "a": "A"},
}


def test_the_model_text_wins_and_blank_falls_back():
    tool = ToolRecord(tool_name="domanda_teoria", data={"question": QUESTION})
    assert json_answer("Ecco.", tool, "fallback") == "Ecco."
    assert json_answer("  ", None, "fallback") == "fallback"
    assert json_answer("", ToolRecord(tool_name="x", data={"items": []}), "fallback") == "fallback"
    assert (
        json_answer("", tool, "fallback") == "Capitolo 2, domanda 3: Che cos'è il QNH?\na) A\nb) B"
    )


def test_a_huge_field_is_cut():
    question = {**QUESTION, "testo": "x" * 50_000}
    answer = json_answer("", ToolRecord(tool_name="q", data={"questions": [question]}), "f")
    assert len(answer) < 1100


async def test_a_json_turn_that_starts_a_mock_exam_answers_with_the_exam(settings, auth):
    """ "simulazione d'esame" with `stream: false`: the tool ends the turn with the exam in
    `tool.data.esame`; `answer` writes it out, numbered as the answers name it, with how to
    answer (it was the fallback "Mi dispiace, non sono riuscito a preparare una risposta")."""
    from tests.helpers import app_with, asgi_client

    async with asgi_client(app_with(settings)) as client:
        response = await client.post(
            "/api/stream_query",
            json={"query": "simulazione d'esame con 5 domande", "stream": False},
            headers=auth(),
        )
    body = response.json()
    exam = body["tool"]["data"]["esame"]
    answer = body["answer"]
    assert answer.startswith("Simulazione d'esame: 5 domande, ")
    assert "«1a 2b 3c»" in answer and "«consegno»" in answer
    first, last = exam["domande"][0], exam["domande"][-1]
    assert f"1. (capitolo {first['capitolo']}) {first['testo']}\n   a) " in answer
    assert f"5. (capitolo {last['capitolo']}) {last['testo']}" in answer
    assert "Mi dispiace" not in answer and "verifica_risposta" not in answer

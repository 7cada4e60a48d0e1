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

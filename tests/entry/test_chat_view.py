"""The terminal chat: one line per tool result, a question card for the quiz, the grading
with its explanation, the JSON with `--raw`; and a whole conversation against a server."""

from __future__ import annotations

import json

import pytest

from aircoach.entry.chat_view import tool_lines
from tests.helpers import app_with, served

MANUAL = {
    "success": True,
    "items": [
        {"riferimento": "3.2", "titolo": "Altimetro e regolazioni", "testo": "x" * 500},
        {"riferimento": "quiz 3.12", "titolo": "Domanda sul QNH", "tipo": "quiz"},
    ],
    "meta": {"latency_ms": 3},
}


def test_a_manual_search_is_one_line_naming_its_sections():
    assert tool_lines("kb_search", MANUAL) == [
        "[manuale] § 3.2 Altimetro e regolazioni; Domanda sul QNH"
    ]
    assert tool_lines("kb_search", {"success": True, "items": []}) == ["[manuale] nessun risultato"]
    many = {"items": [{"title": f"Voce {i} " + "parola " * 10} for i in range(20)]}
    (line,) = tool_lines("lex_search", many)
    assert line.startswith("[normativa] Voce 0") and len(line) <= len("[normativa] ") + 100


def test_a_failed_tool_is_one_line_with_its_error():
    assert tool_lines("lex_search", {"success": False, "error": "timeout"}) == [
        "[normativa] errore: timeout"
    ]


def test_a_question_is_a_card_and_a_grading_a_verdict_with_its_explanation():
    question = {
        "capitolo": 3,
        "numero": 12,
        "argomento": "altimetro",
        "difficolta": "facile",
        "testo": "Con il QNH l'altimetro indica:",
        "risposte": {"a": "l'altitudine", "b": "l'altezza"},
    }
    assert tool_lines("domanda_teoria", {"question": question, "query": {}}) == [
        "[domanda] Capitolo 3 · domanda 12 · altimetro · facile",
        "  Con il QNH l'altimetro indica:",
        "    a) l'altitudine",
        "    b) l'altezza",
        '  (rispondi con "la a", "la b")',
    ]
    graded = {
        "capitolo": 3,
        "numero": 12,
        "risposta": "b",
        "corretta": False,
        "risposta_corretta": "a",
        "spiegazione": "Il QNH dà l'altitudine sul mare.",
    }
    assert tool_lines("verifica_risposta", graded) == [
        "[verifica] Capitolo 3 · domanda 12: ✘ sbagliata (hai risposto b, giusta a)",
        "  Il QNH dà l'altitudine sul mare.",
    ]


def test_raw_prints_the_json():
    (line,) = tool_lines("kb_search", MANUAL, raw=True)
    assert line.startswith("[kb_search] {")
    assert json.loads(line.removeprefix("[kb_search] ")) == MANUAL


@pytest.mark.integration
@pytest.mark.parametrize("raw", [False, True])
def test_a_conversation_in_the_terminal(settings, token, monkeypatch, capsys, raw):
    from aircoach.__main__ import main

    queries = iter(["Che cosa provoca lo stallo di un'ala?", "Dammi una domanda del capitolo 3"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(queries, ""))
    with served(app_with(settings)) as origin:
        argv = ["chat", "--url", origin, "--sub", "dev|terminale", "--token", token("dev|t")]
        main([*argv, "--raw"] if raw else argv)
    out = capsys.readouterr().out
    if raw:
        assert '[kb_search] {\n "success": true' in out
        assert "[domanda_teoria] {" in out
        return
    assert "{" not in out  # no JSON at all
    lines = out.splitlines()
    manual = [line for line in lines if line.startswith("[manuale] ")]
    assert len(manual) == 1 and manual[0].startswith("[manuale] § 1.4 Lo stallo")
    assert any(line.startswith("coach> [modello offline] Dal manuale del corso:") for line in lines)
    card = lines.index(next(line for line in lines if line.startswith("[domanda] Capitolo 3")))
    assert lines[card + 2].startswith("    a) ") and '(rispondi con "la a"' in out
    assert len(lines) < 30

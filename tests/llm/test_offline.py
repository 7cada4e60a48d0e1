"""The offline model: tool scoring, argument filling, passages, streaming."""

from __future__ import annotations

import threading

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from aircoach.llm.offline import (
    OFFLINE_NOTICE,
    OfflineChatModel,
    best_passage,
    fill_arguments,
    score_tool,
)
from aircoach.settings import ROOT
from aircoach.tools.registry import ToolRegistry

QUIZ = ToolRegistry.from_docs(
    {"tools.json": (ROOT / "prompt_docs" / "tools.json").read_text("utf-8")}
).specs["domanda_teoria"]


def test_quiz_requests_score_above_the_threshold_and_questions_below():
    for query in (
        "Dammi una domanda del capitolo 3",
        "fammi un quiz",
        "Domanda numero 2 del capitolo 5",
    ):
        assert score_tool(query, QUIZ.description, QUIZ.examples) >= 0.5, query
    for query in ("Cos'è la portanza?", "Come funziona il motore a pistoni?", "ciao"):
        assert score_tool(query, QUIZ.description, QUIZ.examples) < 0.5, query


def test_arguments_are_read_from_the_schema():
    assert fill_arguments("Dammi una domanda del capitolo 3", QUIZ.parameters) == {"capitolo": 3}
    assert fill_arguments("domanda numero 4 del capitolo 7", QUIZ.parameters) == {
        "capitolo": 7,
        "numero": 4,
    }
    assert fill_arguments("Fammi una domanda sull'altimetro", QUIZ.parameters) == {
        "testo": "altimetro"
    }
    assert (
        fill_arguments('cerca "pressione statica"', QUIZ.parameters)["testo"] == "pressione statica"
    )
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}, "lang": {"type": "string", "enum": ["ita", "eng"]}},
        "required": ["q"],
    }
    assert fill_arguments("norme in ita", schema) == {"q": "norme in ita", "lang": "ita"}


def test_best_passage_prefers_shared_terms():
    doc = "Il motore è a quattro tempi e ha due magneti.\n\nLa portanza cresce con l'angolo di attacco fino allo stallo."
    assert "portanza" in best_passage("Quando cresce la portanza?", doc)


async def test_it_calls_the_tool_then_answers_from_tool_results():
    model = OfflineChatModel(tool_examples={QUIZ.name: QUIZ.examples}).bind_tools([_as_tool()])
    reply = await model.ainvoke(
        [SystemMessage("prompt"), HumanMessage("Dammi una domanda del capitolo 3")]
    )
    assert reply.tool_calls[0]["name"] == "domanda_teoria" and reply.tool_calls[0]["args"] == {
        "capitolo": 3
    }
    after = await model.ainvoke(
        [HumanMessage("x"), ToolMessage("risultato", tool_call_id="1", name="echo")]
    )
    assert after.text.startswith(OFFLINE_NOTICE) and "risultato" in after.text


async def test_it_streams_word_by_word_and_says_it_is_offline():
    model = OfflineChatModel()
    system = SystemMessage(
        "Saluti.\n\nLa portanza è la forza che sostiene l'aereo in volo, perpendicolare al vento relativo."
    )
    chunks = [c.text async for c in model.astream([system, HumanMessage("cos'è la portanza")])]
    assert len(chunks) > 5 and "".join(chunks).startswith(OFFLINE_NOTICE)
    assert "perpendicolare" in "".join(chunks)


def _as_tool():
    from langchain_core.tools import StructuredTool

    async def run(**kwargs):
        return "x"

    return StructuredTool.from_function(
        coroutine=run, name=QUIZ.name, description=QUIZ.description, args_schema=QUIZ.parameters
    )


def test_quoted_text_is_read_between_any_pair_of_quotes():
    search = {"properties": {"testo": {"type": "string"}}}
    assert fill_arguments('Cerca "vento al traverso"', search) == {"testo": "vento al traverso"}
    assert fill_arguments("Cerca «vento al traverso»", search) == {"testo": "vento al traverso"}
    assert fill_arguments("Cerca «« «vento»", search) == {"testo": "vento"}
    assert fill_arguments("capitolo   n. 4", {"properties": {"capitolo": {"type": "integer"}}}) == {
        "capitolo": 4
    }


@pytest.mark.parametrize(
    "query",
    [
        "«" * 200_000,  # 4,000 of these took 370 ms (quadratic backtracking)
        "“" + "a" * 200_000,
        "capitolo" + " " * 200_000,  # two `\s*` in a row: quadratic too
        "sul" + "\t" * 200_000,
        "capitolo n " * 20_000,
    ],
)
def test_reading_arguments_is_linear_in_the_query(query):
    """Far longer than any query (4,000 characters): linear patterns take milliseconds, the
    quadratic ones took hours. The deadline is for a hang, not a timing."""
    params = {
        "properties": {
            "capitolo": {"type": "integer"},
            "testo": {"type": "string", "description": "Testo da cercare"},
            "q": {"type": "string", "description": "testo da cercare"},
        }
    }
    worker = threading.Thread(target=fill_arguments, args=(query, params), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "fill_arguments backtracks on this input"

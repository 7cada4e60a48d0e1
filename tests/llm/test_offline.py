"""The offline model: tool scoring, argument filling, streaming. Its course answers are in
`test_offline_course.py`."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from aircoach.llm import offline_quiz
from aircoach.llm.offline import (
    OFFLINE_NOTICE,
    OfflineChatModel,
    fill_arguments,
    score_tool,
)
from aircoach.quiz.tools import domanda_teoria
from aircoach.settings import ROOT
from aircoach.tools.registry import ToolRegistry

SHIPPED = ToolRegistry.from_docs(
    {"tools.json": (ROOT / "prompt_docs" / "tools.json").read_text("utf-8")}
).specs
QUIZ = SHIPPED["domanda_teoria"]


def test_quiz_requests_score_above_the_threshold_and_questions_below():
    for query in (
        "Dammi una domanda del capitolo 3",
        "fammi un quiz",
        "Domanda numero 2 del capitolo 5",
    ):
        assert score_tool(query, QUIZ.description, QUIZ.examples) >= 0.5, query
    for query in ("Cos'è la portanza?", "Come funziona il motore a pistoni?", "ciao"):
        assert score_tool(query, QUIZ.description, QUIZ.examples) < 0.5, query


def test_tomorrow_is_no_quiz_question():
    """ "domani" has the first five letters of "domanda": "cerca il meteo di domani" drew a
    quiz question of chapter 5 ("Cerca una domanda sull'altimetro" is an example)."""
    assert score_tool("cerca il meteo di domani", QUIZ.description, QUIZ.examples) < 0.5
    assert score_tool("cercami una domanda sul vento", QUIZ.description, QUIZ.examples) >= 0.5


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
    chunks = [c.text async for c in model.astream([SystemMessage("prompt"), HumanMessage("ciao")])]
    assert len(chunks) > 5 and "".join(chunks).startswith(OFFLINE_NOTICE)
    assert "AIR Coach" in "".join(chunks)


def _as_tool(spec=QUIZ):
    from langchain_core.tools import StructuredTool

    async def run(**kwargs):
        return "x"

    return StructuredTool.from_function(
        coroutine=run, name=spec.name, description=spec.description, args_schema=spec.parameters
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


# --- the quiz: a pending question's answer first, then a quiz request, then the rest ---

SPECS = ToolRegistry.from_docs(
    {"tools.json": (ROOT / "prompt_docs" / "tools.json").read_text("utf-8")}
).specs
QUESTION_TEXT = (
    "Capitolo 1, domanda 1: Se la velocità raddoppia, la portanza:\n"
    "a) raddoppia\nb) si dimezza\nc) quadruplica\nd) resta invariata\n"
    "[RISERVATO AL COACH, NON RIVELARE PRIMA CHE L'ALLIEVO ABBIA RISPOSTO: risposta corretta "
    "c) quadruplica. Spiegazione: ...]"
)


def quiz_model() -> Any:
    tools = [_as_tool(SPECS[name]) for name in ("domanda_teoria", "verifica_risposta")]
    examples = {name: SPECS[name].examples for name in SPECS}
    return OfflineChatModel(tool_examples=examples).bind_tools(tools)


def asked(text: str = QUESTION_TEXT, name: str = "domanda_teoria") -> list[Any]:
    return [
        HumanMessage("Dammi una domanda"),
        AIMessage("", tool_calls=[{"name": name, "args": {}, "id": "q1"}]),
        ToolMessage(text, tool_call_id="q1", name=name),
    ]


def graded(capitolo: int, numero: int) -> list[Any]:
    return [
        HumanMessage("la c"),
        AIMessage("", tool_calls=[{"name": "verifica_risposta", "args": {}, "id": "g1"}]),
        ToolMessage(
            f"Esito: risposta CORRETTA (capitolo {capitolo}, domanda {numero}).",
            tool_call_id="g1",
            name="verifica_risposta",
        ),
        AIMessage("Giusto."),
    ]


@pytest.mark.parametrize(
    "answer",
    # "c?", "forse la c?": unsure, and an answer (they were searched in the manual)
    ["c", "C", "la c", "risposta: c", "è la c", "quadruplica", "penso quadruplica", "e", "c?"],
)
async def test_an_answer_to_the_pending_question_is_graded(answer):
    reply = await quiz_model().ainvoke([*asked(), HumanMessage(answer)])
    (tool_call,) = reply.tool_calls
    assert tool_call["name"] == "verifica_risposta"
    assert tool_call["args"] == {"capitolo": 1, "numero": 1, "risposta": answer}


@pytest.mark.parametrize(
    "message",
    ["Cos'è la portanza?", "non lo so, spiegami", "e la c?", "grazie", "x" * 300 + " c"],
)
async def test_a_message_that_is_not_an_answer_is_not_graded(message):
    reply = await quiz_model().ainvoke([*asked(), HumanMessage(message)])
    assert all(c["name"] != "verifica_risposta" for c in reply.tool_calls)


async def test_no_pending_question_no_grading():
    model = quiz_model()
    for history in ([], [*asked(), *graded(1, 1)], asked("Nessuna domanda trovata.")):
        reply = await model.ainvoke([*history, HumanMessage("la c")])
        assert all(c["name"] != "verifica_risposta" for c in reply.tool_calls), history
    failed = [*asked(), *graded(1, 1)]
    failed[-2] = ToolMessage(
        "[Tool failed]", tool_call_id="g1", name="verifica_risposta", status="error"
    )
    reply = await model.ainvoke([*failed, HumanMessage("la c")])
    assert reply.tool_calls[0]["name"] == "verifica_risposta"  # a failed grading grades nothing


async def test_several_questions_are_graded_in_the_order_asked():
    second = QUESTION_TEXT.replace("Capitolo 1, domanda 1", "Capitolo 5, domanda 2")
    history = asked(f"2 domande:\n\n{QUESTION_TEXT}\n\n{second}")
    model = quiz_model()
    first = await model.ainvoke([*history, HumanMessage("b")])
    assert first.tool_calls[0]["args"] == {"capitolo": 1, "numero": 1, "risposta": "b"}
    then = await model.ainvoke([*history, *graded(1, 1), HumanMessage("la a")])
    assert then.tool_calls[0]["args"] == {"capitolo": 5, "numero": 2, "risposta": "la a"}


@pytest.mark.parametrize(
    ("query", "args"),
    [
        ("Dammi 3 domande dai capitoli 2, 5 e 7", {"capitoli": [2, 5, 7], "quante": 3}),
        ("Due domande del capitolo 4", {"capitolo": 4, "quante": 2}),
        ("Fammi una domanda del capitolo 3", {"capitolo": 3}),
        ("Dammi la domanda 4 del capitolo 7", {"capitolo": 7, "numero": 4}),
        ("Fammi ripassare i miei punti deboli", {"modo": "ripasso"}),
        (
            "Ripassiamo con 2 domande del capitolo 5",
            {"capitolo": 5, "quante": 2, "modo": "ripasso"},
        ),
        ("Fammi una domanda sull'altimetro", {"testo": "altimetro"}),
        # A chapter named after "sul" is the chapter, not a text to search for.
        ("Fammi una domanda sul capitolo 3", {"capitolo": 3}),
        ("Fammi una domanda sul capitolo tre", {"capitolo": 3}),
        ("Dammi 2 domande dai capitoli due e dieci", {"capitoli": [2, 10], "quante": 2}),
        ("Una domanda sui capitoli 2 e 5", {"capitoli": [2, 5]}),
        ("Una domanda sul QNH del capitolo 3", {"capitolo": 3, "testo": "qnh"}),
        # A chapter named by its subject, as the chapter list shows it.
        ("Fammi una domanda di meteorologia", {"capitolo": 5}),
        ("Fammi una domanda sul motore", {"capitolo": 4}),
        # ... or by a word its title's word begins with (it was searched: a METAR question of
        # chapter 6 came back)
        ("Fammi una domanda sul meteo", {"capitolo": 5}),
        ("Dammi una domanda sulle comunicazioni radio", {"capitolo": 8}),
        # Words of a subject that also name something else keep the search.
        ("Fammi una domanda sul fattore di carico", {"testo": "fattore carico"}),
    ],
)
async def test_quiz_requests_fill_the_quiz_arguments(query, args):
    reply = await quiz_model().ainvoke([HumanMessage(query)])
    (tool_call,) = reply.tool_calls
    assert (tool_call["name"], tool_call["args"]) == ("domanda_teoria", args)


@pytest.mark.parametrize("query", ["un'altra sul capitolo 8", "una del capitolo 8", "capitolo 8"])
async def test_a_request_for_another_chapter_is_no_answer_whatever_the_options(query):
    """With a question waiting whose option is "8", "un'altra sul capitolo 8" was graded as
    the answer "8" (the option most of whose words the message has)."""
    numbers = QUESTION_TEXT.replace("a) raddoppia", "a) 8").replace("b) si dimezza", "b) 12")
    reply = await quiz_model().ainvoke([*asked(numbers), HumanMessage(query)])
    (call,) = reply.tool_calls
    assert (call["name"], call["args"].get("capitolo")) == ("domanda_teoria", 8), query


async def test_an_answer_comes_before_a_quiz_request_and_grading_is_never_scored():
    # "una domanda" would score as a quiz request; the pending question wins only for answers.
    reply = await quiz_model().ainvoke([*asked(), HumanMessage("Dammi una domanda del capitolo 2")])
    assert reply.tool_calls[0]["name"] == "domanda_teoria"
    model = quiz_model()
    for query in ("Verifica la risposta dell'allievo", "corregge la risposta a una domanda"):
        reply = await model.ainvoke([HumanMessage(query)])
        assert all(c["name"] != "verifica_risposta" for c in reply.tool_calls)


def test_a_started_exam_that_reaches_the_model_is_told_without_the_lines_for_the_model():
    """When the exam's start reaches the model (its tool is not return_direct, or its result
    not final), the offline model showed the tool's text as is: the exam's id, the line
    telling the model to call `verifica_risposta` with `esame`, and "dillo all'allievo"."""
    from aircoach.quiz.exam_models import ExamView
    from aircoach.quiz.exam_tools import _size_note, exam_text
    from aircoach.quiz.models import PublicQuestion

    question = PublicQuestion(
        capitolo=3, numero=4, testo="Il QNH è:", risposte={"a": "una pressione", "b": "un'ora"}
    )
    view = ExamView(
        id="abc123", domande=[question] * 5, durata_s=600, scadenza="2030-01-01", soglia=0.75
    )
    first, rest = exam_text(view).split("\n", 1)
    # The note as the tool writes it when 100 questions were asked (an exam has at most 60).
    started = f"{first}\n{_size_note(100, 60, fitted=False)}\n{rest}"
    model = OfflineChatModel().bind_tools([_as_tool(QUIZ), _as_tool(SHIPPED["verifica_risposta"])])
    said = model.respond(
        [
            HumanMessage("simulazione d'esame con 100 domande"),
            AIMessage("", tool_calls=[{"name": "domanda_teoria", "args": {}, "id": "c1"}]),
            ToolMessage(started, tool_call_id="c1", name="domanda_teoria"),
        ]
    ).text
    assert said.startswith(f"{OFFLINE_NOTICE} Simulazione d'esame: 5 domande, 10 minuti")
    assert "Hai chiesto 100 domande, ma una simulazione ne ha al massimo 60." in said
    assert "1a 2b 3c" in said and "«consegno»" in said
    assert "5. (capitolo 3) Il QNH è:\n   a) una pressione" in said
    for for_the_model in ("abc123", "verifica_risposta", "esame`", "allievo", "chiama"):
        assert for_the_model not in said, for_the_model


@pytest.mark.parametrize(
    "arguments, reply",
    [
        ({"capitolo": 0}, "Il capitolo 0 non c'è: scegli un capitolo da 1 a 10."),
        ({"capitoli": [2, 11]}, "Il capitolo 11 non c'è: scegli un capitolo da 1 a 10."),
        ({"capitoli": list(range(1, 12))}, "di 10 capitoli al massimo alla volta"),
        ({"quante": 0}, "Chiedimi da 1 a 10 domande alla volta."),
        ({"capitolo": 2, "numero": 0}, "numerate da 1"),
        ({"testo": "ab"}, "Scrivi almeno 3 lettere dell'argomento da cercare."),
    ],
)
async def test_a_refused_quiz_request_is_told_with_what_to_ask_instead(arguments, reply):
    """The quiz tool's own refusal (English, for a model) becomes the coach's Italian reply;
    a refusal with nothing to suggest is left to the generic one."""
    refused = await domanda_teoria(None, **arguments)  # refused before it needs a context
    assert not refused.ok
    message = ToolMessage(refused.text, tool_call_id="c", name="domanda_teoria", status="error")
    said = offline_quiz.result_reply(message)
    assert said is not None and reply in said
    assert "must" not in said


def test_a_quiz_failure_with_nothing_to_suggest_gets_no_quiz_reply():
    crashed = ToolMessage(
        "[Tool domanda_teoria failed: ValueError]",
        tool_call_id="c",
        name="domanda_teoria",
        status="error",
    )
    assert offline_quiz.result_reply(crashed) is None


# --- the mock exam asked in everyday words, and the real exam talked about ---


def all_tools_model() -> Any:
    """The offline model with every shipped tool, as `make run` binds them."""
    examples = {name: spec.examples for name, spec in SHIPPED.items()}
    return OfflineChatModel(tool_examples=examples).bind_tools(
        [_as_tool(spec) for spec in SHIPPED.values()]
    )


@pytest.mark.parametrize(
    ("query", "args"),
    [
        ("fammi un esame", {}),
        ("voglio fare un esame di 20 domande", {"quante": 20}),
        ("un esame sul capitolo 3", {"capitoli": [3]}),
        ("esame completo", {}),
        ("Esame completo, grazie", {}),
        ("Mi fai un esame?", {}),
        ("possiamo fare un esame completo?", {}),
        ("Facciamo un altro esame da 40", {"quante": 40}),
        ("un esame dei capitoli 2 e 5 con 10 domande", {"capitoli": [2, 5], "quante": 10}),
        ("Vorrei provare un esame sui capitoli 1, 4 e 7", {"capitoli": [1, 4, 7]}),
        ("iniziamo un nuovo esame", {}),
        ("simulazione d'esame con 6 domande", {"quante": 6}),
        ("fammi un esame di prova", {}),
        ("Fammi l’esame", {}),  # a phone's apostrophe
        ("facciamo l'esame completo del capitolo 2", {"capitoli": [2]}),
        ("Proviamo a fare l'esame con 15 domande", {"quante": 15}),
        ("fammi un esame di venti domande", {"quante": 20}),
        ("un esame da quaranta sul capitolo 2", {"quante": 40, "capitoli": [2]}),
    ],
)
def test_an_exam_asked_in_everyday_words_starts_one_with_its_size_and_chapters(query, args):
    """ "fammi un esame", "un esame sul capitolo 3", "esame completo": only "simulazione",
    "esame di prova", "esame simulato" and "prova d'esame" started one; the rest were
    searched in the manual (or, scored as a quiz request, lost their chapters)."""
    (call,) = all_tools_model().respond([HumanMessage(query)]).tool_calls
    assert (call["name"], call["args"]) == ("domanda_teoria", {"modo": "esame", **args})


@pytest.mark.parametrize(
    "query",
    [
        "com'è l'esame teorico?",
        "quante domande ha l'esame?",
        "cosa serve per l'esame?",
        "devo fare un esame a marzo",
        "quanto dura un esame completo?",
        "come funziona un esame di 60 domande",
        "sono agitato per l'esame del 3 marzo",
        "voglio fare l'esame a marzo",
        "preparami per l'esame",
        "com’è un esame completo",
    ],
)
def test_the_real_exam_talked_about_is_answered_from_the_manual(query):
    (call,) = all_tools_model().respond([HumanMessage(query)]).tool_calls
    assert call["name"] == "kb_search", call


def test_the_date_of_the_real_exam_is_noted_not_a_mock_exam():
    """ "ho l'esame a marzo" says when the student's exam is: noted (the memory keeps it),
    neither a mock exam nor a search of the manual."""
    reply = all_tools_model().respond([HumanMessage("ho l'esame a marzo")])
    assert not reply.tool_calls
    assert reply.text.startswith("[modello offline] Preso nota")
    assert "- Esame: a marzo" in reply.text


@pytest.mark.parametrize(
    ("query", "args"),
    [
        ("fammi una domanda come all'esame", {}),
        ("Dammi 3 domande del capitolo 2 come all'esame", {"capitolo": 2, "quante": 3}),
    ],
)
def test_a_quiz_question_like_the_exam_is_a_quiz_question_not_an_exam(query, args):
    """ "esame" anywhere in a quiz request made it a mock exam of 30 questions (the enum of
    `modo` read from the text)."""
    (call,) = all_tools_model().respond([HumanMessage(query)]).tool_calls
    assert (call["name"], call["args"]) == ("domanda_teoria", args)

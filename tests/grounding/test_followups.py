"""Follow-ups: detected by rules, the topic taken from the thread, the query expanded with it."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from aircoach.grounding.context import ThreadView
from aircoach.grounding.followups import (
    MAX_QUERY_CHARS,
    concise_prefix,
    expand_query,
    expanded_search,
    is_followup,
    topic_keywords,
    words,
)

AIRSPACE = "Quali sono le classi di spazio aereo e i minimi VFR?"


@pytest.mark.parametrize(
    "question",
    [
        "e in classe D?",
        "E l'IRAP?",
        "ma di notte?",
        "però in montagna vale lo stesso?",
        "Anche per gli ultraleggeri?",
        "invece sopra il livello 100?",
        "Questo vale anche per il volo notturno con un aereo certificato?",
        "Nello stesso caso cosa deve fare il pilota che vola in VMC sopra le nubi?",
        "quanto in metri?",  # short after a topic
    ],
)
def test_a_followup_is_detected(question):
    assert is_followup(question, has_topic=True)


@pytest.mark.parametrize(
    "question",
    [
        "Quali sono i requisiti per la licenza PPL secondo la Part-FCL?",
        "Come si imposta l'altimetro prima del decollo da un aeroporto controllato?",
    ],
)
def test_a_new_topic_is_not_a_followup(question):
    assert not is_followup(question, has_topic=True)


def test_nothing_is_a_followup_without_a_topic_before_it():
    assert not is_followup("e in classe D?", has_topic=False)
    assert not is_followup("", has_topic=True)


def test_the_topic_is_the_content_of_the_earlier_questions():
    assert topic_keywords([AIRSPACE]) == ["classi", "spazio", "aereo", "minimi", "VFR"]
    assert topic_keywords(["Parlami della rottamazione quinquies", "e l'irap?"]) == [
        "rottamazione",
        "quinquies",
        "irap",
    ]
    assert topic_keywords([]) == []


def test_words_common_to_several_questions_rank_first():
    questions = ["Cos'è il QNH?", "E il QFE rispetto al QNH?", "Come si imposta il QNH in volo?"]
    assert topic_keywords(questions, limit=2) == ["QNH", "QFE"]


def test_the_topic_comes_first_then_the_new_words():
    keywords = topic_keywords([AIRSPACE])
    assert expand_query(keywords, "e in classe D?") == "spazio aereo minimi VFR classe D"
    assert expand_query(keywords, "classe D") == "spazio aereo minimi VFR classe D"
    assert expand_query(["rottamazione", "quinquies"], "e l'irap") == "rottamazione quinquies irap"
    assert len(expand_query(["x" * 200], "y" * 200)) <= MAX_QUERY_CHARS


def test_only_a_search_text_argument_is_expanded():
    assert expanded_search({"query": "classe D", "top_k": 3}, ["VFR"]) == ("query", "VFR classe D")
    assert expanded_search({"q": "meteo"}, ["VFR"]) == ("q", "VFR meteo")
    assert expanded_search({"top_k": 3}, ["VFR"]) is None
    assert expanded_search({"query": "  "}, ["VFR"]) is None


def test_the_concise_prefix_names_the_topic():
    prefix = concise_prefix(["spazio", "aereo"])
    assert "spazio, aereo" in prefix and "al massimo tre punti" in prefix
    assert "l'argomento precedente" in concise_prefix([])


def test_elisions_are_stripped():
    assert words("e l'irap? dell'aria, sull’ala") == ["e", "irap", "aria", "ala"]


def test_the_thread_view_is_what_the_model_is_shown():
    messages = [
        HumanMessage("vecchia domanda"),
        AIMessage("", tool_calls=[{"name": "kb_search", "args": {}, "id": "a"}]),
        ToolMessage("testo vecchio", tool_call_id="a"),
        AIMessage("risposta"),
        HumanMessage(AIRSPACE),
        AIMessage("", tool_calls=[{"name": "kb_search", "args": {}, "id": "b"}]),
        ToolMessage("Reg. (UE) n. 923/2012", tool_call_id="b"),
        ToolMessage("[Tool kb_search failed: HTTP 503]", tool_call_id="c", status="error"),
        AIMessage("risposta"),
    ]
    view = ThreadView.of(messages, history_limit=1)
    assert view.questions == [AIRSPACE]
    assert view.tool_texts == ["Reg. (UE) n. 923/2012"]  # a failure is not a source
    assert ThreadView.of(messages, history_limit=5).questions == ["vecchia domanda", AIRSPACE]
    assert ThreadView.of(messages, history_limit=0) == ThreadView()

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
    is_greeting,
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
        "quale si usa in atterraggio?",  # only words that qualify the topic, however long
        "qual è la differenza?",  # of the topic's subjects (it searched "differenza" alone)
        "che differenza c'è?",
        # where or how the topic comes about: "dove si trova?" after the wind shear found the
        # VOR ("su cui si trova l'aereo"), and "come si esce?" after the spin became the topic
        "dove si trova?",
        "come si esce?",
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
    questions = ["Cos'è il QNH?", "E il QFE rispetto al QNH?", "e in volo il QNH?"]
    assert topic_keywords(questions, limit=2) == ["QNH", "QFE"]


def test_the_topic_comes_first_then_the_new_words():
    keywords = topic_keywords([AIRSPACE])
    assert expand_query(keywords, "e in classe D?") == "spazio aereo minimi VFR classe D"
    assert expand_query(keywords, "classe D") == "spazio aereo minimi VFR classe D"
    assert expand_query(["rottamazione", "quinquies"], "e l'irap") == "rottamazione quinquies irap"
    assert len(expand_query(["x" * 200], "y" * 200)) <= MAX_QUERY_CHARS


def test_only_a_search_text_argument_is_expanded():
    assert expanded_search({"query": "e in classe D", "top_k": 3}, ["VFR"]) == (
        "query",
        "VFR classe D",
    )
    assert expanded_search({"q": "di notte"}, ["VFR"]) == ("q", "VFR notte")
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


@pytest.mark.parametrize(
    "question",
    [
        "perché?",
        "fammi un esempio",
        "come mai?",
        "in virata?",
        "perche e pericoloso?",
        "spiegamelo meglio",
        "me lo ripeti?",
        "puoi ripetermelo?",
        "ho ancora dei dubbi",  # what the student says of themselves names no subject
        "non ho capito, ho un problema",
        "spiegamelo in 3 frasi",
        "in parole semplici?",
        "quali nubi porta?",  # the verb's subject is the topic's
        "cosa provoca?",
        "e cosa misura?",
        "quanto dura?",  # after the wake turbulence it found the microburst, which "dura"
        "e quando cessa?",
        "come si riconosce?",  # a question's common verb names no subject
        "e come si evita?",
        "come si imposta?",
        "quando lo sento?",  # a pronoun for the topic
        "come li riconosco?",
        "come si legge?",
        "da cosa dipende?",
        "qual è la differenza tra le due?",  # the two of the topic
        "se la pressione cambia?",  # a condition on the topic
        "se il vento è forte?",  # after the crosswind landing "e se ..." found the CAT
    ],
)
def test_a_bare_followup_borrows_the_topic(question):
    assert is_followup(question, has_topic=True)


@pytest.mark.parametrize(
    "question",
    [
        "Spiegami il QNH",
        "come funziona il variometro",
        "cos'è il METAR?",
        "Vx e Vy",
        "ho problemi con il QNH",
        "cosa provoca la nebbia?",  # the subject after the verb
        "quali nubi porta il fronte caldo?",
        "quanto dura il microburst?",
        "cos'è lo stallo?",  # "lo" the article
        "lo sbandometro?",
    ],
)
def test_a_short_question_with_its_own_subject_stands_alone(question):
    assert not is_followup(question, has_topic=True)


def test_a_change_of_subject_resets_the_topic():
    carburettor = "come mi accorgo del ghiaccio al carburatore"
    # ("accorgo" is a question's verb, no topic word)
    assert topic_keywords(["cos'è l'anemometro", carburettor, "perché?"]) == [
        "ghiaccio",
        "carburatore",
    ]
    assert topic_keywords(["Come si prepara la carbonara?", "Spiegami il QNH"]) == ["QNH"]


def test_a_self_contained_search_of_a_model_is_not_expanded():
    assert expanded_search({"query": "microburst in finale"}, ["wind", "shear"]) is None
    assert expanded_search({"query": "perché?"}, ["carburatore"]) == ("query", "carburatore perché")


@pytest.mark.parametrize("question", ["Ciao, chi sei?", "ciao", "grazie mille", "cosa sai fare?"])
def test_a_greeting_after_a_topic_is_no_followup(question):
    """It has no content word either; the prompt of a real model said it followed up QNH."""
    assert not is_followup(question, has_topic=True)


def test_a_followup_that_says_one_of_a_pair_leaves_the_other_out_of_the_topic():
    """ "e quello caldo?" after the cold front asks about the warm one: the topic was
    "fronte freddo caldo", and "quali nubi porta?" then found the cold front first."""
    asked = ["cos'è il fronte freddo?", "e quello caldo?"]
    assert topic_keywords(asked) == ["fronte", "caldo"]
    assert expand_query(topic_keywords(asked), "quali nubi porta?") == "fronte caldo nubi"
    assert topic_keywords(["vento in decollo", "e in atterraggio?"]) == ["vento", "atterraggio"]
    # The follow-up itself: "e quello freddo?" after the warm front searched "fronte caldo
    # freddo" and answered with the warm front's rain.
    assert expand_query(["fronte", "caldo"], "e quello freddo?") == "fronte freddo"


def test_the_two_a_followup_compares_are_the_topics_not_a_word_to_search():
    topic = ["portanza", "resistenza"]
    assert expand_query(topic, "qual è la differenza tra le due?") == (
        "portanza resistenza differenza"
    )
    # Nor a word of the topic for the next follow-up ("quando si usa?" after the QNH, the QFE
    # and their difference searched "differenza" too).
    asked = ["cos'è la portanza?", "e la resistenza?", "qual è la differenza?"]
    assert topic_keywords(asked) == topic


@pytest.mark.parametrize(
    ("question", "about_the_coach"),
    [
        ("come funziona questa app?", True),
        ("come si usa questa chat?", True),
        ("come funziona il carburatore?", False),
        ("come funziona l'altimetro?", False),
        ("come si usa il VOR?", False),
        # What to ask the coach (ROGER's "chiede di ripetere" answered it), not the tower.
        ("cosa posso chiederti?", True),
        ("che domande ti posso fare?", True),
        ("cosa ti posso chiedere?", True),
        ("cosa posso chiedere alla torre?", False),
        ("che domande posso fare all'esame?", False),
        ("cosa ti posso chiedere sul meteo?", False),
    ],
)
def test_how_the_app_works_is_a_question_about_the_coach(question, about_the_coach):
    assert is_greeting(question) is about_the_coach

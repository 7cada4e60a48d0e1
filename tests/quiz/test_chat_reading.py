"""How the offline model reads a student's quiz and exam messages, without an app: numbered
answers to the waiting questions, a question about past exams told from a request for one,
and the line each past exam reads as. tests/quiz/test_chat_phrases.py and test_chat_exam.py
play them through the API."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from aircoach.llm import offline_exam, offline_quiz
from aircoach.llm.offline_quiz import PendingQuestion
from aircoach.quiz.exam_models import ExamRecord
from aircoach.quiz.exam_tools import exam_line


@pytest.mark.parametrize(
    ("text", "graded"),
    [
        ("2b", [(5, "b")]),
        ("direi la 2 è b", [(5, "b")]),
        ("2 e 3: c", [(5, "c"), (7, "c")]),
        ("1 e’ a", [(2, "a")]),
        ("2 non lo so", [(5, "non lo so")]),
        ("dammi domande del capitolo 3 a caso", []),  # a lone number and letter among words
        ("capitoli 2, 5 e 7", []),
        ("4b", []),  # no question 4 waits
    ],
)
def test_numbered_answers_to_the_waiting_questions(text: str, graded: list[tuple[int, str]]):
    waiting = {n: PendingQuestion(capitolo, 1) for n, capitolo in ((1, 2), (2, 5), (3, 7))}
    calls = offline_quiz.numbered_answers(text, waiting)
    assert [(c["capitolo"], c["risposta"]) for c in calls] == graded


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("1a 2b 3c", {1: "a", 2: "b", 3: "c"}),
        ("1 - a, 2) b, 3: c", {1: "a", 2: "b", 3: "c"}),
        ("3 non lo so", {3: "-"}),
        ("1a 2 non so 3b", {1: "a", 2: "-", 3: "b"}),
        ("3 -, 4) salta 5: c", {3: "-", 4: "-", 5: "c"}),
        ("4 - 5d", {4: "-", 5: "d"}),
        ("7: Passo. 8 non ne ho idea e 9a", {7: "-", 8: "-", 9: "a"}),
        ("1 boh 2 non saprei 3c", {1: "-", 2: "-", 3: "c"}),  # "boh" was read as nothing
        ("2b 2 non lo so", {2: "-"}),  # a later answer to the same number wins
        ("non lo so", {}),
        ("sulla 4 non so ancora, ci penso", {}),
        ("ho risposto a 3 domande, salta la 4", {}),
        ("la 3 - ci penso su", {}),
        # "è" before a letter is the verb; before any other word it names no letter at all
        # (it was read as the answer "e", refused as no option).
        ("la 3 è b", {3: "b"}),
        ("3 è la c, 4 e' d", {3: "c", 4: "d"}),
        ("la 3 è giusta", {}),
        ("la 3 è corretta", {}),
        ("3 è sbagliata", {}),
        ("la 2 è la giusta, la 3 è a", {3: "a"}),
        ("1 e 2 sono giuste", {}),
        ("3e 4a", {3: "e", 4: "a"}),  # the letter e, not an option: the grader says so
        # "è" then a colon or "=" is the verb too (read as the answer "e").
        ("4 è: b", {4: "b"}),
        ("4 e: la b, 5 è = c", {4: "b", 5: "c"}),
        ("4 è: giusta", {}),
        ("3: e", {3: "e"}),
        # A letter before an apostrophe starts an elided word ("c'è", "l'ho"), not an answer.
        ("nella 3 c'è un errore", {}),
        ("la 2 l’ho lasciata, 4 e' d", {4: "d"}),
        # Several numbers before one answer: each has it ("3 e 4: b" read 3 = e, 4 = b). An
        # "e" between two numbers is "and", never the letter e.
        ("3 e 4: b", {3: "b", 4: "b"}),
        ("3 e 4 b", {3: "b", 4: "b"}),
        ("3, 4 e 5: c", {3: "c", 4: "c", 5: "c"}),
        ("1a, 2 e 3 non lo so", {1: "a", 2: "-", 3: "-"}),
        ("capitoli 2, 5 e 7", {}),
        ("3 e", {3: "e"}),  # alone, still the letter e: the grader says it is no option
        # A phone's apostrophe for "è" ("e’") is the verb, as "e'" is (it read no answer).
        ("la 3 e’ b", {3: "b"}),
        ("3 e’ la c, 4 e' d", {3: "c", 4: "d"}),
        ("la 3 e’ giusta", {}),
        # An arrow, or a few words between the number and its letter (each was searched in
        # the manual, and in an open exam the answer was lost).
        ("4 -> c, 5 → d, 6=>a", {4: "c", 5: "d", 6: "a"}),
        ("3 la b", {3: "b"}),
        ("cambio la 1 in d", {1: "d"}),
        ("la 1 la cambio in d", {1: "d"}),
        ("cambia la risposta 2 con la a", {2: "a"}),
        ("alla 2 metto c", {2: "c"}),
        ("per la 2 direi c", {2: "c"}),
        ("la 2 diventa b", {2: "b"}),
        ("2 da b a c", {2: "c"}),
        ("3 a b", {3: "a"}),  # "a" is the letter, not a word before one
        ("la 2 in pratica chiede la quota", {}),
        ("la 3 la metto e la 4 no", {}),
        ("2 la lascio vuota", {}),
    ],
)
def test_numbered_exam_answers_are_read_alike_by_the_tool_and_the_offline_model(
    text: str, read: dict[int, str]
):
    from aircoach.quiz.answers import read_numbered_answers

    assert read_numbered_answers(text) == read
    assert offline_exam.numbered(text) == read


@pytest.mark.parametrize(
    ("query", "past"),
    [
        ("fammi vedere i miei esami", True),
        ("com'è andata l'ultima simulazione?", True),
        ("quante simulazioni ho fatto?", True),
        ("che voto ho preso all'esame?", True),
        ("il risultato della simulazione", True),
        ("ho l'esame a marzo", False),
        ("il mio esame è a marzo", False),
        ("quanti errori si possono fare all'esame?", False),
        ("quanti esami ci sono per il PPL?", False),
        ("fammi un'altra simulazione d'esame", False),
        ("quanto tempo mi resta?", False),  # no exam open: nothing to time
    ],
)
def test_a_question_about_the_students_own_exams_is_told_from_a_request_for_one(query, past):
    assert offline_exam.asks_past_exams(query) is past


def test_while_an_exam_is_open_its_time_left_is_asked_of_the_list():
    assert offline_exam.asks_past_exams("quanto manca alla fine dell'esame?", exam_open=True)


def test_each_state_of_a_past_exam_reads_as_the_student_is_told_it():
    now = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    exam = ExamRecord(
        id="e1",
        userId="u",
        creato="2026-11-28T09:50:00+00:00",
        scadenza="2026-11-28T10:05:30+00:00",
        durata_s=930,
        soglia=0.75,
        domande=[(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
    )
    assert exam_line(exam, now) == "- 28/11, 5 domande: in corso, 6 minuti alla scadenza"
    later = datetime(2026, 11, 28, 11, 0, tzinfo=UTC)
    assert exam_line(exam, later) == "- 28/11, 5 domande: non consegnata"
    submitted = exam.model_copy(update={"consegnato": "2026-11-28T10:01:00+00:00"})
    assert exam_line(submitted, later).endswith("consegnata, correzione non conclusa")


GRADING = (
    "Esito della simulazione: 3 risposte corrette su 5 (60%), soglia 75%: non superata.\n"
    "Capitolo più debole: 1 (Principi di aerodinamica), 0 su 1.\n"
    "Domanda 1: d → corretta a) uno stallo con imbardata. La vite nasce da uno stallo. "
    "(Fonte: § 1.13)\n"
    "Domanda 4: non la sapevi → corretta b) il primer. Il primer inietta benzina. (Fonte: § 4.12)"
)


def _graded(*after: str) -> list:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    messages = [
        HumanMessage("1d 2b 3c 4 non lo so 5a"),
        AIMessage("", tool_calls=[{"name": "verifica_risposta", "args": {}, "id": "g"}]),
        ToolMessage(GRADING, tool_call_id="g", name="verifica_risposta"),
        AIMessage(GRADING),
    ]
    for text in after:
        messages += [HumanMessage(text), AIMessage("...")]
    return messages


@pytest.mark.parametrize(
    ("asked", "reply"),
    [
        ("quali ho sbagliato?", "Le domande sbagliate (2):\nDomanda 1: d → corretta a)"),
        ("cosa ho sbagliato", "Le domande sbagliate (2):"),
        ("spiegami la 4", "Domanda 4: non la sapevi → corretta b) il primer."),
        ("e la 1?", "Domanda 1: d → corretta a)"),
        ("perché la 2?", "Alla domanda 2 hai risposto correttamente."),
        ("la 9", "La simulazione aveva 5 domande"),
        ("consegno", "L'hai già consegnata"),
        # By its ordinal, or saying what was not understood: each searched the manual
        # ("spiegami la seconda" found "per un secondo", the collision's scan).
        ("spiegami la quarta", "Domanda 4: non la sapevi → corretta b) il primer."),
        ("non ho capito la domanda 1", "Domanda 1: d → corretta a)"),
        ("perché la prima è d?", "Domanda 1: d → corretta a)"),
        ("e la prima domanda?", "Domanda 1: d → corretta a)"),
    ],
)
def test_a_student_asks_about_the_exam_just_graded(asked, reply):
    """ "quali ho sbagliato?" drew a new quiz question, "spiegami la 2" searched the manual
    for "2", "consegno" said no exam was open."""
    from langchain_core.messages import HumanMessage

    messages = [*_graded(), HumanMessage(asked)]
    grading = offline_exam.last_grading(messages)
    assert grading == GRADING
    said = offline_exam.grading_reply(grading, asked)
    assert said is not None and said.startswith(reply)


@pytest.mark.parametrize(
    "asked", ["la primavera", "spiegami la prima guerra mondiale", "cos'è la seconda legge?"]
)
def test_an_ordinal_that_names_no_question_is_a_question_of_its_own(asked):
    assert not offline_exam.names_question(asked)
    assert offline_exam.grading_reply(GRADING, asked) is None


def test_questions_about_the_grading_follow_one_another_and_anything_else_ends_them():
    from langchain_core.messages import HumanMessage

    chained = [*_graded("quali ho sbagliato?", "spiegami la 1"), HumanMessage("e la 4?")]
    assert offline_exam.last_grading(chained) == GRADING
    left = [*_graded("cos'è il QNH?"), HumanMessage("spiegami la 2")]
    assert offline_exam.last_grading(left) is None
    assert offline_exam.grading_reply(GRADING, "cos'è il QNH?") is None


def _quiz_graded(*after: str) -> list:
    """Three quiz questions answered "1a 2b 3c" and graded: 1 right, 2 wrong, 3 not known;
    then `after`, each with the coach's reply."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    def grading(verdict: str, numero: int, key: str) -> str:
        return (
            f"Esito: risposta {verdict} (capitolo 5, domanda {numero}).\n"
            f"Risposta dell'allievo: b) altro\nRisposta corretta: {key}\n"
            f"Spiegazione: Perché sì ({numero}).\nFonte: § 5.{numero}"
        )

    calls = [{"name": "verifica_risposta", "args": {}, "id": f"g{n}"} for n in (1, 2, 3)]
    messages = [
        HumanMessage("1a 2b 3 non lo so"),
        AIMessage("", tool_calls=calls),
        # the results in another order than the calls: the student's numbering is the calls'
        ToolMessage(grading("NON NOTA", 3, "c) tre"), tool_call_id="g3", name="verifica_risposta"),
        ToolMessage(grading("CORRETTA", 1, "a) uno"), tool_call_id="g1", name="verifica_risposta"),
        ToolMessage(grading("SBAGLIATA", 2, "d) due"), tool_call_id="g2", name="verifica_risposta"),
        AIMessage("..."),
    ]
    for text in after:
        messages += [HumanMessage(text), AIMessage("...")]
    return messages


def test_which_quiz_answers_were_wrong_is_told_from_the_gradings_just_made():
    """ "quali ho sbagliato?" after "1a 2b 3c" drew a review question of one of them."""
    from langchain_core.messages import HumanMessage

    said = offline_quiz.mistakes_reply(
        [*_quiz_graded(), HumanMessage("quali ho sbagliato?")], "quali ho sbagliato?"
    )
    assert said == (
        "Le risposte sbagliate (2 su 3):\n"
        "2. (capitolo 5, domanda 2) corretta d) due\n"
        "3. (capitolo 5, domanda 3) corretta c) tre\n"
        "Scrivi «spiegami la 2» per la spiegazione."
    )
    later = [*_quiz_graded("cos'è il QNH?"), HumanMessage("quali ho sbagliato?")]
    assert offline_quiz.mistakes_reply(later, "quali ho sbagliato?") is None


@pytest.mark.parametrize(
    "asked", ["voglio ripassare i miei errori", "fammi esercitare sui miei errori"]
)
def test_a_request_to_practise_the_mistakes_is_no_question_about_them(asked):
    """ "voglio ripassare i miei errori" right after a grading listed the mistakes instead of
    asking the first of them again (review mode)."""
    from langchain_core.messages import HumanMessage

    assert offline_quiz.wants_review(asked)
    assert offline_quiz.mistakes_reply([*_quiz_graded(), HumanMessage(asked)], asked) is None
    assert offline_exam.asks_mistakes("i miei errori?")


@pytest.mark.parametrize(
    "asked", ["e la 3?", "la 3", "spiegami la 3", "spiegami la terza", "perché la terza è c?"]
)
def test_a_graded_question_is_explained_by_its_number_after_other_questions_about_them(asked):
    """ "e la 1?" after "spiegami la 3" searched the manual; so did "la 7"."""
    from langchain_core.messages import HumanMessage

    messages = [*_quiz_graded("quali ho sbagliato?", "spiegami la 2"), HumanMessage(asked)]
    assert offline_exam.names_question(asked)
    assert offline_quiz.explain_reply(messages, asked).startswith("La risposta corretta è c) tre.")


QUESTION = (
    "Capitolo 1, domanda 1: Se la velocità raddoppia, la portanza:\n"
    "a) raddoppia\nb) si dimezza\nc) quadruplica\nd) resta invariata"
)
ONE_GRADING = (
    "Esito: risposta SBAGLIATA (capitolo 1, domanda 1).\n"
    "Risposta dell'allievo: b) si dimezza\nRisposta corretta: c) quadruplica\n"
    "Spiegazione: La portanza va con il quadrato della velocità.\nFonte: § 1.2"
)


def _one_graded(*after: str) -> list:
    """One quiz question asked, answered "la b" and graded wrong; then `after`, each with the
    coach's reply."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    messages = [
        HumanMessage("dammi la domanda 1 del capitolo 1"),
        AIMessage("", tool_calls=[{"name": "domanda_teoria", "args": {}, "id": "q"}]),
        ToolMessage(QUESTION, tool_call_id="q", name="domanda_teoria"),
        AIMessage(QUESTION),
        HumanMessage("la b"),
        AIMessage("", tool_calls=[{"name": "verifica_risposta", "args": {}, "id": "g"}]),
        ToolMessage(ONE_GRADING, tool_call_id="g", name="verifica_risposta"),
        AIMessage(ONE_GRADING),
    ]
    for text in after:
        messages += [HumanMessage(text), AIMessage("...")]
    return messages


@pytest.mark.parametrize(
    ("asked", "reply"),
    [
        ("e la d?", "La d) resta invariata non è corretta: la risposta corretta è c) quadruplica."),
        ("la a perché no?", "La a) raddoppia non è corretta: la risposta corretta è c)"),
        ("e la b cosa fa?", "La b) si dimezza, la tua risposta, non è corretta: la risposta"),
        ("ma la b non va bene?", "La b) si dimezza, la tua risposta, non è corretta"),
        ("quindi era la c?", "Sì, la c) quadruplica è la risposta corretta."),
        ("perché?", "La risposta corretta è c) quadruplica."),
    ],
)
def test_an_option_asked_about_after_a_grading_is_explained_as_that_option(asked, reply):
    """ "e la b cosa fa?" found the clouds' § 10.14 in the manual; "e la d?" nothing."""
    from langchain_core.messages import HumanMessage

    assert offline_quiz.asks_why(asked)
    said = offline_quiz.explain_reply([*_one_graded(), HumanMessage(asked)], asked)
    assert said is not None and said.startswith(reply)
    assert said.endswith("quadrato della velocità. (Fonte: § 1.2 del manuale del corso)")
    # one after another, as a student asks them
    later = [*_one_graded("e la b?", "perché non la a?"), HumanMessage(asked)]
    if asked != "perché?":  # a bare "perché?" is about the grading right before only
        assert offline_quiz.explain_reply(later, asked) == said


def test_a_letter_alone_after_a_grading_is_the_answer_again_not_a_question():
    assert not offline_quiz.asks_why("la b")
    assert offline_quiz.asks_why("la b?")


@pytest.mark.parametrize(
    ("asked", "reply"),
    [
        ("ho sbagliato?", "Le domande sbagliate (2):"),
        ("era giusta?", offline_exam.WHICH_ONE),
        ("e la b?", offline_exam.WHICH_ONE),
        ("la 4 era giusta?", "Domanda 4: non la sapevi"),
    ],
)
def test_how_it_went_after_an_exam_is_answered_from_its_grading(asked, reply):
    """ "ho sbagliato?" drew a review question; "era giusta?" and "e la b?" searched the
    manual and ended the questions about the grading."""
    from langchain_core.messages import HumanMessage

    messages = [*_graded(), HumanMessage(asked)]
    said = offline_exam.grading_reply(offline_exam.last_grading(messages), asked)
    assert said is not None and said.startswith(reply)
    chained = [*_graded(asked), HumanMessage("spiegami la 4")]
    assert offline_exam.last_grading(chained) == GRADING


def test_how_it_went_with_nothing_graded_says_so():
    """ "ho sbagliato?" with no answer graded drew a quiz question."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    assert offline_exam.asks_outcome("ho sbagliato?") and offline_exam.asks_outcome("Era giusta?")
    assert not offline_exam.asks_outcome("e la c?")  # "è la c?" reads the same: an option
    said = offline_quiz.nothing_graded([HumanMessage("ho sbagliato?")])
    assert said.startswith("Non ho appena corretto una tua risposta")
    waiting = [
        AIMessage("", tool_calls=[{"name": "domanda_teoria", "args": {}, "id": "q"}]),
        ToolMessage(QUESTION, tool_call_id="q", name="domanda_teoria"),
        AIMessage(QUESTION),
        HumanMessage("ho sbagliato?"),
    ]
    assert offline_quiz.nothing_graded(waiting).startswith("Non hai ancora risposto alla domanda")


def test_an_option_of_one_of_several_gradings_is_of_the_question_asked_about_last():
    """ "e la c?" after "1a 2b 3c" and "spiegami la 2" explained question 3 as if its option
    c were meant."""
    from langchain_core.messages import HumanMessage

    first = offline_quiz.explain_reply([*_quiz_graded(), HumanMessage("e la c?")], "e la c?")
    assert first is not None and first.startswith("Di quale domanda? Ho corretto 3 risposte")
    after = [*_quiz_graded("spiegami la 2"), HumanMessage("e la c?")]
    said = offline_quiz.explain_reply(after, "e la c?")
    assert said is not None and said.startswith("La risposta corretta è d) due.")


@pytest.mark.parametrize("asked", ["cosa significa?", "che vuol dire?", "in che senso?"])
def test_what_the_grading_means_is_its_explanation(asked):
    """Each was searched in the manual with the conversation's subject."""
    from langchain_core.messages import HumanMessage

    assert offline_quiz.asks_why(asked)
    said = offline_quiz.explain_reply([*_one_graded(), HumanMessage(asked)], asked)
    assert said is not None and said.startswith("La risposta corretta è c) quadruplica.")
    assert not offline_quiz.asks_why("cosa significa EGT?")  # a question of its own


@pytest.mark.parametrize(
    ("said", "hands_in", "asks", "not_yet"),
    [
        ("consegno", True, False, False),
        ("ho finito!", True, False, False),
        ("non ho ancora finito, aspetta", False, False, True),  # it handed the exam in
        ("consegno dopo", False, False, True),
        ("posso consegnare?", False, True, False),
        ("la posso già consegnare?", False, True, False),
        ("come si consegna il piano di volo?", False, False, False),
        ("correggi la 3: è c", False, False, False),  # an answer changed: it handed it in
        ("cambia la risposta 2", False, False, False),
        ("correggimi l'esame", True, False, False),
    ],
)
def test_an_exam_is_handed_in_when_said_not_when_asked_about_or_put_off(
    said, hands_in, asks, not_yet
):
    assert offline_exam.hands_in(said, exam_open=True) is hands_in
    assert offline_exam.asks_to_hand_in(said) is asks
    assert offline_exam.not_yet(said) is not_yet


@pytest.mark.parametrize(
    ("asked", "progress", "quiz"),
    [
        # each was searched in the manual, which found nothing
        ("in cosa vado male?", True, False),
        ("dove vado peggio?", True, False),
        ("quante domande ho fatto?", True, False),
        ("a quante domande ho risposto?", True, False),
        ("come sono messo?", True, False),
        ("domanda sulla radio", False, True),  # it was searched in the manual
        ("domande di meteorologia", False, True),
        ("una domanda sul vento", False, True),
        ("come sono messi i flap in decollo?", False, False),
        ("dove sono le prese statiche?", False, False),
        ("quante domande ci sono all'esame?", False, False),
        ("domanda: cos'è il QNH?", False, False),  # a question announced
        ("ho una domanda sulla radio", False, False),  # announced too (offline_course.preface)
    ],
)
def test_progress_or_a_question_asked_for_in_everyday_words(asked, progress, quiz):
    assert offline_quiz.asks_progress(asked) is progress
    assert offline_quiz.asks_for_question(asked) is quiz


def test_a_long_list_of_missing_exam_questions_says_how_many_more():
    """ "Mancano le domande 3, 4, ..., 17…." ended in an ellipsis and a full stop and said
    nothing of the 13 after it."""
    exam = offline_exam.OpenExam("e1", 30, {1: "a", 2: "b"})
    note = offline_exam.progress_note(exam)
    assert (
        "Mancano le domande 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17 e altre 13." in note
    )
    assert "…" not in note

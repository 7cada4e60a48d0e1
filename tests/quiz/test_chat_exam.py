"""The mock exam through the chat with the offline model, on both stores: one tool_result with
every question, answers in several messages, grading at the end; nothing English or internal
reaches the student."""

from __future__ import annotations

from typing import Any

import pytest

from aircoach.llm import offline_exam
from aircoach.quiz.bank import load_demo_questions
from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, chat

# A student's conversation played through the app: an integration module (docs/testing.md).
pytestmark = pytest.mark.integration

ENGLISH = ("failed", "must be", "Tool ", "error", "between")


def said(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "agent_message")


async def test_a_chat_mock_exam_is_answered_in_two_messages_and_graded(
    store_settings: Settings, auth
):
    bank = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}
    async with asgi_client(app_with(store_settings)) as client:
        started = await chat(client, auth(), "Voglio fare una simulazione d'esame con 6 domande")
        assert [e["type"] for e in started] == ["tool_result", "done"]
        exam = started[0]["data"]["esame"]
        assert len(exam["domande"]) == 6 and exam["soglia"] == 0.75
        assert "corretta" not in str(exam) and "spiegazione" not in str(exam)
        keys = [bank[(q["capitolo"], q["numero"])] for q in exam["domande"]]
        wrong = next(x for x in "abcd" if x != keys[1])

        noted = await chat(client, auth(), f"1{keys[0]} 2{wrong} 3{keys[2]}")
        assert "Ho preso nota di 3 risposte su 6" in said(noted)
        assert "4, 5, 6" in said(noted)

        graded = await chat(client, auth(), f"4{keys[3]}, 5) {keys[4]} 6 {keys[5]}")
        result = next(e for e in graded if e["type"] == "tool_result")
        assert result["tool_name"] == "verifica_risposta"
        assert (result["data"]["punteggio"], result["data"]["totale"]) == (5, 6)
        assert result["data"]["superato"] is True
        text = said(graded)
        assert "5 risposte corrette su 6 (83%)" in text and "Fonte: §" in text
        assert not any(word in text for word in ENGLISH)

        progress = (await client.get("/api/progress", headers=auth())).json()
        assert (progress["risposte"], progress["corrette"]) == (6, 5)
        listed = (await client.get("/api/exams", headers=auth())).json()["items"]
        assert [(e["punteggio"], e["totale"]) for e in listed] == [(5, 6)]

        # Questions about the grading are answered from it: no new question, no search.
        mistakes = await chat(client, auth(), "quali ho sbagliato?")
        assert not any(e["type"] == "tool_result" for e in mistakes)  # it drew a question
        # Each with its question's text, which the grading does not quote (the student saw
        # it only at the exam's start), and a question answered right with the answer given.
        asked = [f"«{q['testo']}»" for q in exam["domande"]]
        listed = f"Le domande sbagliate (1):\nDomanda 2: {asked[1]} {wrong} → corretta {keys[1]})"
        assert listed in said(mistakes)
        second = await chat(client, auth(), "spiegami la 2")
        told = f"[modello offline] Domanda 2: {asked[1]} {wrong} → corretta"
        assert said(second).startswith(told)
        first = await chat(client, auth(), "e la 1?")
        right = exam["domande"][0]["risposte"][keys[0]]
        assert f"Alla domanda 1 hai risposto correttamente: {asked[0]} {keys[0]}) {right}." in said(
            first
        )
        again = await chat(client, auth(), "non ho capito la seconda")
        assert said(again).startswith(told)
        assert not any(e["type"] == "tool_result" for e in second + first + again)


async def test_submitting_early_counts_the_rest_wrong_and_big_requests_are_not_errors(
    settings: Settings, auth
):
    async with asgi_client(app_with(settings)) as client:
        started = await chat(client, auth(), "simulazione d'esame")
        assert len(started[0]["data"]["esame"]["domande"]) == 30
        graded = await chat(client, auth(), "consegno")
        result = next(e for e in graded if e["type"] == "tool_result")
        assert (result["data"]["punteggio"], result["data"]["totale"]) == (0, 30)
        assert "non superata" in said(graded) and "nessuna risposta" in said(graded)
        for query in ("Dammi 30 domande del capitolo 3", "Dammi 10 domande a caso"):
            events = await chat(client, auth(), query)
            assert not any(w in str(events) for w in ("failed", "must be between")), query
            questions = next(e for e in events if e["type"] == "tool_result")["data"]
            assert len(questions["questions"]) == 10


async def test_answers_sent_while_the_exam_is_being_graded_are_told_to_wait(
    store_settings: Settings, auth
):
    """Another submission of the exam has started grading and has no result yet: the model is
    told the exam is still being graded (and when it may be sent again), not that it was
    graded."""
    from langchain_core.messages import ToolMessage

    from aircoach.quiz import review
    from tests.helpers import services_of
    from tests.scripted_model import Script, ScriptedModels, call, text

    script = Script([])
    app = app_with(store_settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        exams = await services_of(app).exam_service()
        exam, _ = await exams.create("user-1", domande=5)
        moment = review.iso(exams.quiz.now())
        assert await exams.exams.claim("user-1", exam.id, moment, previous=None)
        script.replies += [
            call("verifica_risposta", esame=exam.id, risposta="1a 2b 3c 4d 5a"),
            text("Attendi."),
        ]
        await chat(client, auth(), "1a 2b 3c 4d 5a")
    (told,) = [m.content for m in script.calls[-1] if isinstance(m, ToolMessage)]
    assert "Sto ancora correggendo questa simulazione" in told, told
    assert "già stata consegnata" not in told


async def test_a_chat_exam_larger_than_its_chapter_is_what_it_holds_and_says_so(
    settings: Settings, auth
):
    """Chapter 3 holds 34 questions: "60 domande del capitolo 3" starts an exam of 34, as
    the chat serves a big request, and the result says so (it was shorter, silently)."""
    async with asgi_client(app_with(settings)) as client:
        query = "simulazione d'esame del capitolo 3 con 60 domande"
        started = await chat(client, auth(), query)
        result = next(e for e in started if e["type"] == "tool_result")
        assert len(result["data"]["esame"]["domande"]) == 34
        assert result["data"]["limitate_a"] == 34
        asked = await chat(client, auth(), "simulazione d'esame del capitolo 3 con 20 domande")
        assert "limitate_a" not in next(e for e in asked if e["type"] == "tool_result")["data"]


async def test_a_chat_exam_question_the_student_does_not_know_is_graded_wrong(
    settings: Settings, auth
):
    """ "2 non lo so", "3 -", "4 salta" answer those questions as not known (wrong, an attempt
    in the progress), as the REST exam route grades "non lo so"; they were not read at all,
    so the chat kept asking for them."""
    bank = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}
    async with asgi_client(app_with(settings)) as client:
        started = await chat(client, auth(), "simulazione d'esame con 5 domande")
        exam = started[0]["data"]["esame"]
        keys = [bank[(q["capitolo"], q["numero"])] for q in exam["domande"]]

        noted = await chat(client, auth(), f"1{keys[0]} 2 non lo so, 3 -")
        assert "Ho preso nota di 3 risposte su 5. Mancano le domande 4, 5." in said(noted)

        graded = await chat(client, auth(), f"4 salta 5) {keys[4]}")
        result = next(e for e in graded if e["type"] == "tool_result")["data"]
        assert (result["punteggio"], result["totale"]) == (2, 5)
        assert [e["risposta"] for e in result["esiti"]] == [keys[0], "-", "-", "-", keys[4]]
        assert "Domanda 2: non la sapevi → corretta" in said(graded)
        progress = (await client.get("/api/progress", headers=auth())).json()
        assert (progress["risposte"], progress["corrette"]) == (5, 2)


@pytest.mark.parametrize("asked", ["quali mi mancano?", "a che punto sono?", "quante ne mancano?"])
async def test_the_questions_left_in_an_open_exam_are_told(settings: Settings, auth, asked):
    """ "quali mi mancano?" was searched in the manual (nothing found); "annulla l'esame"
    found the VDS's "esame teorico e pratico": an open exam is handed in, not cancelled."""
    async with asgi_client(app_with(settings)) as client:
        await chat(client, auth(), "simulazione d'esame con 5 domande")
        await chat(client, auth(), "1a 3b")
        left = await chat(client, auth(), asked)
        assert [e["type"] for e in left if e["type"] != "agent_message"] == ["done"]
        assert "Ho preso nota di 2 risposte su 5. Mancano le domande 2, 4, 5." in said(left)
        kept = await chat(client, auth(), "annulla l'esame")
        assert said(kept).endswith(offline_exam.CANNOT_CANCEL)
        graded = await chat(client, auth(), "consegno")
        assert next(e for e in graded if e["type"] == "tool_result")["data"]["totale"] == 5


async def test_an_open_exam_is_handed_in_when_said_not_when_asked_or_not_yet(
    settings: Settings, auth
):
    """ "non ho ancora finito, aspetta" handed the exam in (its "finito"); "posso consegnare?"
    after the grading searched the manual."""
    async with asgi_client(app_with(settings)) as client:
        await chat(client, auth(), "simulazione d'esame con 5 domande")
        await chat(client, auth(), "1a")
        for asked, reply in (
            ("non ho ancora finito, aspetta", offline_exam.NOT_YET),
            ("consegno dopo", offline_exam.NOT_YET),
            ("posso consegnare?", offline_exam.MAY_HAND_IN),
        ):
            kept = await chat(client, auth(), asked)
            assert [e["type"] for e in kept if e["type"] != "agent_message"] == ["done"], asked
            assert said(kept).startswith(f"[modello offline] {reply} Ho preso nota di 1 risposta")
        assert "Manca la domanda 5." in said(await chat(client, auth(), "2a 3b 4c"))
        graded = await chat(client, auth(), "ok, ho risposto a quelle che sapevo e consegno")
        assert next(e for e in graded if e["type"] == "tool_result")["data"]["totale"] == 5
        after = await chat(client, auth(), "posso consegnare?")
        assert said(after).endswith(offline_exam.ALREADY_GRADED)
        assert not any(e["type"] == "tool_result" for e in after)


async def test_an_answer_changed_in_an_open_exam_is_told_and_graded_as_changed(
    settings: Settings, auth
):
    """ "correggi la 3: è c" handed the exam in (its "correggi"); "3b" after "3a" was noted
    without a word of the change."""
    bank = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}
    async with asgi_client(app_with(settings)) as client:
        started = await chat(client, auth(), "simulazione d'esame con 5 domande")
        third = started[0]["data"]["esame"]["domande"][2]
        key = bank[(third["capitolo"], third["numero"])]
        wrong = [x for x in "abcd" if x != key]
        await chat(client, auth(), f"1a 3{wrong[0]}")
        changed = await chat(client, auth(), f"3{wrong[1]}")
        assert f"Domanda 3: ora la tua risposta è {wrong[1]} (era {wrong[0]})." in said(changed)
        fixed = await chat(client, auth(), f"correggi la 3: è {key}")
        assert [e["type"] for e in fixed if e["type"] != "agent_message"] == ["done"]
        assert f"Domanda 3: ora la tua risposta è {key} (era {wrong[1]})." in said(fixed)
        graded = await chat(client, auth(), "consegno")
        assert "\nDomanda 3: " not in said(graded)  # not among the mistakes: its last counts


async def test_an_exam_answer_given_or_changed_in_words_is_noted(settings: Settings, auth):
    """ "cambio la 1 in d", "3 la b", "4 -> c" with an exam open were searched in the manual
    (the stall speed's § 1.15 for each) and the answers were lost at the grading."""
    bank = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}
    async with asgi_client(app_with(settings)) as client:
        started = await chat(client, auth(), "simulazione d'esame con 5 domande")
        keys = [bank[(q["capitolo"], q["numero"])] for q in started[0]["data"]["esame"]["domande"]]
        wrong = [next(x for x in "abcd" if x != key) for key in keys]
        await chat(client, auth(), f"1{wrong[0]} 2{wrong[1]}")
        changed = said(await chat(client, auth(), f"cambio la 1 in {keys[0]}"))
        assert f"Domanda 1: ora la tua risposta è {keys[0]} (era {wrong[0]})." in changed
        assert "Ho preso nota di 2 risposte su 5." in changed
        said_so = said(await chat(client, auth(), f"la 2 diventa {keys[1]}"))
        assert f"Domanda 2: ora la tua risposta è {keys[1]} (era {wrong[1]})." in said_so
        noted = said(await chat(client, auth(), f"3 la {keys[2]}"))
        assert "Ho preso nota di 3 risposte su 5. Mancano le domande 4, 5." in noted
        noted = said(await chat(client, auth(), f"4 -> {keys[3]}"))
        assert "Ho preso nota di 4 risposte su 5. Manca la domanda 5." in noted
        graded = said(await chat(client, auth(), "consegno"))
        assert graded.startswith(
            "[modello offline] Esito della simulazione: 4 risposte corrette su 5"
        )


async def test_an_open_exam_question_is_shown_again_by_its_number(settings: Settings, auth):
    """ "ripetimi la 3" found the readback, "qual era la domanda 2?" nothing, and
    "fammi rivedere le domande" drew a quiz question, which left the exam."""
    async with asgi_client(app_with(settings)) as client:
        started = await chat(client, auth(), "simulazione d'esame con 5 domande")
        questions = started[0]["data"]["esame"]["domande"]
        third = said(await chat(client, auth(), "ripetimi la 3"))
        assert third.startswith(
            f"[modello offline] Domanda 3 (capitolo {questions[2]['capitolo']})"
        )
        assert questions[2]["testo"] in third and questions[2]["risposte"]["d"] in third
        second = said(await chat(client, auth(), "qual era la seconda?"))
        assert questions[1]["testo"] in second and questions[2]["testo"] not in second
        outside = said(await chat(client, auth(), "ripetimi la 9"))
        assert outside.endswith("La simulazione ha 5 domande, numerate da 1 a 5.")
        assert "RISERVATO" not in third + second and "corretta" not in third + second
        every = said(await chat(client, auth(), "fammi rivedere le domande"))
        assert all(f"{n}. (capitolo" in every for n in range(1, 6))
        assert all(q["testo"] in every for q in questions)
        noted = said(await chat(client, auth(), "1a"))
        assert "Ho preso nota di 1 risposta su 5. Mancano le domande 2, 3, 4, 5." in noted


async def test_a_chat_exam_question_called_right_without_a_letter_is_asked_for_its_letter(
    settings: Settings, auth
):
    """ "la 3 è giusta" names no letter: the coach asks for one and notes nothing (it noted
    the answer "e", refused as no option at the grading); "la 3 è b" is noted."""
    async with asgi_client(app_with(settings)) as client:
        await chat(client, auth(), "simulazione d'esame con 5 domande")

        judged = await chat(client, auth(), "la 3 è giusta")
        assert [e["type"] for e in judged if e["type"] != "agent_message"] == ["done"]
        assert "Per rispondere alla domanda 3 scrivi il numero e la lettera" in said(judged)
        both = await chat(client, auth(), "la 1 e la 2 sono sbagliate?")
        assert "alle domande 1 e 2 scrivi il numero e la lettera" in said(both)

        noted = await chat(client, auth(), "la 3 è b")
        assert "Ho preso nota di 1 risposta su 5. Mancano le domande 1, 2, 4, 5." in said(noted)

        # A question the exam does not have: how many it has and how to answer (it searched
        # the manual for "giusta"; "9b" was left out of the note without a word).
        outside = await chat(client, auth(), "la 9 è giusta")
        assert [e["type"] for e in outside if e["type"] != "agent_message"] == ["done"]
        text = said(outside)
        assert "La simulazione ha 5 domande, numerate da 1 a 5: la domanda 9 non c'è." in text
        assert offline_exam.HOW_TO_ANSWER in text
        both = said(await chat(client, auth(), "la 3 e la 7 sono giuste"))
        assert "numerate da 1 a 5: la domanda 7 non c'è." in both
        noted = said(await chat(client, auth(), "1a 9b 12 c"))
        assert "numerate da 1 a 5: le domande 9 e 12 non ci sono." in noted
        assert "Ho preso nota di 2 risposte su 5. Mancano le domande 2, 4, 5." in noted


async def test_a_chat_exam_asked_outside_5_to_60_questions_says_what_it_serves(
    store_settings: Settings, auth
):
    """ "100 domande" starts an exam of 60 (the most an exam has), "3 domande" one of 5: the
    result says so, `limitate_a` for the client and a line for the model, as when the
    chapters hold fewer (60 was served silently, as if asked)."""
    from aircoach.quiz.exam_tools import start_exam
    from aircoach.quiz.exams import ExamService
    from aircoach.tools.registry import ToolContext
    from tests.helpers import services_of

    app = app_with(store_settings)
    async with asgi_client(app) as client:
        started = await chat(client, auth(), "simulazione d'esame con 100 domande")
        result = next(e for e in started if e["type"] == "tool_result")["data"]
        assert len(result["esame"]["domande"]) == 60 and result["limitate_a"] == 60

        exams = await services_of(app).exam_service()
        ctx = ToolContext(user_id="user-2", turn_id="turn-1", deps={ExamService: exams})
        many = await start_exam(ctx, domande=100)
        assert many.data["limitate_a"] == 60
        assert "Richieste 100 domande: una simulazione ne ha al massimo 60" in many.text
        few = await start_exam(ctx, domande="3")
        assert len(few.data["esame"]["domande"]) == 5 and "limitate_a" not in few.data
        assert "Richieste 3 domande: una simulazione ne ha almeno 5" in few.text
        chapter = await start_exam(ctx, domande=100, capitoli=[3])
        assert chapter.data["limitate_a"] == 34
        assert "Richieste 100 domande: i capitoli scelti ne hanno 34" in chapter.text
        exact = await start_exam(ctx, domande=60)
        assert "limitate_a" not in exact.data and "Richieste" not in exact.text
        # The student reads it too: `nota` for a client, and the JSON answer writes it.
        assert (
            many.data["nota"] == "Hai chiesto 100 domande, ma una simulazione ne ha al massimo 60."
        )
        assert few.data["nota"] == "Hai chiesto 3 domande, ma una simulazione ne ha almeno 5."
        assert "nota" not in exact.data
        response = await client.post(
            "/api/stream_query",
            json={"query": "simulazione d'esame con 100 domande", "stream": False},
            headers=auth("user-3"),
        )
        first_lines = response.json()["answer"].split("\n")[:2]
        assert first_lines[0].startswith("Simulazione d'esame: 60 domande")
        assert first_lines[1] == many.data["nota"]


async def test_an_exam_asked_in_everyday_words_starts_in_the_chat_and_the_real_one_does_not(
    settings: Settings, auth
):
    """ "fammi un esame", "un esame sul capitolo 3" were searched in the manual (only
    "simulazione" and "esame di prova" started one); messages about the real exam still are."""
    async with asgi_client(app_with(settings)) as client:
        for query, size, chapters in (
            ("fammi un esame", 30, set(range(1, 11))),
            ("voglio fare un esame di 20 domande", 20, set(range(1, 11))),
            ("un esame sul capitolo 3", 30, {3}),
            ("esame completo", 30, set(range(1, 11))),
        ):
            started = await chat(client, auth(), query)
            assert [e["type"] for e in started] == ["tool_result", "done"], query
            exam = started[0]["data"]["esame"]
            assert len(exam["domande"]) == size, query
            assert {q["capitolo"] for q in exam["domande"]} == chapters, query
        for query in ("ho l'esame a marzo", "quante domande ha l'esame?"):
            events = await chat(client, auth(), query)
            assert all(e.get("tool_name") != "domanda_teoria" for e in events), query
            assert said(events).strip(), query


async def test_a_student_asks_how_their_exams_went_and_no_new_one_starts(
    store_settings: Settings, auth
):
    """ "com'è andata l'ultima simulazione?" started a new exam (any "simulazione" did), "fammi
    vedere i miei esami" drew a quiz question: the chat lists the student's exams with their
    results and the latest graded one's mistakes (`domanda_teoria` `modo="esiti"`)."""
    bank = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}
    async with asgi_client(app_with(store_settings)) as client:
        none = await chat(client, auth(), "come è andato il mio ultimo esame?")
        assert "nessuna finora" in said(none)
        assert (await client.get("/api/exams", headers=auth())).json()["items"] == []

        started = await chat(client, auth(), "simulazione d'esame di 5 domande")
        exam = started[0]["data"]["esame"]
        keys = [bank[(q["capitolo"], q["numero"])] for q in exam["domande"]]
        running = await chat(client, auth(), "quanto tempo mi resta?")
        assert "5 domande: in corso, 8 minuti alla scadenza" in said(running)

        # The list asked in between leaves the exam open: the answers are graded.
        wrong = next(x for x in "abcd" if x != keys[0])
        answers = " ".join(f"{n}{k}" for n, k in enumerate([wrong, *keys[1:]], 1))
        graded = await chat(client, auth(), answers)
        assert any(e.get("tool_name") == "verifica_risposta" for e in graded)

        for query in ("com'è andata l'ultima simulazione?", "fammi vedere i miei esami"):
            events = await chat(client, auth(), query)
            result = next(e for e in events if e["type"] == "tool_result")
            assert result["tool_name"] == "domanda_teoria", query
            assert [(e["punteggio"], e["totale"]) for e in result["data"]["esami"]] == [(4, 5)]
            assert result["data"]["ultimo_esito"]["esiti"][0]["corretta"] is False
            text = said(events)
            assert "5 domande: 4 su 5 (80%), superata" in text, query
            assert f"Domanda 1: {wrong} → corretta {keys[0]})" in text, query
            assert not any(word in text for word in ENGLISH), query
        listed = (await client.get("/api/exams", headers=auth())).json()["items"]
        assert len(listed) == 1  # no exam started by asking about them

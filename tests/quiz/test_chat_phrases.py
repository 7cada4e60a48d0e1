"""The phrases students use in a quiz, through the chat with the offline model."""

from __future__ import annotations

from typing import Any

import pytest

from aircoach.quiz.bank import load_demo_questions
from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, chat

# A student's conversation played through the app: an integration module (docs/testing.md).
pytestmark = pytest.mark.integration

EXPLANATION = "La portanza è proporzionale al quadrato della velocità"  # chapter 1, question 1


def said(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "agent_message")


async def test_why_right_after_a_grading_explains_it_from_the_manual(settings: Settings, auth):
    async with asgi_client(app_with(settings)) as client:
        # "ma la b non va bene?" found ROGER's "non va mai usato" (§ 8.3); "ho sbagliato?"
        # asked the same question again, as a review
        disputed = ("ma la b non va bene?", "la b non è giusta?", "non era la b?")
        how = ("ho sbagliato?", "quindi era la c?", "era giusta?")
        for query in ("perché è sbagliata?", "perché?", "spiegamelo meglio", *disputed, *how):
            await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
            graded = await chat(client, auth(), "boh, la b")
            assert graded[0]["data"]["corretta"] is False
            assert graded[0]["data"]["riferimento"] == "1.2"
            events = await chat(client, auth(), query)
            text = said(events)
            assert not [e for e in events if e["type"] == "tool_result"], query  # no new question
            assert EXPLANATION in text and "(Fonte: § 1.2" in text, query
            assert "c) quadruplica" in text
        # Not right after a grading: no explanation of it.
        assert EXPLANATION not in said(await chat(client, auth(), "perché?"))


async def test_the_study_pages_why_button_explains_the_graded_question(settings: Settings, auth):
    """The page's "Perché?" sends "Spiegami perché: <question> <right option>": the manual's
    search answered it from the question's words (the Pitot tube's blockage for the static
    port's), not from the grading the student had just read."""
    async with asgi_client(app_with(settings)) as client:
        replies = []
        for letter in ("a", "c"):  # naming another option than the right one: the manual
            asked = await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
            question = asked[0]["data"]["question"]
            await chat(client, auth(), "la b")
            button = f"Spiegami perché: {question['testo']} {question['risposte'][letter]}"
            replies.append(said(await chat(client, auth(), button)))
    assert EXPLANATION not in replies[0]
    assert EXPLANATION in replies[1] and "(Fonte: § 1.2" in replies[1]
    assert "c) quadruplica" in replies[1]


async def test_the_options_of_a_graded_question_are_explained_one_after_another(
    settings: Settings, auth
):
    """ "e la b cosa fa?" found the clouds' § 10.14 in the manual, "e la d?" nothing; "ho
    sbagliato?" with nothing graded drew a question."""
    async with asgi_client(app_with(settings)) as client:
        nothing = await chat(client, auth(), "ho sbagliato?")
        assert not [e for e in nothing if e["type"] == "tool_result"]
        assert said(nothing).endswith("chiedimi «ripassiamo i miei errori».")
        assert "Non ho appena corretto una tua risposta" in said(nothing)
        await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
        await chat(client, auth(), "boh, la b")
        replies = {}
        for query in ("e la b cosa fa?", "e la d?", "quindi era la c?"):
            events = await chat(client, auth(), query)
            assert not [e for e in events if e["type"] == "tool_result"], query
            replies[query] = said(events)
            assert EXPLANATION in replies[query] and "(Fonte: § 1.2" in replies[query], query
    assert "La b) si dimezza, la tua risposta, non è corretta" in replies["e la b cosa fa?"]
    assert "La d) resta invariata non è corretta" in replies["e la d?"]
    assert "Sì, la c) quadruplica è la risposta corretta." in replies["quindi era la c?"]


async def test_an_answer_given_unsure_is_graded_and_two_letters_get_a_choice(
    settings: Settings, auth
):
    """ "forse la c?", "la c è giusta?", "non sono sicuro, c", "mmm c" and "c o d?" were
    searched in the manual."""
    async with asgi_client(app_with(settings)) as client:
        for answer in ("forse la c?", "la c è giusta?", "non sono sicuro, c", "mmm c"):
            await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
            graded = await chat(client, auth(), answer)
            assert graded[0]["tool_name"] == "verifica_risposta", answer
            assert graded[0]["data"]["corretta"] is True, answer
        await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
        for two in ("c o d?", "tra la b e la c"):
            choose = await chat(client, auth(), two)
            assert not [e for e in choose if e["type"] == "tool_result"], two
            assert "Una risposta sola: la " in said(choose), two
        assert (await chat(client, auth(), "d"))[0]["data"]["corretta"] is False  # still waiting


async def test_an_option_asked_about_before_answering_waits_for_the_answer(
    settings: Settings, auth
):
    """ "e la c?", "cosa significa la d?", "la b cosa vuol dire?" with a question waiting
    were searched in the manual with the conversation's subject."""
    async with asgi_client(app_with(settings)) as client:
        await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
        for query, option in (
            ("e la c?", "c"),
            ("cosa significa la d?", "d"),
            ("la b cosa vuol dire?", "b"),
        ):
            events = await chat(client, auth(), query)
            assert not [e for e in events if e["type"] == "tool_result"], query
            assert said(events).startswith("[modello offline] Prima rispondi tu: quale scegli?")
            assert f"chiedimi «e la {option}?»" in said(events), query
        graded = await chat(client, auth(), "c")  # still waiting, and graded once answered
        assert graded[0]["data"]["corretta"] is True
        assert "La d) resta invariata non è corretta" in said(await chat(client, auth(), "e la d?"))


async def test_everyday_quiz_phrases(store_settings: Settings, auth):
    async with asgi_client(app_with(store_settings)) as client:
        empty = said(await chat(client, auth(), "come sto andando?"))
        assert "Non hai ancora risposto" in empty
        assert "Non hai ancora risposto" in said(await chat(client, auth(), "da dove comincio?"))

        asked = await chat(client, auth(), "Dammi una domanda difficile")
        assert asked[0]["data"]["question"]["difficolta"] == "difficile"
        easy = await chat(client, auth(), "Dammi una domanda facile")
        assert easy[0]["data"]["question"]["difficolta"] == "facile"

        await chat(client, auth(), "Dammi la domanda 2 del capitolo 7")
        another = await chat(client, auth(), "un'altra")
        question = another[0]["data"]["question"]
        assert question["capitolo"] == 7 and question["numero"] != 2
        other = await chat(client, auth(), "un'altra del capitolo 5")
        assert other[0]["data"]["question"]["capitolo"] == 5
        # After an acknowledgement too (it was searched in the manual, which found nothing).
        acknowledged = await chat(client, auth(), "ok, un'altra")
        assert acknowledged[0]["data"]["question"]["capitolo"] == 5
        # With a subject of its own, about that subject (it drew chapter 5's fog), and "sullo
        # stesso argomento" is in the last one's chapter.
        windy = await chat(client, auth(), "un'altra sul vento")
        assert windy[0]["data"]["query"]["testo"] == "vento"
        assert "vent" in str(windy[0]["data"]["question"]).lower()
        same = await chat(client, auth(), "un'altra sullo stesso argomento")
        last = windy[0]["data"]["question"]["capitolo"]
        assert same[0]["data"]["query"] == {"mode": "capitolo", "capitolo": last}

        skipped = await chat(client, auth(), "non lo so")
        assert skipped[0]["tool_name"] == "verifica_risposta"
        assert (skipped[0]["data"]["risposta"], skipped[0]["data"]["corretta"]) == ("-", False)
        assert "NON NOTA" in said(skipped) and "non la sa" in said(skipped)
        await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
        assert said(await chat(client, auth(), "salta")).count("conta come sbagliata") == 1

        three = await chat(client, auth(), "Dammi 3 domande dai capitoli 2, 5 e 7")
        asked3 = three[0]["data"]["questions"]
        graded = await chat(client, auth(), "1a 2b 3c")
        gradings = [e["data"] for e in graded if e["type"] == "tool_result"]
        assert sorted((g["capitolo"], g["numero"], g["risposta"]) for g in gradings) == sorted(
            (q["capitolo"], q["numero"], x) for q, x in zip(asked3, "abc", strict=True)
        )
        # One of them explained, by the number the student gave it, then another: "spiegami
        # la 3" was searched in the manual (it found a radio phrase), "non ho capito la
        # domanda 2" explained the last one graded.
        bank = {(q["capitolo"], q["numero"]): q for q in await load_demo_questions()}
        for query, place in (("non ho capito la domanda 2", 1), ("spiegami la 3", 2)):
            explained = await chat(client, auth(), query)
            meant = bank[(asked3[place]["capitolo"], asked3[place]["numero"])]
            assert not [e for e in explained if e["type"] == "tool_result"], query
            assert meant["spiegazione"] in said(explained), query
        assert "Ho corretto 3 risposte" in said(await chat(client, auth(), "spiegami la 7"))
        # Which were wrong, from those gradings (it drew a review question), then one more by
        # its number alone (it was searched in the manual).
        mistakes = await chat(client, auth(), "quali ho sbagliato?")
        assert not [e for e in mistakes if e["type"] == "tool_result"]
        wrong = [g for g in gradings if not g["corretta"]]
        told = f"Le risposte sbagliate ({len(wrong)} su 3)" if wrong else "Nessun errore"
        assert told in said(mistakes)
        first = await chat(client, auth(), "e la 1?")
        meant = bank[(asked3[0]["capitolo"], asked3[0]["numero"])]
        assert meant["spiegazione"] in said(first)

        progress = said(await chat(client, auth(), "su cosa devo esercitarmi?"))
        assert "I tuoi progressi nei quiz" in progress and "risposte ai quiz: 5" in progress
        assert "Proponi" not in progress
        # Asked, not practised: "fammi ripassare i miei punti deboli" draws questions.
        # (Not the same text: the readiness it shows decays with the clock.)
        weak = await chat(client, auth(), "Quali sono i miei punti deboli?")
        assert not [e for e in weak if e["type"] == "tool_result"]
        assert "I tuoi progressi nei quiz" in said(weak) and "risposte ai quiz: 5" in said(weak)
        # A count asked is the progress too, not a review question ("sbagliate" drew one),
        # and the weakest chapter or the readiness (searched in the manual, found nothing).
        for query in (
            "quante ne ho sbagliate?",
            "qual è il mio capitolo più debole?",
            "quanto sono pronto per l'esame?",
            "cosa devo studiare oggi?",  # a plan asked for: the progress is what it rests on
            "quali capitoli devo ripassare?",  # which ones: it drew a review question
            # each searched in the manual, which found nothing
            "in cosa vado male?",
            "quante domande ho fatto?",
            "come sono messo?",
        ):
            counted = await chat(client, auth(), query)
            assert not [e for e in counted if e["type"] == "tool_result"], query
            assert "risposte ai quiz: 5" in said(counted), query


async def test_a_chapter_asked_for_after_sul_or_by_its_subject_gets_its_question(
    settings: Settings, auth
):
    """ "sul capitolo 3" was searched as the text "capitolo" (no question found), and a
    chapter named by its subject ("di meteorologia") drew a question of any chapter."""
    async with asgi_client(app_with(settings)) as client:
        for user, (query, chapter) in enumerate(
            (
                ("Fammi una domanda sul capitolo 3", 3),
                ("Fammi una domanda sul capitolo tre", 3),
                ("Fammi una domanda di meteorologia", 5),
                ("Fammi una domanda sulla navigazione", 6),
                ("un'altra sul capitolo 8", 8),
            )
        ):
            # A student each: no question waits, whose options the request could match
            # (the offline model's test of that is deterministic).
            asked = await chat(client, auth(f"student-{user}"), query)
            assert asked[0]["tool_name"] == "domanda_teoria", query
            assert asked[0]["data"]["question"]["capitolo"] == chapter, query


async def test_a_refused_answer_is_explained_and_gradings_read_without_tool_names(
    settings: Settings, auth
):
    async with asgi_client(app_with(settings)) as client:
        await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
        refused = said(await chat(client, auth(), "la e"))
        assert "la lettera 'e' non è un'opzione" in refused and "a, b, c, d" in refused
        assert "Non sono riuscito" not in refused and "Tool" not in refused

        graded = said(await chat(client, auth(), "C"))  # the question still waits: graded now
        assert "CORRETTA" in graded and "c) quadruplica" in graded and EXPLANATION in graded
        assert "verifica_risposta" not in graded and "Risultato di" not in graded

        await chat(client, auth(), "Dammi 2 domande dai capitoli 2 e 5")
        both = said(await chat(client, auth(), "1a 2b"))
        assert "verifica_risposta" not in both
        first, second = both.split("\n\nEsito: ")  # one grading a paragraph
        assert first.count("Esito: ") == 1 and "Esito: " not in second

        # "è" before the letter is the verb (both were graded as the letter "e", refused).
        asked = (await chat(client, auth(), "Dammi 2 domande dai capitoli 2 e 5"))[0]["data"]
        graded = await chat(client, auth(), "la 1 è b, la 2 è la c")
        gradings = [e["data"] for e in graded if e["type"] == "tool_result"]
        assert sorted(str(g.get("risposta")) for g in gradings) == ["b", "c"], gradings
        assert sorted((g["capitolo"], g["numero"], g["risposta"]) for g in gradings) == sorted(
            (q["capitolo"], q["numero"], x) for q, x in zip(asked["questions"], "bc", strict=True)
        )


async def test_a_letter_with_no_question_waiting_is_not_searched_in_the_manual(
    settings: Settings, auth
):
    async with asgi_client(app_with(settings)) as client:
        headers = auth()
        nothing_asked = await chat(client, headers, "b")
        assert not [e for e in nothing_asked if e["type"] == "tool_result"]
        assert "Non c'è una domanda in attesa" in said(nothing_asked)

        await chat(client, headers, "Dammi la domanda 1 del capitolo 1")
        await chat(client, headers, "c")
        again = await chat(client, headers, "c")  # a double tap, or a repeat: graded once
        assert not [e for e in again if e["type"] == "tool_result"]
        text = said(again)
        assert "già registrato" in text and "domanda 1 del capitolo 1" in text
        progress = (await client.get("/api/progress", headers=headers)).json()
        assert progress["risposte"] == 1
        # "e quindi", "è giusto": a word, not a letter of the options (a to d).
        for follow_up in ("e quindi", "è giusto"):
            assert "già registrato" not in said(await chat(client, headers, follow_up))


async def test_a_chapter_out_of_range_is_answered_with_what_to_ask(settings: Settings, auth):
    """Before, the offline coach said only "Non sono riuscito a completare la richiesta" to a
    request the quiz refused, though the refusal said what would do."""
    async with asgi_client(app_with(settings)) as client:
        events = await chat(client, auth(), "Dammi una domanda del capitolo 12")
        failed = next(e for e in events if e["type"] == "tool_result")
        assert "capitolo must be between 1 and 10" in failed["data"]["error"]
        assert failed["data"]["messaggio"].startswith("Lo strumento 'Quiz di teoria'")
        reply = said(events)
        assert "Il capitolo 12 non c'è: scegli un capitolo da 1 a 10." in reply
        assert "must be" not in reply and "Tool" not in reply

        several = said(await chat(client, auth(), "Dammi 2 domande dai capitoli 3 e 15"))
        assert "Il capitolo 15 non c'è: scegli un capitolo da 1 a 10." in several


async def test_hand_in_with_no_exam_open_says_how_to_start_one(settings: Settings, auth):
    """Before, «consegno» with no mock exam open searched the manual for it and answered
    "Non ho trovato questo argomento"."""
    async with asgi_client(app_with(settings)) as client:
        for query in ("consegno", "Consegno!", "ho finito"):
            events = await chat(client, auth(), query)
            assert not [e for e in events if e["type"] == "tool_result"], query
            reply = said(events)
            assert "Non hai una simulazione d'esame aperta da consegnare" in reply, query
            assert "«simulazione d'esame»" in reply and "Non ho trovato" not in reply, query
        # A goodbye is no hand-in; "basta" is still a word of a question for the manual.
        goodbye = said(await chat(client, auth(), "ho finito, grazie"))
        assert goodbye.endswith(
            "Prego! Quando vuoi, chiedimi un altro argomento o «fammi una domanda»."
        )
        await chat(client, auth(), "Dammi una domanda del capitolo 5")
        stopped = await chat(client, auth(), "basta così")
        assert not [e for e in stopped if e["type"] == "tool_result"]
        assert "Va bene!" in said(stopped)
        visibility = said(await chat(client, auth(), "quando basta una visibilità di 5 km?"))
        assert "Fonte: § 7.5" in visibility
        # A question about handing something in is still a question for the manual.
        asked = await chat(client, auth(), "Come si consegna il piano di volo all'ente ATS?")
        assert "Non hai una simulazione d'esame aperta" not in said(asked)


async def test_a_numbered_dont_know_among_several_pending_questions_is_graded_not_known(
    settings: Settings, auth
):
    """ "1 b 2 non lo so" graded only question 1 (the numbered "don't know" was dropped) and a
    lone "2 non lo so" graded nothing; the single question's "non lo so" and the mock exam
    grade it as not known."""
    async with asgi_client(app_with(settings)) as client:
        for query, given in (("1 b 2 non lo so", "b-"), ("1 salta, 2: c", "-c")):
            asked = (await chat(client, auth(), "Dammi 2 domande dai capitoli 2 e 5"))[0]["data"]
            events = await chat(client, auth(), query)
            gradings = [e["data"] for e in events if e["type"] == "tool_result"]
            assert sorted((g["capitolo"], g["numero"], g["risposta"]) for g in gradings) == sorted(
                (q["capitolo"], q["numero"], x)
                for q, x in zip(asked["questions"], given, strict=True)
            ), query
            assert "NON NOTA" in said(events), query

        asked = (await chat(client, auth(), "Dammi 3 domande dai capitoli 2, 5 e 7"))[0]["data"]
        second = asked["questions"][1]
        events = await chat(client, auth(), "2 non lo so")
        gradings = [e["data"] for e in events if e["type"] == "tool_result"]
        assert [(g["capitolo"], g["numero"], g["risposta"]) for g in gradings] == [
            (second["capitolo"], second["numero"], "-")
        ]
        # Questions 1 and 3 still wait, under the numbers they were asked with (3 was read as
        # out of range, "1a 2c" graded the third question as the second).
        events = await chat(client, auth(), "1a 3c")
        gradings = [e["data"] for e in events if e["type"] == "tool_result"]
        first, _, third = asked["questions"]
        assert sorted((g["capitolo"], g["numero"], g["risposta"]) for g in gradings) == sorted(
            [(first["capitolo"], first["numero"], "a"), (third["capitolo"], third["numero"], "c")]
        )


async def test_a_lone_numbered_letter_among_several_pending_questions_grades_that_question(
    settings: Settings, auth
):
    """ "2b" with three questions waiting graded nothing: the numbered path took one answer
    for something else ("capitoli 2, 5 e 7") and the single-answer path reads no number, so
    the manual was searched. A message that says nothing but that answer grades it; one
    answer for several numbers ("1 e 3: a") grades each."""
    async with asgi_client(app_with(settings)) as client:
        asked = (await chat(client, auth(), "Dammi 3 domande dai capitoli 2, 5 e 7"))[0]["data"]
        first, second, third = asked["questions"]
        events = await chat(client, auth(), "2b")
        gradings = [e["data"] for e in events if e["type"] == "tool_result"]
        assert [(g["capitolo"], g["numero"], g["risposta"]) for g in gradings] == [
            (second["capitolo"], second["numero"], "b")
        ]
        events = await chat(client, auth(), "1 e 3: a")
        gradings = [e["data"] for e in events if e["type"] == "tool_result"]
        assert sorted((g["capitolo"], g["numero"], g["risposta"]) for g in gradings) == sorted(
            [(first["capitolo"], first["numero"], "a"), (third["capitolo"], third["numero"], "a")]
        )

        # One question left: "3 e’ c" (a phone's "è") grades it under the number it was asked
        # with.
        asked = (await chat(client, auth(), "Dammi 3 domande dai capitoli 2, 5 e 7"))[0]["data"]
        await chat(client, auth(), "1a 2b")
        events = await chat(client, auth(), "la 3 e’ c")
        gradings = [e["data"] for e in events if e["type"] == "tool_result"]
        last = asked["questions"][2]
        assert [(g["capitolo"], g["numero"], g["risposta"]) for g in gradings] == [
            (last["capitolo"], last["numero"], "c")
        ]


@pytest.mark.parametrize(
    "request_", ["fammi una domanda su questo", "una domanda sull'argomento", "un quiz su questa"]
)
async def test_a_question_on_what_the_conversation_was_about(settings: Settings, auth, request_):
    """ "fammi una domanda su questo" after an answer on the lift drew a question of any
    chapter (one on a grass runway): it is of the chapter the manual answered from."""
    async with asgi_client(app_with(settings)) as client:
        await chat(client, auth(), "cos'è la resistenza indotta?")
        asked = await chat(client, auth(), request_)
        assert asked[0]["tool_name"] == "domanda_teoria"
        assert asked[0]["data"]["question"]["capitolo"] == 1


@pytest.mark.parametrize(
    ("query", "chapter"),
    [
        ("una domanda di aerodinamica", 1),
        ("mi fai una domanda di navigazione?", 6),
        ("interrogami sulla meteorologia", 5),
        ("ok, una domanda sul fattore umano", 10),
        ("una domanda a caso", None),
        ("testami sul QNH", None),
        # "domanda a caso" found ROGER's "una domanda che chiede sì o no" (§ 8.3), "domanda
        # random" nothing, "altra domanda" the spin (§ 1.13).
        ("domanda a caso", None),
        ("domande a caso", None),
        ("domanda random", None),
        ("altra domanda", None),
        ("dammi un'altra domanda", None),
    ],
)
async def test_a_request_for_a_question_in_everyday_words_asks_one(
    settings: Settings, auth, query, chapter
):
    """They shared too few words with the tool's examples: the manual was searched ("una
    domanda di aerodinamica": not found)."""
    async with asgi_client(app_with(settings)) as client:
        asked = await chat(client, auth(), query)
    assert asked[0]["tool_name"] == "domanda_teoria", query
    if chapter is not None:
        assert asked[0]["data"]["question"]["capitolo"] == chapter


@pytest.mark.parametrize(
    ("query", "reply"),
    [
        ("posso farti una domanda?", "Certo, chiedimi pure."),
        ("Ho una domanda", "Certo, chiedimi pure."),
        ("ho una domanda sul QNH", "Certo, dimmi pure la tua domanda sul QNH."),
    ],
)
async def test_a_question_announced_is_waited_for_not_quizzed(
    settings: Settings, auth, query, reply
):
    """ "ho una domanda sul QNH" drew a quiz question; "posso farti una domanda?" was searched
    in the manual (not found)."""
    async with asgi_client(app_with(settings)) as client:
        events = await chat(client, auth(), query)
    assert not [e for e in events if e["type"] == "tool_result"], query
    assert said(events).endswith(reply)


async def test_the_question_after_its_announcement_is_answered_as_if_asked_alone(
    settings: Settings, auth
):
    async with asgi_client(app_with(settings)) as client:
        alone = await chat(client, auth("a"), "cos'è il QNH?")
        announced = await chat(client, auth("b"), "ho una domanda: cos'è il QNH?")
        use = await chat(client, auth("c"), "ho una domanda sul QNH, quando si usa?")
        # Both drew a quiz question (the request for another one).
        another = await chat(client, auth("d"), "un'altra domanda: cos'è il QNH?")
        other = await chat(client, auth("e"), "altra domanda, cos'è il QNH?")
    assert announced[0]["arguments"]["query"] == "cos'è il QNH"
    for events in (announced, another, other):
        assert said(events) == said(alone)
    assert use[0]["data"]["items"][0]["riferimento"] == "3.2"  # it found nothing


@pytest.mark.parametrize(
    "asked",
    ["ripetimi la domanda", "puoi ripetere?", "qual era la domanda?", "non ho capito la domanda"],
)
async def test_the_question_waiting_is_repeated_when_asked(settings: Settings, auth, asked):
    """ "ripetimi la domanda" found ROGER's "una domanda che chiede sì o no", "puoi ripetere?"
    ROGER and WILCO, "non ho capito la domanda" drew a new question."""
    async with asgi_client(app_with(settings)) as client:
        question = (await chat(client, auth(), "fammi una domanda"))[0]["data"]["question"]
        again = await chat(client, auth(), asked)
        # No tool called (a question that cites a rule, "legge 106/1985", gets its grounding)
        assert not [e for e in again if e["type"] == "tool_result"]
        text = said(again)
        assert text.startswith("[modello offline] Te la ripeto:")
        heading = f"Capitolo {question['capitolo']}, domanda {question['numero']}: "
        assert heading + question["testo"] in text
        assert all(f"{k}) {v}" in text for k, v in question["risposte"].items())
        # Not the key the quiz result holds for the model ("[RISERVATO AL COACH, ...]").
        assert "RISERVATO" not in text and "Spiegazione" not in text and "corretta" not in text
        graded = await chat(client, auth(), "b")
        assert graded[0]["tool_name"] == "verifica_risposta"
        assert graded[0]["data"]["numero"] == question["numero"]


@pytest.mark.parametrize("asked", ["mi dai un suggerimento?", "un aiutino?", "un indizio"])
async def test_a_hint_is_where_the_manual_teaches_the_question_waiting(
    settings: Settings, auth, asked
):
    """ "mi dai un suggerimento?" was searched as asked (the oil's "lubrifica"), "un aiutino?"
    found AVGAS's "il colore aiuta"."""
    async with asgi_client(app_with(settings)) as client:
        await chat(client, auth(), "Dammi la domanda 22 del capitolo 1")  # the slats, § 1.7
        hinted = await chat(client, auth(), asked)
        searched = next(e for e in hinted if e["type"] == "tool_result")
        assert searched["tool_name"] == "kb_search"
        assert searched["arguments"]["query"] == "Gli slat, posti sul bordo d'attacco:"
        assert said(hinted).endswith(
            "Un aiuto: ne parla il manuale al § 1.7 (Principi di aerodinamica). Rileggilo, "
            "poi rispondi con la lettera (o «non lo so»)."
        )
        graded = await chat(client, auth(), "d")
        assert (graded[0]["data"]["numero"], graded[0]["data"]["corretta"]) == (22, True)


async def test_no_reply_to_a_question_waiting_gives_away_its_key(settings: Settings, auth):
    """Whatever the student says while a question waits, the key the quiz result holds for
    the model ("[RISERVATO AL COACH ...]": the right option and its explanation) is not in the
    coach's reply ("non so", "boh" answer it: then the key is told). "ripetimi la domanda"
    once showed it whole."""
    from aircoach.quiz.bank import load_demo_questions

    bank = {(q["capitolo"], q["numero"]): q for q in await load_demo_questions()}
    said_before_answer = [
        "ripetimi la domanda", "puoi ripetere?", "non ho capito la domanda", "mi dai un "
        "suggerimento?", "un aiutino?", "qual è la risposta giusta?", "dimmi la risposta",
        "perché?", "spiegamelo", "quali ho sbagliato?", "cos'è lo slat?", "aiuto",
        "che capitoli ci sono?", "come sto andando?", "ok",
    ]  # fmt: skip
    async with asgi_client(app_with(settings)) as client:
        for said_now in said_before_answer:
            asked = await chat(client, auth(), "Dammi la domanda 22 del capitolo 1")
            question = asked[0]["data"]["question"]
            key = bank[(question["capitolo"], question["numero"])]
            reply = said(await chat(client, auth(), said_now))
            assert "RISERVATO" not in reply, said_now
            assert key["spiegazione"] not in reply, said_now
            right = key["risposte"][key["corretta"]]
            assert f"corretta {key['corretta']}) {right}" not in reply, said_now

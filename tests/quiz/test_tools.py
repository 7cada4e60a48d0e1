"""The quiz tools: domanda_teoria (every branch of its priority order, several questions,
review, nothing found, every validation error) and verifica_risposta."""

from __future__ import annotations

from typing import Any

import pytest

from aircoach.errors import StoreUnavailable
from aircoach.quiz.bank import chapter_titles, seed_demo_questions
from aircoach.quiz.service import QuizService
from aircoach.quiz.tools import domanda_teoria, verifica_risposta
from aircoach.store.sqlite import SqliteAttemptStore, SqliteQuizStore
from aircoach.store.sqlite_review import SqliteReviewStore
from aircoach.tools.registry import ToolContext


@pytest.fixture
async def ctx(bank_file):
    quiz = SqliteQuizStore(bank_file)
    service = QuizService(
        quiz,
        SqliteAttemptStore(bank_file),
        await chapter_titles(),
        reviews=SqliteReviewStore(bank_file),
    )
    return ToolContext(user_id="u", turn_id="turn-1", deps={QuizService: service})


async def test_demo_questions_cover_ten_chapters_and_load_once(ctx):
    store = ctx.need(QuizService).questions
    assert await store.count() >= 100
    assert await seed_demo_questions(store) == 0  # not empty any more: nothing to do
    for chapter in range(1, 11):
        assert (await store.random_by_field("capitolo", chapter))["capitolo"] == chapter


async def test_a_word_asked_is_drawn_as_written_before_another_word_of_its_stem(ctx):
    """ "carburatore" and "carburante" share a stem: "quiz sul carburatore" drew the fuel
    reserve's question (chapter 6) as often as the carburettor's."""
    for _ in range(8):  # a draw among the best: each draw has the word as written
        out = await domanda_teoria(ctx, testo="carburatore")
        question = out.data["question"]
        assert "carburatore" in f"{question['testo']} {question['argomento']}".casefold()


async def test_chapter_and_number_give_that_question(ctx):
    out = await domanda_teoria(ctx, capitolo=7, numero=2)
    q = out.data["question"]
    assert out.ok and (q["capitolo"], q["numero"]) == (7, 2)
    assert out.data["query"]["mode"] == "capitolo_numero"
    assert q["testo"] in out.text and "a) " in out.text


async def test_chapter_and_number_beat_every_other_argument(ctx):
    out = await domanda_teoria(
        ctx, capitolo=2, numero=1, testo="altimetro", campo="difficolta", valore="facile"
    )
    assert (out.data["question"]["capitolo"], out.data["question"]["numero"]) == (2, 1)


async def test_text_search_is_case_insensitive_and_beats_field(ctx):
    out = await domanda_teoria(ctx, testo="ALTIMETRO", campo="capitolo", valore="9", capitolo=9)
    assert out.data["query"]["mode"] == "testo" and out.data["query"]["matches"] > 0
    question = out.data["question"]
    assert "altimetr" in f"{question['testo']} {question['argomento']}".casefold()


async def test_field_and_value_beat_chapter(ctx):
    out = await domanda_teoria(ctx, campo="difficolta", valore="Difficile", capitolo=1)
    assert out.data["query"]["mode"] == "campo"
    assert out.data["question"]["difficolta"] == "difficile"


async def test_chapter_alone_gives_a_question_of_that_chapter(ctx):
    for _ in range(5):
        out = await domanda_teoria(ctx, capitolo="4")
        assert out.data["question"]["capitolo"] == 4 and out.data["query"]["mode"] == "capitolo"


async def test_no_arguments_give_a_random_question(ctx):
    seen = {
        (o.data["question"]["capitolo"], o.data["question"]["numero"])
        for o in [await domanda_teoria(ctx) for _ in range(15)]
    }
    assert len(seen) > 1


async def test_no_match_is_a_result_not_an_error(ctx):
    out = await domanda_teoria(ctx, testo="zzzqqq inesistente")
    assert out.ok and out.data["question"] is None and out.data["query"]["matches"] == 0
    out = await domanda_teoria(ctx, capitolo=1, numero=999)
    assert out.ok and out.data["question"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"capitolo": 0}, "capitolo must be between 1 and 10"),
        ({"capitolo": 11}, "capitolo must be between 1 and 10"),
        ({"capitolo": "tre"}, "capitolo must be a whole number"),
        ({"capitolo": True}, "capitolo must be a whole number"),
        ({"capitolo": 2.5}, "capitolo must be a whole number"),
        ({"capitolo": 1, "numero": 0}, "numero must be 1 or more"),
        ({"capitolo": 1, "numero": "x"}, "numero must be a whole number"),
        ({"numero": 3}, "numero needs capitolo"),
        ({"campo": "argomento"}, "campo and valore go together"),
        ({"valore": "meteo"}, "campo and valore go together"),
        ({"campo": "password", "valore": "x"}, "campo 'password' is not searchable"),
        ({"campo": "argomento", "valore": "  "}, "valore must not be empty"),
        ({"testo": "ab"}, "testo must be at least 3 characters"),
        ({"testo": "   a  "}, "testo must be at least 3 characters"),
    ],
)
async def test_invalid_arguments_become_a_tool_error(ctx, args, message):
    out = await domanda_teoria(ctx, **args)
    assert not out.ok and message in out.data["error"]
    assert out.text.startswith("[Tool domanda_teoria failed:") and message in out.text


# --- the key: for the model only ---


async def test_the_client_gets_the_question_without_its_key_and_the_model_gets_both(ctx):
    out = await domanda_teoria(ctx, capitolo=1, numero=1)
    question = out.data["question"]
    assert "corretta" not in question and "spiegazione" not in question
    assert set(question["risposte"]) == {"a", "b", "c", "d"}
    assert "RISERVATO AL COACH, NON RIVELARE PRIMA CHE L'ALLIEVO ABBIA RISPOSTO" in out.text
    assert "risposta corretta c) quadruplica" in out.text and "Spiegazione: La portanza" in out.text
    assert "La portanza è proporzionale" not in str(out.data)


# --- several questions at once ---


def keys(questions):
    return [(q["capitolo"], q["numero"]) for q in questions]


async def test_several_chapters_give_one_question_each(ctx):
    out = await domanda_teoria(ctx, capitoli=[2, 5, 7])
    assert out.ok and "question" not in out.data
    assert [c for c, _ in keys(out.data["questions"])] == [2, 5, 7]
    assert out.data["query"] == {"mode": "multi", "quante": 3, "capitoli": [2, 5, 7]}
    assert all("corretta" not in q and "spiegazione" not in q for q in out.data["questions"])
    assert out.text.startswith("3 domande:") and out.text.count("RISERVATO AL COACH") == 3


async def test_how_many_spreads_over_the_chapters_and_never_repeats(ctx):
    for _ in range(5):
        out = await domanda_teoria(ctx, capitoli=["2", 5], quante=5)
        found = keys(out.data["questions"])
        assert len(found) == len(set(found)) == 5
        assert sorted(c for c, _ in found) == [2, 2, 2, 5, 5]
    out = await domanda_teoria(ctx, capitoli="1, 3 e 9")  # as text, from a sloppy model
    assert [c for c, _ in keys(out.data["questions"])] == [1, 3, 9]
    out = await domanda_teoria(ctx, capitolo=4, quante=3)
    assert [c for c, _ in keys(out.data["questions"])] == [4, 4, 4]
    out = await domanda_teoria(ctx, quante=2)
    assert len(set(keys(out.data["questions"]))) == 2


async def test_several_by_text_are_the_best_matches(ctx):
    out = await domanda_teoria(ctx, testo="velocita", quante=3)
    assert len(out.data["questions"]) == 3
    assert all("velocit" in q["testo"].casefold() for q in out.data["questions"])
    assert out.data["query"] == {"mode": "multi", "quante": 3, "testo": "velocita"}


async def test_the_sub_queries_run_concurrently(ctx):
    import anyio

    running, most = 0, 0
    both_started = anyio.Event()
    inner = ctx.need(QuizService).questions.list_questions

    async def list_questions(*, capitolo, limit):
        nonlocal running, most
        running += 1
        most = max(most, running)
        if most == 2:
            both_started.set()
        with anyio.fail_after(30):  # generous: the other sub-query starts at once
            await both_started.wait()
        try:
            return await inner(capitolo=capitolo, limit=limit)
        finally:
            running -= 1

    ctx.need(QuizService).questions.list_questions = list_questions
    out = await domanda_teoria(ctx, capitoli=[3, 8])
    assert most == 2 and len(out.data["questions"]) == 2


# --- review ---


async def answer_wrong(ctx, capitolo, numero):
    question = await ctx.need(QuizService).question(capitolo, numero)
    wrong = next(x for x in "abcd" if x != question["corretta"])
    await ctx.need(QuizService).grade(ctx.user_id, capitolo, numero, wrong, turn_id=None)


async def test_review_draws_the_questions_answered_wrong(ctx):
    out = await domanda_teoria(ctx, modo="ripasso")
    assert out.data["query"] == {"mode": "ripasso", "quante": 1, "fonte": "nuove"}
    assert out.data["question"] is not None  # nothing to review yet: a new question

    await answer_wrong(ctx, 6, 3)
    for _ in range(3):
        out = await domanda_teoria(ctx, modo="Ripasso")
        assert keys([out.data["question"]]) == [(6, 3)]
        assert out.data["query"]["fonte"] == "in_scadenza"
    await answer_wrong(ctx, 9, 2)
    out = await domanda_teoria(ctx, modo="ripasso", quante=3)
    assert keys(out.data["questions"])[:2] == [(6, 3), (9, 2)]  # most overdue first
    out = await domanda_teoria(ctx, modo="ripasso", capitolo=9)
    assert keys([out.data["question"]]) == [(9, 2)]


async def test_review_without_due_questions_draws_new_ones_from_the_weak_chapters(ctx):
    quiz = ctx.need(QuizService)
    for n in (1, 2, 3):
        await answer_wrong(ctx, 5, n)
    out = await domanda_teoria(ctx, modo="ripasso", quante=5)
    assert keys(out.data["questions"])[:3] == [(5, 1), (5, 2), (5, 3)]
    assert [c for c, _ in keys(out.data["questions"])] == [5] * 5  # then new ones of chapter 5
    assert not {(5, 1), (5, 2), (5, 3)} & set(keys(out.data["questions"][3:]))
    assert len(await quiz.review_items(ctx.user_id, 5)) == 5


async def test_more_questions_than_allowed_are_served_up_to_the_limit_not_refused(ctx):
    out = await domanda_teoria(ctx, quante=30)
    assert out.ok and len(out.data["questions"]) == 10
    assert out.data["query"]["limitate_a"] == 10 and "failed" not in out.text


async def test_chapter_draws_do_not_repeat_until_the_chapter_is_done(ctx):
    total = len(await ctx.need(QuizService).questions.list_questions(capitolo=3, limit=500))
    seen = [keys([(await domanda_teoria(ctx, capitolo=3)).data["question"]])[0] for _ in range(10)]
    assert len(set(seen)) == 10 <= total


async def test_a_question_found_by_text_is_not_asked_again_while_others_match_as_well(ctx):
    # "altimetro": ten questions match it equally well.
    asked = [
        keys([(await domanda_teoria(ctx, testo="altimetro")).data["question"]])[0]
        for _ in range(10)
    ]
    assert len(set(asked)) == 10
    again = await domanda_teoria(ctx, testo="l'altimetro")  # then the one asked longest ago
    assert keys([again.data["question"]]) == [asked[0]]
    # Only the best matches: one question has both words, the others one of them.
    for _ in range(2):
        vortex = await domanda_teoria(ctx, testo="vortice di estremità")
        assert keys([vortex.data["question"]]) == [(10, 28)]


async def test_nothing_found_lets_the_model_answer_with_the_chapters(ctx):
    out = await domanda_teoria(ctx, testo="elicottero")
    assert out.ok and not out.final
    assert out.data["question"] is None
    # The student's sentence has the one name every tool uses; `message` stays, deprecated.
    assert out.data["messaggio"] == "Nessuna domanda trovata per questa richiesta."
    assert out.data["message"] == out.data["messaggio"]
    assert [c["capitolo"] for c in out.data["capitoli"]] == list(range(1, 11))
    assert "Capitoli tra cui scegliere: 1 Principi di aerodinamica;" in out.text
    out = await domanda_teoria(ctx, testo="elicottero", quante=2)
    assert out.data["questions"] == [] and not out.final
    found = await domanda_teoria(ctx, capitolo=1)
    assert found.final


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"capitoli": [2, 11]}, "capitoli must be between 1 and 10"),
        ({"capitoli": list(range(1, 12))}, "capitoli: at most 10 chapters"),
        ({"quante": 0}, "quante must be between 1 and 10"),
        ({"modo": "tutto"}, "modo 'tutto' is not a mode"),
        ({"testo": "x" * 201}, "testo must be at most 200 characters"),
    ],
)
async def test_invalid_new_arguments_become_a_tool_error(ctx, args, message):
    out = await domanda_teoria(ctx, **args)
    assert not out.ok and message in out.data["error"]


# --- verifica_risposta ---


async def test_grading_in_the_chat_returns_the_rest_object_and_records_the_turn(ctx):
    quiz = ctx.need(QuizService)
    out = await verifica_risposta(ctx, capitolo=1, numero="1", risposta="la c")
    assert out.ok and out.final
    progress = out.data.pop("progresso")
    assert out.data == {
        "capitolo": 1,
        "numero": 1,
        "risposta": "c",
        "corretta": True,
        "risposta_corretta": "c",
        "spiegazione": (await quiz.question(1, 1))["spiegazione"],
        "riferimento": "1.2",
    }
    # The progress after the grading, as GET /api/progress gives it: this answer counted.
    assert progress == (await quiz.progress("u")).model_dump()
    assert (progress["risposte"], progress["corrette"]) == (1, 1)
    first = progress["capitoli"][0]
    assert (first["capitolo"], first["risposte"], first["corrette"]) == (1, 1, 1)
    assert out.text.splitlines()[:3] == [
        "Esito: risposta CORRETTA (capitolo 1, domanda 1).",
        "Risposta dell'allievo: c) quadruplica",
        "Risposta corretta: c) quadruplica",
    ]
    (attempt,) = await ctx.need(QuizService).attempts.recent_attempts("u", 5)
    assert (attempt.turn_id, attempt.corretta) == ("turn-1", True)
    wrong = await verifica_risposta(ctx, capitolo=1, numero=1, risposta="raddoppia")
    assert wrong.data["corretta"] is False and wrong.text.startswith("Esito: risposta SBAGLIATA")


async def test_a_progress_that_cannot_be_read_leaves_the_grading_stored_and_sent(ctx, caplog):
    quiz = ctx.need(QuizService)

    async def down(user_id: str) -> Any:
        raise StoreUnavailable()

    quiz.attempts.chapter_stats = down  # the store fails after the attempt was written
    out = await verifica_risposta(ctx, capitolo=1, numero=1, risposta="c")
    assert out.ok and out.data["corretta"] is True and "progresso" not in out.data
    assert "progress after a grading unavailable" in caplog.text
    (attempt,) = await quiz.attempts.recent_attempts("u", 5)
    assert (attempt.capitolo, attempt.numero, attempt.corretta) == (1, 1, True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"capitolo": 1, "numero": 1, "risposta": "e"}, "la lettera 'e' non è un'opzione"),
        ({"capitolo": 1, "numero": 1, "risposta": "forse"}, "risposta 'forse' non riconosciuta"),
        ({"capitolo": 1, "numero": 99, "risposta": "a"}, "Domanda 99 del capitolo 1 non trovata"),
        ({"capitolo": 11, "numero": 1, "risposta": "a"}, "capitolo must be between 1 and 10"),
        ({"capitolo": 1, "numero": 1}, "risposta is required"),
        ({"capitolo": 1, "numero": 1, "risposta": "a" * 501}, "at most 500 characters"),
    ],
)
async def test_grading_errors_go_back_to_the_model_and_store_nothing(ctx, args, message):
    out = await verifica_risposta(ctx, **args)
    assert not out.ok and message in out.data["error"]
    assert out.text.startswith("[Tool verifica_risposta failed:")
    assert await ctx.need(QuizService).attempts.recent_attempts("u", 5) == []

"""The quiz service on both stores: grading against the key, attempts, progress, review."""

from __future__ import annotations

from collections import Counter

import pytest

from aircoach.quiz.bank import chapter_titles, seed_demo_questions
from aircoach.quiz.models import ChapterProgress, DayProgress
from aircoach.quiz.service import (
    WEAK_BELOW,
    WEAK_MIN_ANSWERS,
    InvalidAnswer,
    QuestionNotFound,
    QuizService,
    progress_section,
    public,
)
from aircoach.services import build_review_store, open_stores
from aircoach.settings import Settings

# Chapter 1, question 1 of the demo bank: the key is c ("quadruplica").
Q11 = (1, 1)


@pytest.fixture
async def quiz(bank_settings: Settings, clock) -> QuizService:
    stores = open_stores(bank_settings)
    await seed_demo_questions(stores.quiz)  # a no-op on SQLite's copy
    return QuizService(
        stores.quiz,
        stores.attempts,
        await chapter_titles(),
        reviews=build_review_store(bank_settings),
        clock=clock,
    )


async def answer(quiz: QuizService, user: str, key: tuple[int, int], right: bool) -> None:
    """Answer question `key` right or wrong."""
    question = await quiz.question(*key)
    letter = question["corretta"] if right else next(x for x in "abcd" if x != question["corretta"])
    graded = await quiz.grade(user, *key, letter, turn_id=None)
    assert graded.result.corretta is right


async def test_grading_against_the_key_stores_each_attempt(quiz: QuizService):
    graded = await quiz.grade("alice", *Q11, "la C", turn_id="turn-7")
    assert graded.result.model_dump() == {
        "capitolo": 1,
        "numero": 1,
        "risposta": "c",
        "corretta": True,
        "risposta_corretta": "c",
        "spiegazione": graded.question["spiegazione"],
        "riferimento": graded.question["riferimento"],
    }
    wrong = await quiz.grade("alice", *Q11, "raddoppia", turn_id=None)
    assert (wrong.result.risposta, wrong.result.corretta) == ("a", False)
    attempts = await quiz.attempts.recent_attempts("alice", 5)
    assert [(a.risposta, a.corretta, a.turn_id) for a in attempts] == [
        ("a", False, None),
        ("c", True, "turn-7"),
    ]


async def test_an_answer_that_names_no_option_is_refused_and_not_stored(quiz: QuizService):
    with pytest.raises(InvalidAnswer, match="la lettera 'e' non è un'opzione; valide: a, b, c, d"):
        await quiz.grade("alice", *Q11, "e", turn_id=None)
    with pytest.raises(InvalidAnswer, match="non riconosciuta") as refused:
        await quiz.grade("alice", *Q11, "boh " * 100, turn_id=None)
    assert len(str(refused.value)) < 200  # a long answer is not echoed back
    with pytest.raises(QuestionNotFound, match="Domanda 99 del capitolo 1 non trovata"):
        await quiz.grade("alice", 1, 99, "a", turn_id=None)
    assert await quiz.attempts.recent_attempts("alice", 5) == []


async def test_progress_counts_per_chapter_and_lists_weak_chapters_weakest_first(
    quiz: QuizService,
):
    empty = await quiz.progress("alice")
    assert [c.capitolo for c in empty.capitoli] == list(range(1, 11))  # never answered: zero
    assert {(c.risposte, c.corrette, c.viste, c.padroneggiate) for c in empty.capitoli} == {
        (0, 0, 0, 0)
    }
    assert (empty.risposte, empty.corrette, empty.deboli, empty.quota_corrette) == (0, 0, [], None)
    assert empty.prontezza == 0.25 and empty.domande == 373  # guessing one of four
    # Chapter 1: 1 of 3 right (weak). Chapter 5: 0 of 4 right (weaker). Chapter 3: 0 of 1
    # right, too few answers to count. Chapter 2: 2 of 3 right (not weak).
    for key, right in [(Q11, True), (Q11, False), (Q11, False)]:
        await answer(quiz, "alice", key, right)
    for n in (1, 2, 3, 4):
        await answer(quiz, "alice", (5, n), False)
    await answer(quiz, "alice", (3, 1), False)
    for n, right in ((1, True), (2, True), (3, False)):
        await answer(quiz, "alice", (2, n), right)
    await answer(quiz, "bob", Q11, True)

    progress = await quiz.progress("alice")
    answered = {c.capitolo: c for c in progress.capitoli if c.risposte}
    assert [(c.capitolo, c.titolo, c.risposte, c.corrette) for c in answered.values()] == [
        (1, "Principi di aerodinamica", 3, 1),
        (2, "Struttura e comandi dell'aeromobile", 3, 2),
        (3, "Strumenti di volo", 1, 0),
        (5, "Meteorologia", 4, 0),
    ]
    assert len(progress.capitoli) == 10
    assert (progress.risposte, progress.corrette) == (11, 3)
    assert progress.deboli == [5, 1]
    assert WEAK_MIN_ANSWERS == 2 and WEAK_BELOW == 0.6  # the rule the docs give
    assert (await quiz.progress("bob")).deboli == []


async def test_progress_counts_distinct_questions_seen_and_mastered_and_the_last_week(
    scheduled_quiz: QuizService, wall
):
    quiz = scheduled_quiz
    # Chapter 1, question 1 three times in a row: three attempts, one question seen; the
    # repeats within the window move nothing, so it is mastered from the first answer.
    for right in (True, False, False):
        await answer(quiz, "alice", Q11, right)
    wall.advance(days=1)
    await answer(quiz, "alice", (1, 2), False)
    await answer(quiz, "alice", (1, 3), True)
    await answer(quiz, "alice", (1, 3), True)  # a repeat: 3 attempts right of 6
    week = (await quiz.progress("alice")).ultimi_7_giorni
    assert [(d.risposte, d.corrette) for d in week][-3:] == [(0, 0), (3, 1), (3, 2)]
    wall.advance(days=8)  # a week later: these attempts left the last 7 days
    await answer(quiz, "alice", (4, 1), True)
    await answer(quiz, "alice", (4, 2), False)

    progress = await quiz.progress("alice")
    first, fourth = progress.capitoli[0], progress.capitoli[3]
    assert (first.risposte, first.corrette, first.viste, first.padroneggiate) == (6, 3, 3, 2)
    assert first.quota_corrette == 0.5 and first.domande > 30
    assert (fourth.risposte, fourth.viste, fourth.padroneggiate) == (2, 2, 1)
    assert (progress.viste, progress.padroneggiate, progress.quota_corrette) == (5, 3, 0.5)
    # Readiness: a question just answered wrong counts 0, one answered right near 1, one
    # never answered 0.25; the total is the mean of the chapters (an exam takes each alike).
    untouched = progress.capitoli[1].prontezza
    assert untouched == 0.25
    assert 0.25 < fourth.prontezza < 0.3
    right_now = (1 + 0 + 0.25 * (fourth.domande - 2)) / fourth.domande
    assert fourth.prontezza == pytest.approx(right_now, abs=0.002)
    assert progress.prontezza == round(sum(c.prontezza for c in progress.capitoli) / 10, 3)

    week = progress.ultimi_7_giorni
    assert [d.giorno for d in week][-1] == wall.now.date().isoformat() and len(week) == 7
    assert [(d.risposte, d.corrette) for d in week] == [(0, 0)] * 6 + [(2, 1)]
    assert week[-1].quota_corrette == 0.5 and week[0].quota_corrette is None
    assert [(d.risposte, d.corrette) for d in fourth.ultimi_7_giorni][-1] == (2, 1)
    assert sum(d.risposte for d in first.ultimi_7_giorni) == 0  # older than a week
    assert (await quiz.progress("bob")).viste == 0


async def test_missed_questions_are_those_whose_latest_answer_was_wrong(quiz: QuizService):
    await answer(quiz, "alice", Q11, False)
    await answer(quiz, "alice", (2, 1), False)
    await answer(quiz, "alice", (4, 2), False)
    await answer(quiz, "alice", (2, 1), True)  # answered right since
    assert await quiz.missed("alice") == [(4, 2), Q11]  # newest first
    assert await quiz.missed("alice", capitolo=1) == [Q11]
    assert await quiz.missed("bob") == []


async def test_chapters_questions_and_search_never_carry_the_key(quiz: QuizService):
    chapters = await quiz.chapters()
    assert [c.capitolo for c in chapters] == list(range(1, 11))
    assert sum(c.domande for c in chapters) == 373 and chapters[4].titolo == "Meteorologia"
    found = await quiz.find(testo="velocita", limit=50)
    assert len(found) >= 7  # "velocita" finds what "velocità" finds
    assert found == await quiz.find(testo="VELOCITÀ", limit=50)
    assert [q["numero"] for q in await quiz.find(capitolo=3, limit=5)] == [1, 2, 3, 4, 5]
    assert set(public(found[0])) == {
        "capitolo",
        "numero",
        "argomento",
        "difficolta",
        "testo",
        "risposte",
    }


def test_the_progress_section_is_short_and_names_the_weak_chapters():
    from aircoach.quiz.models import Progress

    assert progress_section(Progress(capitoli=[], risposte=0, corrette=0, deboli=[])) == ""
    section = progress_section(
        Progress(
            capitoli=[
                ChapterProgress(
                    capitolo=1,
                    titolo="Principi di aerodinamica",
                    risposte=4,
                    corrette=3,
                    prontezza=0.412,
                ),
                ChapterProgress(capitolo=2, titolo="Struttura", risposte=0, corrette=0),
                ChapterProgress(
                    capitolo=5, titolo="Meteorologia", risposte=4, corrette=1, prontezza=0.2
                ),
            ],
            risposte=8,
            corrette=4,
            deboli=[5],
            domande=373,
            viste=6,
            padroneggiate=3,
            prontezza=0.271,
            ultimi_7_giorni=[
                DayProgress(giorno="2026-03-01", risposte=2, corrette=0),
                DayProgress(giorno="2026-03-02", risposte=0, corrette=0),
                DayProgress(giorno="2026-03-03", risposte=6, corrette=4),
            ],
        )
    )
    assert section.splitlines() == [
        "# Progressi dell'allievo",
        "- risposte ai quiz: 8, corrette: 4 (50%)",
        "- domande viste: 6 su 373, padroneggiate: 3; prontezza stimata per l'esame: 27%",
        "- capitoli deboli, dal più debole: 5 (Meteorologia). Proponi di ripassarli "
        '(`domanda_teoria` con `modo` = "ripasso").',
        "- ultimi 7 giorni: 8 risposte in 2 giorni, 50% corrette",
        "- capitolo 1 (Principi di aerodinamica): 3 corrette su 4, prontezza 41%",
        "- capitolo 5 (Meteorologia): 1 corrette su 4, prontezza 20%",
    ]


async def test_the_prompt_remembers_progress_briefly_and_forgets_it_on_grading(
    quiz: QuizService, clock
):
    from aircoach.quiz.service import PROMPT_PROGRESS_TTL_S

    reads: Counter[str] = Counter()

    def counted(name, read):
        async def wrapper(user_id):
            reads[name] += 1
            return await read(user_id)

        return wrapper

    async def answers() -> int:
        progress = await quiz.prompt_progress("alice")
        return progress.risposte if progress else 0

    quiz.attempts.chapter_stats = counted("stats", quiz.attempts.chapter_stats)
    quiz.reviews.records = counted("reviews", quiz.reviews.records)
    assert await quiz.prompt_progress("alice") is None  # never answered: one read, not four
    assert await answers() == 0 and reads["stats"] == 1 and reads["reviews"] == 0
    await answer(quiz, "alice", Q11, True)  # graded here: forgotten at once
    assert await answers() == 1 and reads["stats"] == 2 and reads["reviews"] == 1
    await quiz.attempts.add_attempt(  # graded by another instance: seen after the TTL
        (await quiz.attempts.recent_attempts("alice", 1))[0].model_copy(update={"numero": 2})
    )
    assert await answers() == 1
    clock.advance(PROMPT_PROGRESS_TTL_S + 1)
    assert await answers() == 2 and reads["stats"] == 3
    assert (await quiz.progress("alice")).risposte == 2  # the API always reads the store


async def test_the_progress_sent_after_a_grading_is_the_next_prompts_without_a_read(
    quiz: QuizService,
):
    await answer(quiz, "alice", Q11, True)
    data = await quiz.with_progress("alice", {"corretta": True})
    reads: Counter[str] = Counter()
    read = quiz.attempts.chapter_stats

    async def counted(user_id):
        reads["stats"] += 1
        return await read(user_id)

    quiz.attempts.chapter_stats = counted
    progress = await quiz.prompt_progress("alice")
    assert progress is not None and progress.model_dump() == data["progresso"]
    assert reads["stats"] == 0

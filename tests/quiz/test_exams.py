"""The exam service on both stores: time limits and the spread of questions."""

from __future__ import annotations

import pytest

from aircoach.errors import StoreUnavailable
from aircoach.quiz.exam_models import ExamAnswer, ExamResult
from aircoach.quiz.exam_tools import result_text
from aircoach.quiz.exams import (
    LATE_GRACE_S,
    UNFINISHED_SUBMISSION_S,
    ExamAlreadySubmitted,
    ExamService,
    spread,
)
from aircoach.quiz.service import ExamAttempt
from aircoach.services import build_exam_store


async def test_a_late_submission_is_graded_and_marked_late(scheduled_quiz, wall, store_settings):
    exams = ExamService(scheduled_quiz, build_exam_store(store_settings))
    exam, questions = await exams.create("alice", domande=5)
    assert [q["capitolo"] for q in questions] == [1, 2, 3, 4, 5]
    wall.advance(seconds=exam.durata_s - 1)
    on_time = await exams.submit("alice", exam.id, [], turn_id=None)
    assert (on_time.in_ritardo, on_time.punteggio, on_time.totale) == (False, 0, 5)

    late_exam, questions = await exams.create("alice", domande=5)
    wall.advance(seconds=late_exam.durata_s + LATE_GRACE_S + 1)
    first = questions[0]
    answer = ExamAnswer(
        capitolo=first["capitolo"], numero=first["numero"], risposta=first["corretta"]
    )
    late = await exams.submit("alice", late_exam.id, [answer], turn_id=None)
    assert (late.in_ritardo, late.punteggio, late.superato) == (True, 1, False)
    # No question repeats across the two exams while the chapters have others.
    assert not {tuple(k) for k in exam.domande} & {tuple(k) for k in late_exam.domande}


async def test_an_exam_handed_in_after_its_time_is_not_passed_however_right(
    scheduled_quiz, wall, store_settings
):
    """As at the real exam, the time limit counts: a submission past `scadenza` (beyond a
    grace for a phone that submits at the deadline on a slow network) is graded, each
    answer counted in the progress, but the exam is not passed, and the chat says why."""
    exams = ExamService(scheduled_quiz, build_exam_store(store_settings))

    def all_right(questions):
        return [
            ExamAnswer(capitolo=q["capitolo"], numero=q["numero"], risposta=q["corretta"])
            for q in questions
        ]

    exam, questions = await exams.create("alice", domande=5)
    wall.advance(seconds=exam.durata_s + LATE_GRACE_S)  # sent at the deadline, arrived late
    in_grace = await exams.submit("alice", exam.id, all_right(questions), turn_id=None)
    assert (in_grace.punteggio, in_grace.in_ritardo, in_grace.superato) == (5, False, True)

    late_exam, questions = await exams.create("alice", domande=5)
    wall.advance(seconds=late_exam.durata_s + LATE_GRACE_S + 1)
    late = await exams.submit("alice", late_exam.id, all_right(questions), turn_id=None)
    assert (late.punteggio, late.totale, late.in_ritardo, late.superato) == (5, 5, True, False)
    assert (await scheduled_quiz.progress("alice")).corrette == 10
    text = result_text(late, {})
    assert "non superata" in text and "fuori tempo" in text


class _FinishFailsOnce:
    """The exam store, whose first result write fails (a store outage mid-grading)."""

    def __init__(self, store):
        self.store = store
        self.failed = False

    def __getattr__(self, name):
        return getattr(self.store, name)

    async def finish(self, user_id, exam_id, esito):
        if not self.failed:
            self.failed = True
            raise StoreUnavailable("store_unavailable")
        await self.store.finish(user_id, exam_id, esito)


async def test_a_submission_that_failed_half_way_can_be_submitted_again(
    scheduled_quiz, wall, store_settings
):
    store = _FinishFailsOnce(build_exam_store(store_settings))
    exams = ExamService(scheduled_quiz, store)
    exam, questions = await exams.create("alice", domande=5)
    first = questions[0]
    answer = ExamAnswer(
        capitolo=first["capitolo"], numero=first["numero"], risposta=first["corretta"]
    )
    with pytest.raises(StoreUnavailable):
        await exams.submit("alice", exam.id, [answer], turn_id=None)
    # Right after, it may still be being graded: a second submission is refused, saying when
    # to try again.
    wall.advance(seconds=10)
    with pytest.raises(ExamAlreadySubmitted) as refused:
        await exams.submit("alice", exam.id, [answer], turn_id=None)
    assert refused.value.retry_after_s == UNFINISHED_SUBMISSION_S - 10
    # Later, with no result stored, the student's submission is graded again, once.
    wall.advance(seconds=UNFINISHED_SUBMISSION_S - 10)
    graded = await exams.submit("alice", exam.id, [answer], turn_id=None)
    assert (graded.punteggio, graded.totale) == (1, 5)
    assert (await store.get("alice", exam.id)).esito == graded.model_dump()
    wall.advance(seconds=UNFINISHED_SUBMISSION_S + 1)
    with pytest.raises(ExamAlreadySubmitted) as graded_already:
        await exams.submit("alice", exam.id, [answer], turn_id=None)
    assert graded_already.value.retry_after_s is None  # graded: nothing to wait for


async def test_a_resubmission_after_a_failure_half_way_counts_each_answer_once(
    scheduled_quiz, wall, store_settings
):
    store = _FinishFailsOnce(build_exam_store(store_settings))
    exams = ExamService(scheduled_quiz, store)
    exam, questions = await exams.create("alice", domande=5)
    answers = [
        ExamAnswer(capitolo=q["capitolo"], numero=q["numero"], risposta=q["corretta"])
        for q in questions[:3]
    ]
    with pytest.raises(StoreUnavailable):  # the three answers were graded, the result not
        await exams.submit("alice", exam.id, answers, turn_id=None)
    # Later than the repeat window too: the schedules must not take a second step either.
    wall.advance(minutes=10)
    # The student changed their mind on the first answer: the exam's attempt is replaced.
    wrong = next(x for x in questions[0]["risposte"] if x != questions[0]["corretta"])
    answers[0] = answers[0].model_copy(update={"risposta": wrong})
    graded = await exams.submit("alice", exam.id, answers, turn_id=None)
    assert (graded.punteggio, graded.totale) == (2, 5)
    progress = await scheduled_quiz.progress("alice")
    assert (progress.risposte, progress.corrette) == (2 + 1, 2)
    records = await scheduled_quiz.reviews.records("alice")
    assert sorted(r.reviews for r in records if r.card) == [1, 1, 1]
    # Another exam's answer to the same question is an attempt of its own.
    again = ExamService(scheduled_quiz, build_exam_store(store_settings))
    other, _ = await again.create("alice", domande=5)
    await scheduled_quiz.grade(
        "alice", *(other.domande[0]), "a", turn_id=None, exam=ExamAttempt(other.id)
    )
    await scheduled_quiz.grade("alice", *(exam.domande[0]), "a", turn_id=None)
    assert (await scheduled_quiz.progress("alice")).risposte == 5


async def test_the_exam_store_pages_newest_first_exams_of_the_same_moment_by_id(
    store_settings,
):
    from aircoach.quiz.exam_models import ExamRecord

    store = build_exam_store(store_settings)
    moments = [
        ("0a", "2026-03-01T09:00:00.000000+00:00"),
        ("0b", "2026-03-01T09:00:00.000000+00:00"),
        ("0c", "2026-03-01T10:00:00.000000+00:00"),
    ]
    for exam_id, creato in moments:
        await store.create(
            ExamRecord(
                id=exam_id,
                userId="alice",
                creato=creato,
                scadenza=creato,
                durata_s=1,
                soglia=0.75,
                domande=[],
            )
        )
    listed, before = [], None
    while page := await store.list_for("alice", 1, before=before):
        listed.append(page[0].id)
        before = (page[0].creato, page[0].id)
    assert listed == ["0c", "0b", "0a"]
    assert await store.list_for("bob", 5) == []


@pytest.mark.parametrize(
    ("total", "room", "shares"),
    [
        (30, [40] * 10, [3] * 10),
        (7, [40, 40, 40], [3, 2, 2]),
        # A chapter with fewer than its share gives all it has; the others make up the rest
        # (the exam was shorter by the difference).
        (60, [20, 40], [20, 40]),
        (12, [2, 40, 40], [2, 5, 5]),
        (60, [20, 25], [20, 25]),  # all they hold: the caller decides (422 or fitted)
        (5, [0, 40], [0, 5]),
    ],
)
def test_an_exam_spreads_its_questions_evenly_as_far_as_each_chapter_holds(total, room, shares):
    assert spread(total, room) == shares


@pytest.mark.parametrize(
    ("right", "wording"),
    [
        (1, "1 risposta corretta su 5"),
        (0, "0 risposte corrette su 5"),
        (2, "2 risposte corrette su 5"),
    ],
)
def test_the_exam_result_reads_right_for_one_answer(right, wording):
    result = ExamResult.model_construct(
        punteggio=right,
        totale=5,
        soglia=0.75,
        superato=False,
        in_ritardo=False,
        capitoli=[],
        esiti=[],
    )
    assert f"Esito della simulazione: {wording} (" in result_text(result, {})

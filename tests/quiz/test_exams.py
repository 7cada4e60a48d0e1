"""The exam service on both stores: time limits and the spread of questions."""

from __future__ import annotations

from aircoach.quiz.exam_models import ExamAnswer
from aircoach.quiz.exams import ExamService
from aircoach.services import build_exam_store


async def test_a_late_submission_is_graded_and_marked_late(scheduled_quiz, wall, store_settings):
    exams = ExamService(scheduled_quiz, build_exam_store(store_settings))
    exam, questions = await exams.create("alice", domande=5)
    assert [q["capitolo"] for q in questions] == [1, 2, 3, 4, 5]
    wall.advance(seconds=exam.durata_s - 1)
    on_time = await exams.submit("alice", exam.id, [], turn_id=None)
    assert (on_time.in_ritardo, on_time.punteggio, on_time.totale) == (False, 0, 5)

    late_exam, questions = await exams.create("alice", domande=5)
    wall.advance(seconds=late_exam.durata_s + 1)
    first = questions[0]
    answer = ExamAnswer(
        capitolo=first["capitolo"], numero=first["numero"], risposta=first["corretta"]
    )
    late = await exams.submit("alice", late_exam.id, [answer], turn_id=None)
    assert (late.in_ritardo, late.punteggio, late.superato) == (True, 1, False)
    # No question repeats across the two exams while the chapters have others.
    assert not {tuple(k) for k in exam.domande} & {tuple(k) for k in late_exam.domande}

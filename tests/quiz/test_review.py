"""Spaced review (FSRS) and drawing without repeats, on both stores."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from aircoach.quiz.review import iso
from aircoach.quiz.service import QuizService


@pytest.fixture
def quiz(scheduled_quiz: QuizService) -> QuizService:
    return scheduled_quiz


async def answer(quiz: QuizService, user: str, key: tuple[int, int], right: bool) -> None:
    question = await quiz.question(*key)
    letter = question["corretta"] if right else next(x for x in "abcd" if x != question["corretta"])
    assert (await quiz.grade(user, *key, letter, turn_id=None)).result.corretta is right


def keys(items) -> list[tuple[int, int]]:
    return [(q.capitolo, q.numero) for q in items]


async def test_a_wrong_answer_is_due_at_once_a_right_one_when_fsrs_says(quiz: QuizService, wall):
    await answer(quiz, "alice", (2, 3), right=False)
    await answer(quiz, "alice", (4, 1), right=True)
    wall.advance(seconds=1)
    items = await quiz.review_items("alice", 5)
    assert keys(items)[0] == (2, 3) and (4, 1) not in keys(items)
    assert items[0].scadenza == iso(wall.now - timedelta(seconds=1))
    assert "corretta" not in items[0].model_dump() and "spiegazione" not in items[0].model_dump()
    right = await quiz.reviews.get("alice", (4, 1))
    assert right is not None and right.due is not None and right.card is not None
    fsrs_due = datetime.fromisoformat(right.due)
    assert fsrs_due > wall.now  # FSRS's first learning step
    wall.now = fsrs_due
    assert (4, 1) in keys(await quiz.review_items("alice", 5))
    # Another user's schedule is theirs.
    assert all(i.scadenza is None for i in await quiz.review_items("bob", 50))


async def test_most_overdue_first_then_new_questions_from_the_weakest_chapter(
    quiz: QuizService, wall
):
    await answer(quiz, "alice", (5, 1), right=False)
    wall.advance(minutes=1)
    await answer(quiz, "alice", (3, 2), right=False)
    for n in (2, 3):  # chapter 5: 0 of 3 right, the weakest
        await answer(quiz, "alice", (5, n), right=False)
    wall.advance(hours=1)
    items = await quiz.review_items("alice", 6)
    assert keys(items)[:4] == [(5, 1), (3, 2), (5, 2), (5, 3)]
    assert [i.scadenza is None for i in items] == [False] * 4 + [True] * 2
    assert all(i.capitolo == 5 for i in items[4:])  # never answered, of the weakest chapter
    assert not {(5, 1), (5, 2), (5, 3)} & set(keys(items[4:]))
    in_three = await quiz.review_items("alice", 3, capitolo=3)
    assert keys(in_three)[0] == (3, 2) and all(i.capitolo == 3 for i in in_three)


async def test_a_repeat_within_the_window_does_not_move_the_schedule(quiz: QuizService, wall):
    await answer(quiz, "alice", (1, 1), right=False)
    first = await quiz.reviews.get("alice", (1, 1))
    wall.advance(minutes=2)
    await answer(quiz, "alice", (1, 1), right=True)  # asked again moments later
    repeat = await quiz.reviews.get("alice", (1, 1))
    assert repeat is not None  # the card is as it was; only when it is due again moved
    assert repeat.model_dump(exclude={"due"}) == first.model_dump(exclude={"due"})
    assert (await quiz.progress("alice")).risposte == 2  # still two attempts
    wall.advance(minutes=4)  # past the window: this one counts
    await answer(quiz, "alice", (1, 1), right=True)
    moved = await quiz.reviews.get("alice", (1, 1))
    assert moved is not None and moved.reviews == 2 and moved.last_right is True
    assert moved.due is not None and moved.due > iso(wall.now)


async def test_a_question_answered_wrong_then_right_is_not_asked_again_at_once(
    quiz: QuizService, wall
):
    await answer(quiz, "alice", (6, 3), right=False)
    assert keys(await quiz.review_items("alice", 3))[0] == (6, 3)  # due at once
    wall.advance(minutes=1)
    await answer(quiz, "alice", (6, 3), right=True)  # the review asked it, and it was right
    wall.advance(seconds=1)
    assert (6, 3) not in keys(await quiz.review_items("alice", 3))  # not the same one again
    (drawn,) = await quiz.draw("alice", 1, capitolo=6)
    assert (drawn["capitolo"], drawn["numero"]) != (6, 3)
    progress = await quiz.progress("alice")
    assert (progress.viste, progress.padroneggiate) == (1, 0)  # moments after the key: no
    wall.advance(minutes=4)  # the window is over: it is asked again, and this answer counts
    assert keys(await quiz.review_items("alice", 3))[0] == (6, 3)
    await answer(quiz, "alice", (6, 3), right=True)
    record = await quiz.reviews.get("alice", (6, 3))
    assert record is not None and (record.reviews, record.last_right) == (2, True)
    assert (6, 3) not in keys(await quiz.review_items("alice", 3))


async def test_drawing_asks_every_question_of_a_chapter_before_repeating_one(
    quiz: QuizService, wall
):
    total = len(await quiz.questions.list_questions(capitolo=3, limit=500))
    drawn = []
    for _ in range(total):
        (question,) = await quiz.draw("alice", 1, capitolo=3)
        drawn.append((question["capitolo"], question["numero"]))
        wall.advance(seconds=1)
    assert len(set(drawn)) == total and {c for c, _ in drawn} == {3}
    # Then the one asked longest ago, unless one is due: a wrong answer makes it due.
    (again,) = await quiz.draw("alice", 1, capitolo=3)
    assert (again["capitolo"], again["numero"]) == drawn[0]
    await answer(quiz, "alice", drawn[5], right=False)
    wall.advance(seconds=1)
    (due,) = await quiz.draw("alice", 1, capitolo=3)
    assert (due["capitolo"], due["numero"]) == drawn[5]
    # Bob starts afresh; a draw by difficulty keeps to it, without repeats either.
    hard = [await quiz.draw("bob", 1, campo="difficolta", valore="Difficile") for _ in range(5)]
    assert all(q["difficolta"] == "difficile" for (q,) in hard)
    assert len({(q["capitolo"], q["numero"]) for (q,) in hard}) == 5


async def graded_in(quiz: QuizService, turn_id: str, key: tuple[int, int], right: bool) -> None:
    question = await quiz.question(*key)
    letter = question["corretta"] if right else next(x for x in "abcd" if x != question["corretta"])
    await quiz.grade("alice", *key, letter, turn_id=turn_id)


async def test_a_turn_taken_back_leaves_the_schedule_its_other_answers_give(
    quiz: QuizService, wall
):
    """A regenerated turn's gradings are taken back: its attempts go, and the schedule is
    the one the question's other attempts gave (the FSRS card a pure function of them), also
    for answers within the repeat window and `not_yet`'s move of a right one."""
    await graded_in(quiz, "turn-1", (1, 1), right=False)
    wall.advance(minutes=1)
    await graded_in(quiz, "turn-2", (1, 1), right=True)  # within the window: `not_yet`
    wall.advance(days=2)
    await graded_in(quiz, "turn-3", (2, 3), right=True)
    before = await quiz.reviews.get("alice", (1, 1))
    wall.advance(days=3)
    await graded_in(quiz, "turn-4", (1, 1), right=True)
    await graded_in(quiz, "turn-4", (2, 3), right=False)
    moved = await quiz.reviews.get("alice", (1, 1))
    assert moved is not None and before is not None and moved != before

    assert sorted(await quiz.take_back("alice", "turn-4")) == [(1, 1), (2, 3)]
    assert await quiz.reviews.get("alice", (1, 1)) == before
    second = await quiz.reviews.get("alice", (2, 3))
    assert second is not None and (second.reviews, second.last_right) == (1, True)
    assert (await quiz.progress("alice")).risposte == 3
    assert await quiz.take_back("alice", "turn-4") == []


async def test_a_turn_taken_back_that_gave_the_only_answer_leaves_no_schedule(
    quiz: QuizService, wall
):
    """Its question is as never answered (drawn as asked, not due, not seen); another
    user's answers and an exam's stay."""
    await quiz.draw("alice", 1, campo="numero", valore=7, capitolo=3)
    await graded_in(quiz, "turn-1", (3, 7), right=False)
    await quiz.grade("bob", 3, 7, "a", turn_id="turn-1")
    await graded_in(quiz, "turn-1", (4, 2), right=True)
    exam = await quiz.reviews.get("alice", (4, 2))
    await quiz.attempts.add_attempt(
        (await quiz.attempts.recent_attempts("alice", 1))[0].model_copy(
            update={"exam_id": "e1", "capitolo": 4, "numero": 2}
        )
    )
    assert sorted(await quiz.take_back("alice", "turn-1")) == [(3, 7), (4, 2)]
    record = await quiz.reviews.get("alice", (3, 7))
    assert record is not None and record.asked_at is not None
    assert (record.card, record.due, record.reviewed_at, record.reviews) == (None, None, None, 0)
    assert (await quiz.progress("alice")).viste == 1  # the exam's answer to (4, 2)
    assert await quiz.reviews.get("alice", (4, 2)) == exam
    assert (await quiz.progress("bob")).risposte == 1

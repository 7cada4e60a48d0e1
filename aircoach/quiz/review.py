"""Spaced review: each user's schedule of each question, by the FSRS algorithm (the `fsrs`
package, not a scheduler of our own).

A graded answer reviews the question's card: right is `Rating.Good`, wrong is
`Rating.Again`. A wrong answer makes the question due at once (FSRS would wait for its first
learning step, a minute); a right one leaves it due when FSRS says. An answer within
`QUIZ_REPEAT_WINDOW_S` of the last one that counted (the same question asked again in a
session) does not move the schedule, except that a right one to a question due waits for
the window's end to be due again. Pure functions: the quiz service stores the records.

So a record's schedule is a function of the question's attempts, oldest first (`replayed`):
an attempt taken back (its turn regenerated) leaves the schedule the others give.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from fsrs import Card, Rating, Scheduler

from aircoach.quiz.models import Attempt, ReviewRecord
from aircoach.quiz.ports import QuestionKey

# Without fuzzing, the same answers give the same dates (tests, and two instances agree).
_SCHEDULER = Scheduler(enable_fuzzing=False)
# A question never answered, in the readiness estimate: the chance of guessing one of four.
UNSEEN_RECALL = 0.25


def iso(moment: datetime) -> str:
    """One text form for every stored time, so that they sort as text."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def card_id(key: QuestionKey) -> int:
    """A stable id per question (`Card()` without one sleeps a millisecond to make one)."""
    return key[0] * 100_000 + key[1]


def counts(record: ReviewRecord | None, now: datetime, window_s: float) -> bool:
    """Whether an answer at `now` moves the schedule: not within `window_s` of the last
    answer that did."""
    if record is None or record.reviewed_at is None:
        return True
    return now - datetime.fromisoformat(record.reviewed_at) >= timedelta(seconds=window_s)


def not_yet(record: ReviewRecord, now: datetime, window_s: float) -> ReviewRecord | None:
    """The record after a right answer at `now` that does not count (within `window_s` of
    the last one that did) to a question due (answered wrong moments ago): due again when an
    answer counts, so the review does not ask it again at once, its card as it was (right
    moments after seeing the key is not recall). None when it is not due."""
    if record.due is None or record.reviewed_at is None or record.due > iso(now):
        return None
    again = datetime.fromisoformat(record.reviewed_at) + timedelta(seconds=window_s)
    return record.model_copy(update={"due": iso(again)})


def review(
    record: ReviewRecord | None, user_id: str, key: QuestionKey, *, right: bool, now: datetime
) -> ReviewRecord:
    """The record after an answer at `now` (`asked_at` kept)."""
    if record is not None and record.card is not None:
        card = Card.from_dict(record.card)  # type: ignore[arg-type]
    else:
        card = Card(card_id=card_id(key), due=now)
    card, _ = _SCHEDULER.review_card(card, Rating.Good if right else Rating.Again, now)
    due = card.due if right else now
    base = record or ReviewRecord(userId=user_id, capitolo=key[0], numero=key[1])
    return base.model_copy(
        update={
            "card": dict(card.to_dict()),
            "due": iso(due),
            "reviewed_at": iso(now),
            "reviews": base.reviews + 1,
            "last_right": right,
        }
    )


def answered(
    record: ReviewRecord | None,
    user_id: str,
    key: QuestionKey,
    *,
    right: bool,
    now: datetime,
    window_s: float,
) -> ReviewRecord | None:
    """The record after an answer at `now` (`review`, or `not_yet` within `window_s` of the
    last answer that counted); None when the answer leaves it as it is."""
    if counts(record, now, window_s):
        return review(record, user_id, key, right=right, now=now)
    if right and record is not None:
        return not_yet(record, now, window_s)
    return None


def replayed(record: ReviewRecord, attempts: Iterable[Attempt], window_s: float) -> ReviewRecord:
    """`record`'s schedule as `attempts` (its question's, oldest first) give it from none
    (`asked_at` kept): what answering them one by one would have stored."""
    replay = record.model_copy(
        update={"card": None, "due": None, "reviewed_at": None, "reviews": 0, "last_right": None}
    )
    for attempt in attempts:
        now = datetime.fromisoformat(attempt.timestamp)
        moved = answered(
            replay, record.userId, record.key, right=attempt.corretta, now=now, window_s=window_s
        )
        replay = moved or replay
    return replay


def recall(record: ReviewRecord | None, now: datetime) -> float:
    """The chance the student answers this question right at `now` (FSRS retrievability;
    `UNSEEN_RECALL` for a question never answered, 0 right after a wrong answer)."""
    if record is None or record.card is None:
        return UNSEEN_RECALL
    if record.last_right is False:
        return 0.0
    card = Card.from_dict(record.card)  # type: ignore[arg-type]
    return float(_SCHEDULER.get_card_retrievability(card, now))


def mastered(record: ReviewRecord) -> bool:
    """Answered right the last time it counted."""
    return record.last_right is True

"""Mock exams: a timed set of questions spread over the chapters, graded at the end against a
pass mark (defaults: `EXAM_QUESTIONS`, `EXAM_DURATION_S`, `EXAM_PASS_MARK`); one handed in
after its time is graded but not passed.

Each answered question is graded by `QuizService.grade`, so it is an attempt in the progress
and moves its review schedule like any other answer. An unanswered question counts as wrong.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aircoach.quiz import review
from aircoach.quiz.answers import dont_know, read_answer
from aircoach.quiz.exam_models import (
    ChapterScore,
    ExamAnswer,
    ExamOutcome,
    ExamRecord,
    ExamResult,
    ExamSummary,
    ExamView,
)
from aircoach.quiz.models import PublicQuestion
from aircoach.quiz.ports import ExamStore, Question, QuestionKey
from aircoach.quiz.service import ExamAttempt, QuizService, public

MAX_LISTED = 100
# A submission with no result after this long stopped half-way (its grading failed): the
# student may submit again. Grading takes milliseconds; the store's own timeout is seconds.
UNFINISHED_SUBMISSION_S = 60
# As at the real exam, the time limit counts: a submission this long after `scadenza` is late
# and not passed (its answers are still graded). The grace is for a phone that submits at the
# deadline on a slow network.
LATE_GRACE_S = 60


class ExamNotFound(LookupError):
    """No exam of this id for this user (another user's exam is not theirs to see)."""


class ExamAlreadySubmitted(RuntimeError):
    """The exam was submitted already: graded, or (`retry_after_s` set) being graded, or its
    grading stopped half-way less than `UNFINISHED_SUBMISSION_S` ago (a submission then is
    graded again)."""

    def __init__(self, exam_id: str, *, retry_after_s: int | None = None):
        super().__init__(exam_id)
        self.retry_after_s = retry_after_s


class InvalidExamAnswers(ValueError):
    """Answers that are not to the exam's questions, or not an option: `problems` lists
    (index in `risposte`, field, message); nothing was graded."""

    def __init__(self, problems: list[tuple[int, str, str]]):
        super().__init__("; ".join(message for _, _, message in problems))
        self.problems = problems


class ExamTooLarge(ValueError):
    """More questions asked than the chosen chapters hold together (`available`); nothing
    was drawn."""

    def __init__(self, asked: int, available: int):
        super().__init__(
            f"i capitoli scelti hanno {available} domande in tutto: chiedine al massimo "
            f"{available}, o scegli altri capitoli"
        )
        self.asked = asked
        self.available = available


@dataclass(frozen=True)
class ExamPlan:
    """How many questions of each chapter an exam draws; `asked`: how many were asked (more
    than `size` when the chapters hold fewer and the plan was fitted to them)."""

    shares: tuple[tuple[int, int], ...]
    asked: int

    @property
    def size(self) -> int:
        return sum(n for _, n in self.shares)


MIN_EXAM_S = 5 * 60  # a small exam's time at least (unless the default exam's is shorter)


def exam_time_s(questions: int, default_s: int, default_questions: int) -> int:
    """An exam's time: the default exam's time per question (`EXAM_DURATION_S` for
    `EXAM_QUESTIONS`), rounded up to the minute, at least `MIN_EXAM_S` or the default's time
    when that is shorter: 45 minutes for 30 questions, 8 for 5, 90 for 60."""
    seconds = -(-default_s * questions // default_questions)  # rounded up
    return max(min(MIN_EXAM_S, default_s), -(-seconds // 60) * 60)


def spread(total: int, room: list[int]) -> list[int]:
    """`total` spread evenly over parts holding `room` each (the first parts take the odd
    ones); a part with less room than its share gives what it holds and the others make up
    the rest, as far as they can."""
    shares = [0] * len(room)
    while total and any(s < r for s, r in zip(shares, room, strict=True)):
        for i, r in enumerate(room):
            if total and shares[i] < r:
                shares[i] += 1
                total -= 1
    return shares


class ExamService:
    def __init__(self, quiz: QuizService, exams: ExamStore):
        self.quiz = quiz
        self.exams = exams

    async def plan(
        self,
        *,
        capitoli: list[int] | None = None,
        domande: int | None = None,
        fit: bool = False,
    ) -> ExamPlan:
        """`domande` (default `EXAM_QUESTIONS`) spread evenly over `capitoli` (default all);
        `ExamTooLarge` when the chapters hold fewer, unless `fit`: then all they hold."""
        chapters = list(dict.fromkeys(capitoli or sorted(self.quiz.titles)))
        asked = domande or self.quiz.settings.exam_questions
        counts = await self.quiz.questions.chapter_counts()
        room = [counts.get(chapter, 0) for chapter in chapters]
        if asked > sum(room) and not fit:
            raise ExamTooLarge(asked, sum(room))
        return ExamPlan(tuple(zip(chapters, spread(asked, room), strict=True)), asked)

    async def create(
        self,
        user_id: str,
        *,
        capitoli: list[int] | None = None,
        domande: int | None = None,
        plan: ExamPlan | None = None,
    ) -> tuple[ExamRecord, list[Question]]:
        """An exam drawn by `plan`, else by `self.plan(capitoli=..., domande=...)` (which
        may raise `ExamTooLarge`, before anything is drawn)."""
        settings = self.quiz.settings
        if plan is None:
            plan = await self.plan(capitoli=capitoli, domande=domande)
        questions: list[Question] = []
        for chapter, size in plan.shares:
            if size:
                questions += await self.quiz.draw(user_id, size, capitolo=chapter)
        now = self.quiz.now()
        seconds = exam_time_s(len(questions), settings.exam_duration_s, settings.exam_questions)
        exam = ExamRecord(
            id=uuid.uuid4().hex,
            userId=user_id,
            creato=review.iso(now),
            scadenza=review.iso(now + timedelta(seconds=seconds)),
            durata_s=seconds,
            soglia=settings.exam_pass_mark,
            domande=[(int(q["capitolo"]), int(q["numero"])) for q in questions],
        )
        await self.exams.create(exam)
        return exam, questions

    async def _own(self, user_id: str, exam_id: str) -> ExamRecord:
        exam = await self.exams.get(user_id, exam_id)
        if exam is None:
            raise ExamNotFound(exam_id)
        return exam

    async def view(self, user_id: str, exam_id: str) -> ExamView:
        exam = await self._own(user_id, exam_id)
        questions = await self.quiz.questions.by_keys(exam.domande)
        return ExamView(
            id=exam.id,
            domande=[PublicQuestion.of(q) for q in questions],
            durata_s=exam.durata_s,
            scadenza=exam.scadenza,
            soglia=exam.soglia,
            esito=ExamResult.model_validate(exam.esito) if exam.esito else None,
        )

    async def listing(
        self, user_id: str, limit: int = MAX_LISTED, *, before: tuple[str, str] | None = None
    ) -> list[ExamSummary]:
        """The user's exams, newest first; only those after `before` (`(creato, id)` of the
        last exam of the page before) when given."""
        return [summary(e) for e in await self.exams.list_for(user_id, limit, before=before)]

    async def submit(
        self, user_id: str, exam_id: str, answers: list[ExamAnswer], *, turn_id: str | None
    ) -> ExamResult:
        """Grade the exam once: `InvalidExamAnswers` (nothing graded) for an answer to a
        question not in it, or answered already earlier in `answers`, or that names no
        option and is no "non lo so" (graded wrong, as the quiz grades it);
        `ExamAlreadySubmitted` the second time."""
        exam = await self._own(user_id, exam_id)
        now = self.quiz.now()
        if exam.consegnato is not None and (
            exam.esito is not None
            or exam.consegnato > review.iso(now - timedelta(seconds=UNFINISHED_SUBMISSION_S))
        ):
            # Graded, or being graded now. A submission without a result for longer than
            # that stopped half-way (the store failed while grading): it is graded again.
            raise ExamAlreadySubmitted(exam_id, retry_after_s=_grading_for(exam, now))
        questions = {
            (int(q["capitolo"]), int(q["numero"])): q
            for q in await self.quiz.questions.by_keys(exam.domande)
        }
        given: dict[QuestionKey, str] = {}
        problems: list[tuple[int, str, str]] = []
        for i, answer in enumerate(answers):
            key = (answer.capitolo, answer.numero)
            question = questions.get(key)
            if question is None:
                problems.append(
                    (i, "numero", f"la domanda {key[1]} del capitolo {key[0]} non è nell'esame")
                )
                continue
            if key in given:
                problems.append(
                    (i, "numero", f"la domanda {key[1]} del capitolo {key[0]} ha già una risposta")
                )
                continue
            if (refused := _refused(answer.risposta, question.get("risposte", {}))) is not None:
                problems.append(
                    (i, "risposta", f"domanda {key[1]} del capitolo {key[0]}: {refused}")
                )
                continue
            given[key] = answer.risposta
        if problems:
            raise InvalidExamAnswers(problems)
        if not await self.exams.claim(user_id, exam_id, review.iso(now), previous=exam.consegnato):
            # Another submission took it a moment ago: it is being graded.
            raise ExamAlreadySubmitted(exam_id, retry_after_s=UNFINISHED_SUBMISSION_S)
        outcomes: list[ExamOutcome] = []
        for key in exam.domande:
            question = questions.get(key)
            if question is None:  # left the bank since: not counted
                continue
            if key in given:
                graded = await self.quiz.grade(
                    user_id,
                    *key,
                    given[key],
                    turn_id=turn_id,
                    exam=ExamAttempt(exam_id, earlier_try=exam.consegnato),
                )
                outcomes.append(ExamOutcome(**graded.result.model_dump()))
            else:
                outcomes.append(
                    ExamOutcome(
                        capitolo=key[0],
                        numero=key[1],
                        risposta=None,
                        corretta=False,
                        risposta_corretta=str(question.get("corretta", "")).strip().lower(),
                        spiegazione=str(question.get("spiegazione", "")),
                        riferimento=question.get("riferimento"),
                    )
                )
        deadline = datetime.fromisoformat(exam.scadenza) + timedelta(seconds=LATE_GRACE_S)
        result = _result(exam, outcomes, self.quiz, late=now > deadline)
        await self.exams.finish(user_id, exam_id, result.model_dump())
        return result


def _refused(answer: str, options: dict[str, str]) -> str | None:
    """Why the answer cannot be graded, as `QuizService.grade` would refuse it; None when it
    can ("non lo so" can: graded wrong, as the quiz grades it)."""
    if dont_know(answer):
        return None
    letter = read_answer(answer, options)
    valid = ", ".join(sorted(options))
    if letter is None:
        return (
            f"risposta non riconosciuta: scrivi la lettera di un'opzione ({valid}), il suo "
            "testo o «non lo so»"
        )
    if letter not in options:
        return f"la lettera {letter!r} non è un'opzione; valide: {valid}"
    return None


def _result(
    exam: ExamRecord, outcomes: list[ExamOutcome], quiz: QuizService, *, late: bool
) -> ExamResult:
    per_chapter: dict[int, list[bool]] = {}
    for outcome in outcomes:
        per_chapter.setdefault(outcome.capitolo, []).append(outcome.corretta)
    score = sum(o.corretta for o in outcomes)
    total = len(outcomes)
    return ExamResult(
        id=exam.id,
        punteggio=score,
        totale=total,
        soglia=exam.soglia,
        superato=bool(total) and not late and score / total >= exam.soglia,
        in_ritardo=late,
        capitoli=[
            ChapterScore(capitolo=c, titolo=quiz.title(c), punteggio=sum(marks), totale=len(marks))
            for c, marks in sorted(per_chapter.items())
        ],
        esiti=outcomes,
    )


def exam_questions(questions: list[Question]) -> list[dict[str, Any]]:
    return [public(q) for q in questions]


def summary(exam: ExamRecord) -> ExamSummary:
    """An exam as a listing shows it."""
    return ExamSummary(
        id=exam.id,
        creato=exam.creato,
        scadenza=exam.scadenza,
        totale=len(exam.domande),
        punteggio=exam.esito["punteggio"] if exam.esito else None,
        superato=exam.esito["superato"] if exam.esito else None,
    )


def _grading_for(exam: ExamRecord, now: datetime) -> int | None:
    """For a submission with no result yet: the seconds until another may grade it (the first
    may still be grading until then); None for a graded exam."""
    if exam.esito is not None or exam.consegnato is None:
        return None
    since = now - datetime.fromisoformat(exam.consegnato)
    return max(1, UNFINISHED_SUBMISSION_S - int(since.total_seconds()))

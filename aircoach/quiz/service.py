"""The quiz service: one place for questions, search, grading and progress, behind two doors
(the chat tools in `quiz.tools` and the REST routes in `routes.quiz`).

Grading is deterministic: the answer is read as a letter or an option's text
(`quiz.answers`) and compared with the key; every graded answer is stored as an attempt.
Progress is computed from the attempts (per chapter, answers and right answers, and per day)
and from the review schedule (distinct questions seen and mastered, readiness); a chapter is
weak once it has `WEAK_MIN_ANSWERS` answers of which less than `WEAK_BELOW` were right.
"""

from __future__ import annotations

import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aircoach.errors import BackendUnavailable
from aircoach.quiz import review
from aircoach.quiz.answers import NOT_KNOWN, dont_know, read_answer
from aircoach.quiz.models import (
    AnswerResult,
    Attempt,
    Chapter,
    ChapterProgress,
    ChapterStats,
    DayProgress,
    DayStats,
    Progress,
    PublicQuestion,
    ReviewItem,
    ReviewRecord,
)
from aircoach.quiz.ports import AttemptStore, Question, QuestionKey, QuizStore, ReviewStore
from aircoach.settings import QuizSettings

log = logging.getLogger(__name__)

# Two answers: a chapter answered wrong twice shows up early in a session (one says too little).
WEAK_MIN_ANSWERS = 2
WEAK_BELOW = 0.6  # share of right answers under which a chapter is weak
MISSED_WINDOW = 200  # recent attempts looked at for questions still answered wrong
# The prompt's progress section is a hint, read on every quiz turn: an instance remembers a
# user's progress this long (dropped at once when it grades that user's answer), for at most
# this many users. GET /api/progress always reads the store.
PROMPT_PROGRESS_TTL_S = 30.0
PROMPT_PROGRESS_USERS = 1000
BANK_LIMIT = 5000  # questions a draw looks at (the bank holds a few hundred)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class QuestionNotFound(LookupError):
    def __init__(self, capitolo: int, numero: int):
        super().__init__(f"Domanda {numero} del capitolo {capitolo} non trovata.")
        self.capitolo = capitolo
        self.numero = numero


class InvalidAnswer(ValueError):
    """The answer names no option of the question (the message says which are valid)."""


@dataclass(frozen=True)
class ExamAttempt:
    """An answer graded as part of mock exam `id`; `earlier_try`: when an earlier grading of
    the same submission started (it failed half-way), None the first time."""

    id: str
    earlier_try: str | None = None


@dataclass(frozen=True)
class Graded:
    result: AnswerResult
    question: Question


def public(question: Question) -> dict[str, Any]:
    """A question as clients get it: without `corretta` and `spiegazione`."""
    return PublicQuestion.of(question).model_dump()


def option_line(question: Question, letter: str) -> str:
    return f"{letter}) {question.get('risposte', {}).get(letter, '')}".rstrip()


class QuizService:
    def __init__(
        self,
        questions: QuizStore,
        attempts: AttemptStore,
        titles: Mapping[int, str],
        *,
        reviews: ReviewStore,
        settings: QuizSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _utc_now,
    ):
        """`clock`: monotonic seconds (the prompt's progress cache); `now`: the wall clock
        (attempts, review schedules)."""
        self.questions = questions
        self.attempts = attempts
        self.reviews = reviews
        self.settings = settings or QuizSettings()
        self.titles = dict(titles)
        self._clock = clock
        self._now = now
        self._recent: OrderedDict[str, tuple[float, Progress | None]] = OrderedDict()

    def now(self) -> datetime:
        return self._now()

    def title(self, capitolo: int) -> str:
        return self.titles.get(capitolo, f"Capitolo {capitolo}")

    async def chapters(self) -> list[Chapter]:
        """Every chapter with a title or with questions, in order."""
        counts = await self.questions.chapter_counts()
        return [
            Chapter(capitolo=c, titolo=self.title(c), domande=counts.get(c, 0))
            for c in sorted(set(self.titles) | set(counts))
        ]

    async def question(self, capitolo: int, numero: int) -> Question:
        found = await self.questions.by_chapter_and_number(capitolo, numero)
        if found is None:
            raise QuestionNotFound(capitolo, numero)
        return found

    async def find(
        self, *, capitolo: int | None = None, testo: str | None = None, limit: int = 20
    ) -> list[Question]:
        """The best matches of `testo` (forgiving search), or the chapter's questions in
        order; of one chapter when given."""
        if testo:
            return await self.questions.search_text(testo, capitolo=capitolo, limit=limit)
        return await self.questions.list_questions(capitolo=capitolo, limit=limit)

    async def grade(
        self,
        user_id: str,
        capitolo: int,
        numero: int,
        risposta: str,
        *,
        turn_id: str | None,
        exam: ExamAttempt | None = None,
    ) -> Graded:
        """Grade an answer against the key and store the attempt. Raises `QuestionNotFound`,
        or `InvalidAnswer` when the answer names no option (nothing is stored then)."""
        question = await self.question(capitolo, numero)
        return await self.grade_question(user_id, question, risposta, turn_id=turn_id, exam=exam)

    async def grade_question(
        self,
        user_id: str,
        question: Question,
        risposta: str,
        *,
        turn_id: str | None,
        exam: ExamAttempt | None = None,
    ) -> Graded:
        """`grade` for a question already looked up (`question`). An answer of a mock exam
        (`exam`) is stored once per exam and question, and its schedule moved once, however
        often the exam's grading is tried again."""
        result = self.grading(question, risposta)
        await self.record(user_id, result, turn_id=turn_id, exam=exam)
        return Graded(result, question)

    async def record(
        self,
        user_id: str,
        result: AnswerResult,
        *,
        turn_id: str | None,
        exam: ExamAttempt | None = None,
    ) -> None:
        """Store a grading (`grading`) as the user's attempt and move the question's review
        schedule (see `grade_question`)."""
        capitolo, numero, letter = result.capitolo, result.numero, result.risposta
        now = self._now()
        await self.attempts.add_attempt(
            Attempt(
                userId=user_id,
                capitolo=capitolo,
                numero=numero,
                risposta=letter,
                corretta=result.corretta,
                timestamp=now.isoformat(),
                turn_id=turn_id,
                exam_id=exam.id if exam else None,
            )
        )
        await self._schedule(
            user_id,
            (capitolo, numero),
            right=result.corretta,
            now=now,
            unless_reviewed_since=exam.earlier_try if exam else None,
        )
        # The next turn's prompt shows this answer (a read already under way when it was
        # stored may still remember the earlier figures, for PROMPT_PROGRESS_TTL_S at most).
        self._recent.pop(user_id, None)

    def grading(self, question: Question, risposta: str) -> AnswerResult:
        """The grading of `risposta` against the question's key, stored nowhere (the same for
        the same question and answer). Raises `InvalidAnswer` when it names no option."""
        capitolo, numero = int(question["capitolo"]), int(question["numero"])
        options: dict[str, str] = question.get("risposte", {})
        valid = ", ".join(sorted(options))
        letter = NOT_KNOWN if dont_know(risposta) else read_answer(risposta, options)
        if letter is None:
            raise InvalidAnswer(
                f"risposta {_quote(risposta)} non riconosciuta: scrivi la lettera di "
                f"un'opzione ({valid}) o il suo testo"
            )
        if letter not in options and letter != NOT_KNOWN:
            raise InvalidAnswer(f"la lettera {letter!r} non è un'opzione; valide: {valid}")
        key = str(question.get("corretta", "")).strip().lower()
        return AnswerResult(
            capitolo=capitolo,
            numero=numero,
            risposta=letter,
            corretta=letter == key,
            risposta_corretta=key,
            spiegazione=str(question.get("spiegazione", "")),
            riferimento=question.get("riferimento"),
        )

    async def _schedule(
        self,
        user_id: str,
        key: QuestionKey,
        *,
        right: bool,
        now: datetime,
        unless_reviewed_since: str | None = None,
    ) -> None:
        """Move the question's review schedule, unless it was answered moments ago, or
        reviewed since `unless_reviewed_since` (an exam's earlier try got that far)."""
        record = await self.reviews.get(user_id, key)
        if (
            unless_reviewed_since is not None
            and record is not None
            and record.reviewed_at is not None
            and record.reviewed_at >= unless_reviewed_since
        ):
            return
        window = self.settings.quiz_repeat_window_s
        moved = review.answered(record, user_id, key, right=right, now=now, window_s=window)
        if moved is not None:
            await self.reviews.save_schedule(moved)

    async def take_back(self, user_id: str, turn_id: str) -> list[QuestionKey]:
        """Forget the gradings of chat turn `turn_id` (its answer is being regenerated: the
        new answer grades the same words again): its attempts are removed, and the schedule
        of each question they answered is what the question's other attempts give. An
        exam's answers stay: a mock exam is graded once. The questions, or [] when the turn
        graded nothing."""
        keys = await self.attempts.forget_turn(user_id, turn_id)
        window = self.settings.quiz_repeat_window_s
        for key in keys:
            record = await self.reviews.get(user_id, key)
            if record is None:
                continue
            history = await self.attempts.question_attempts(user_id, key)
            await self.reviews.save_schedule(review.replayed(record, history, window))
        if keys:
            self._recent.pop(user_id, None)
        return keys

    async def asked(self, user_id: str, questions: Iterable[Question]) -> None:
        """Remember that these questions were put to the user (drawing avoids them)."""
        keys = [(int(q["capitolo"]), int(q["numero"])) for q in questions]
        if keys:
            await self.reviews.mark_asked(user_id, keys, review.iso(self._now()))

    async def draw(
        self,
        user_id: str,
        count: int,
        *,
        capitolo: int | None = None,
        campo: str | None = None,
        valore: Any = None,
    ) -> list[Question]:
        """Up to `count` questions (of a chapter, or whose `campo` is `valore`), not repeating:
        first those never asked, then those due for review (most overdue first), then those
        asked longest ago. They are remembered as asked."""
        candidates = await self.questions.list_questions(capitolo=capitolo, limit=BANK_LIMIT)
        if campo is not None:
            wanted = str(valore).strip().casefold()
            candidates = [q for q in candidates if str(q.get(campo, "")).casefold() == wanted]
        return await self.draw_from(user_id, candidates, count, capitolo=capitolo)

    async def draw_from(
        self,
        user_id: str,
        candidates: list[Question],
        count: int,
        *,
        capitolo: int | None = None,
    ) -> list[Question]:
        """Up to `count` of `candidates` (all of chapter `capitolo` when given), in the order
        of `draw`: never asked, then due, then asked longest ago. They are remembered as
        asked."""
        if not candidates:
            return []
        records = {r.key: r for r in await self.reviews.records(user_id, capitolo=capitolo)}
        now = review.iso(self._now())
        candidates = list(candidates)
        random.shuffle(candidates)

        def rank(q: Question) -> tuple[int, str]:
            record = records.get((q["capitolo"], q["numero"]))
            if record is None or (record.asked_at is None and record.reviewed_at is None):
                return (0, "")
            if record.due is not None and record.due <= now:
                return (1, record.due)
            return (2, record.asked_at or record.reviewed_at or "")

        chosen = sorted(candidates, key=rank)[:count]
        await self.asked(user_id, chosen)
        return chosen

    async def review_items(
        self,
        user_id: str,
        limit: int,
        *,
        capitolo: int | None = None,
        shown: Collection[QuestionKey] = frozenset(),
    ) -> list[ReviewItem]:
        """The questions to review now: those due (most overdue first), then questions never
        answered from the weakest chapters; none of `shown` (listed on a page before)."""
        now = review.iso(self._now())
        listed = frozenset(shown)
        reads = BANK_LIMIT if capitolo else limit + len(listed)
        due = [
            r
            for r in await self.reviews.due(user_id, now, reads)
            if (capitolo is None or r.capitolo == capitolo) and r.key not in listed
        ][:limit]
        found = await self.questions.by_keys([r.key for r in due])
        by_key = {r.key: r.due for r in due}
        items = [
            ReviewItem(**public(q), scadenza=by_key.get((q["capitolo"], q["numero"])))
            for q in found
        ]
        if len(items) < limit:
            items += await self._new_from_weak(user_id, limit - len(items), capitolo, listed)
        return items

    async def _new_from_weak(
        self, user_id: str, size: int, capitolo: int | None, shown: frozenset[QuestionKey]
    ) -> list[ReviewItem]:
        records = {r.key: r for r in await self.reviews.records(user_id, capitolo=capitolo)}
        if capitolo is not None:
            order = [capitolo]
        else:
            stats = await self.attempts.chapter_stats(user_id)
            weak = _weak(stats)
            share = {s.capitolo: s.corrette / s.risposte for s in stats if s.risposte}
            rest = sorted(
                (c for c in self.titles if c not in weak), key=lambda c: (share.get(c, 1.0), c)
            )
            order = [*weak, *rest]
        items: list[ReviewItem] = []
        for chapter in order:
            if len(items) >= size:
                break
            fresh = [
                q
                for q in await self.questions.list_questions(capitolo=chapter, limit=BANK_LIMIT)
                if (q["capitolo"], q["numero"]) not in shown
                and (
                    (record := records.get((q["capitolo"], q["numero"]))) is None
                    or record.card is None
                )
            ]
            items += [ReviewItem(**public(q)) for q in fresh[: size - len(items)]]
        return items

    async def progress(self, user_id: str) -> Progress:
        """Every chapter's answers, distinct questions seen and mastered, share right,
        readiness and last 7 days, and the totals. Bounded reads: two aggregations of the
        attempts, the user's review records (at most one per question of the bank) and the
        bank's chapter counts."""
        return await self._progress(user_id, await self.attempts.chapter_stats(user_id))

    async def with_progress(self, user_id: str, graded: dict[str, Any]) -> dict[str, Any]:
        """A grading's client data with the student's progress after it (`progresso`, the
        object of `GET /api/progress`), so a client updates its view without asking again;
        without it when the progress cannot be read (the grading is stored, the turn goes
        on)."""
        try:
            progress = await self.progress(user_id)
        except BackendUnavailable as exc:
            reason = exc.__cause__ or exc
            log.warning(
                "progress after a grading unavailable: sent without it (%s: %s)",
                type(reason).__name__,
                reason,
            )
            return graded
        self._remember(user_id, progress)  # the next turn's prompt needs no read
        return {**graded, "progresso": progress.model_dump()}

    async def _progress(self, user_id: str, chapter_stats: list[ChapterStats]) -> Progress:
        now = self._now()
        stats = {s.capitolo: s for s in chapter_stats}
        counts = await self.questions.chapter_counts()
        records = await self.reviews.records(user_id)
        days = [(now.date() - timedelta(days=back)).isoformat() for back in range(6, -1, -1)]
        daily: dict[tuple[int, str], DayStats] = {
            (d.capitolo, d.giorno): d for d in await self.attempts.daily_stats(user_id, days[0])
        }
        answered: dict[int, list[ReviewRecord]] = {}
        for record in records:
            if record.card is not None:
                answered.setdefault(record.capitolo, []).append(record)
        chapters = []
        for capitolo in sorted(set(self.titles) | set(counts) | set(stats)):
            s = stats.get(capitolo) or ChapterStats(capitolo=capitolo, risposte=0, corrette=0)
            seen = answered.get(capitolo, [])
            chapters.append(
                ChapterProgress(
                    capitolo=capitolo,
                    titolo=self.title(capitolo),
                    risposte=s.risposte,
                    corrette=s.corrette,
                    domande=counts.get(capitolo, 0),
                    viste=len(seen),
                    padroneggiate=sum(review.mastered(r) for r in seen),
                    quota_corrette=_share(s.corrette, s.risposte),
                    prontezza=_readiness(seen, counts.get(capitolo, 0), now),
                    ultimi_7_giorni=[
                        _day(day, [d] if (d := daily.get((capitolo, day))) else []) for day in days
                    ],
                )
            )
        in_bank = [c for c in chapters if c.domande]
        risposte = sum(c.risposte for c in chapters)
        corrette = sum(c.corrette for c in chapters)
        return Progress(
            capitoli=chapters,
            risposte=risposte,
            corrette=corrette,
            deboli=_weak(stats.values()),
            domande=sum(c.domande for c in chapters),
            viste=sum(c.viste for c in chapters),
            padroneggiate=sum(c.padroneggiate for c in chapters),
            quota_corrette=_share(corrette, risposte),
            prontezza=round(sum(c.prontezza for c in in_bank) / len(in_bank), 3)
            if in_bank
            else 0.0,
            ultimi_7_giorni=[
                _day(day, [d for d in daily.values() if d.giorno == day]) for day in days
            ],
        )

    async def prompt_progress(self, user_id: str) -> Progress | None:
        """`progress` for the system prompt, None for a student who never answered (one read
        instead of four: most turns of a new user). Remembered for PROMPT_PROGRESS_TTL_S, so
        a conversation does not read the attempts on every turn."""
        now = self._clock()
        cached = self._recent.get(user_id)
        if cached is not None and cached[0] > now:
            self._recent.move_to_end(user_id)
            return cached[1]
        stats = await self.attempts.chapter_stats(user_id)
        progress = await self._progress(user_id, stats) if stats else None
        self._remember(user_id, progress)
        return progress

    def _remember(self, user_id: str, progress: Progress | None) -> None:
        self._recent[user_id] = (self._clock() + PROMPT_PROGRESS_TTL_S, progress)
        self._recent.move_to_end(user_id)
        while len(self._recent) > PROMPT_PROGRESS_USERS:
            self._recent.popitem(last=False)

    async def missed(self, user_id: str, *, capitolo: int | None = None) -> list[QuestionKey]:
        """Questions whose latest answer (among the recent ones) was wrong, newest first."""
        latest: dict[QuestionKey, bool] = {}
        for attempt in await self.attempts.recent_attempts(user_id, MISSED_WINDOW):
            latest.setdefault((attempt.capitolo, attempt.numero), attempt.corretta)
        return [
            key
            for key, right in latest.items()
            if not right and (capitolo is None or key[0] == capitolo)
        ]


def progress_section(progress: Progress | None) -> str:
    """The "Progressi dell'allievo" section of the system prompt; "" without answers."""
    if progress is None or not progress.risposte:
        return ""
    share = round(100 * progress.corrette / progress.risposte)
    lines = [
        "# Progressi dell'allievo",
        f"- risposte ai quiz: {progress.risposte}, corrette: {progress.corrette} ({share}%)",
        f"- domande viste: {progress.viste} su {progress.domande}, padroneggiate: "
        f"{progress.padroneggiate}; prontezza stimata per l'esame: "
        f"{round(100 * progress.prontezza)}%",
    ]
    # The weak chapters early: what to practise is the first thing a student asks after this.
    titles = {c.capitolo: c.titolo for c in progress.capitoli}
    if progress.deboli:
        weak = ", ".join(f"{c} ({titles[c]})" for c in progress.deboli)
        lines.append(
            f"- capitoli deboli, dal più debole: {weak}. Proponi di ripassarli "
            '(`domanda_teoria` con `modo` = "ripasso").'
        )
    week = [d for d in progress.ultimi_7_giorni if d.risposte]
    if week:
        answers = sum(d.risposte for d in week)
        right = sum(d.corrette for d in week)
        lines.append(
            f"- ultimi 7 giorni: {answers} risposte in {len(week)} "
            f"{'giorno' if len(week) == 1 else 'giorni'}, "
            f"{round(100 * right / answers)}% corrette"
        )
    lines += [
        f"- capitolo {c.capitolo} ({c.titolo}): {c.corrette} corrette su {c.risposte}"
        f", prontezza {round(100 * c.prontezza)}%"
        for c in progress.capitoli
        if c.risposte
    ]
    return "\n".join(lines)


def _share(right: int, answers: int) -> float | None:
    return round(right / answers, 3) if answers else None


def _weak(stats: Iterable[ChapterStats]) -> list[int]:
    """The weak chapters, weakest first (lowest share right, then more answers)."""
    weak = [
        s for s in stats if s.risposte >= WEAK_MIN_ANSWERS and s.corrette / s.risposte < WEAK_BELOW
    ]
    weak.sort(key=lambda s: (s.corrette / s.risposte, -s.risposte, s.capitolo))
    return [s.capitolo for s in weak]


def _readiness(answered: list[ReviewRecord], questions: int, now: datetime) -> float:
    """The expected share right on a question drawn from the chapter's bank now."""
    if not questions:
        return 0.0
    known = sum(review.recall(r, now) for r in answered[:questions])
    unseen = max(0, questions - len(answered)) * review.UNSEEN_RECALL
    return round((known + unseen) / questions, 3)


def _day(giorno: str, stats: list[DayStats]) -> DayProgress:
    risposte = sum(d.risposte for d in stats)
    corrette = sum(d.corrette for d in stats)
    return DayProgress(
        giorno=giorno,
        risposte=risposte,
        corrette=corrette,
        quota_corrette=_share(corrette, risposte),
    )


def _quote(text: str, limit: int = 40) -> str:
    """A student's text in a message: quoted, and short (errors never echo large inputs)."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")

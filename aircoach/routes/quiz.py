"""The quiz API: chapters, questions (never with their key), graded answers, progress.

The same `QuizService` serves the chat tools, so an answer graded here or in the chat is the
same grading and the same stored attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response
from fastapi.exceptions import RequestValidationError

from aircoach.deps import CurrentUser, ServicesDep, UserJsonRoute
from aircoach.errors import Conflict, NotFound, QuotaExceeded
from aircoach.models import ErrorBody
from aircoach.quiz import repeats
from aircoach.quiz.models import (
    MAX_CHAPTER,
    MAX_NUMBER,
    AnswerRequest,
    AnswerResult,
    ChapterList,
    Progress,
    PublicQuestion,
    QuestionList,
    ReviewList,
)
from aircoach.quiz.service import InvalidAnswer, QuestionNotFound, QuizService
from aircoach.routes.responses import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    RETRY_AFTER,
    TOO_LARGE,
    UNAUTHORIZED,
    UNPARSABLE_BODY,
    Responses,
    idempotency_key_header,
    unavailable,
)
from aircoach.services import Services

router = APIRouter(prefix="/api", tags=["quiz"], route_class=UserJsonRoute)
log = logging.getLogger(__name__)

_FAILS: Responses = {**UNAUTHORIZED, **unavailable("auth_unavailable", "store_unavailable")}
_NOT_FOUND: Responses = {
    404: {"model": ErrorBody, "description": "No such question (`not_found`)."}
}


async def _quiz(services: ServicesDep) -> QuizService:
    return await services.quiz_service()


Quiz = Annotated[QuizService, Depends(_quiz)]
Chapter = Annotated[int, Path(ge=1, le=MAX_CHAPTER, description="Chapter, 1 to 10.")]
Number = Annotated[int, Path(ge=1, le=MAX_NUMBER, description="Number in the chapter.")]


def _not_found(exc: QuestionNotFound) -> NotFound:
    return NotFound("question_not_found", capitolo=exc.capitolo, numero=exc.numero)


@router.get("/quiz/chapters", responses=_FAILS)
async def chapters(user: CurrentUser, quiz: Quiz) -> ChapterList:
    """The course's chapters with their titles and how many questions each holds."""
    return ChapterList(items=await quiz.chapters())


@router.get("/quiz/questions", responses=_FAILS)
async def questions(
    user: CurrentUser,
    quiz: Quiz,
    capitolo: Annotated[int | None, Query(ge=1, le=MAX_CHAPTER)] = None,
    testo: Annotated[
        str | None,
        Query(
            min_length=3,
            max_length=200,
            pattern=r"\S",  # not blank (it found nothing, as a 200), as the manual's search
            description="Forgiving search: accents, case, punctuation, plurals and one typo "
            "(a letter missing, extra or wrong, or two swapped) per word typed with five "
            "letters or more do not matter; best matches first.",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 20,
) -> QuestionList:
    """Questions without their key (`corretta`, `spiegazione`): the best matches of `testo`,
    or in chapter and number order; of one chapter when `capitolo` is given."""
    found = await quiz.find(capitolo=capitolo, testo=testo, limit=limit)
    return QuestionList(items=[PublicQuestion.of(q) for q in found])


@router.get("/quiz/questions/{capitolo}/{numero}", responses={**_FAILS, **_NOT_FOUND})
async def question(
    user: CurrentUser, quiz: Quiz, capitolo: Chapter, numero: Number
) -> PublicQuestion:
    """One question, without its key."""
    try:
        return PublicQuestion.of(await quiz.question(capitolo, numero))
    except QuestionNotFound as exc:
        raise _not_found(exc) from None


async def _charge_answer(services: Services, user_id: str) -> None:
    """Count one answer in the caller's minute (`QUOTA_ANSWERS_PER_MINUTE`, shared by every
    instance through the store), or 429 with `Retry-After`."""
    limit = services.settings.quota_answers_per_minute
    if not limit:
        return
    now = services.clock()
    minute = int(now // 60)
    if not await services.guards.quotas.hit(
        user_id, f"answers:m:{minute}", limit=limit, now=now, expires_at=(minute + 2) * 60.0
    ):
        retry = max(1, int((minute + 1) * 60 - now) + 1)
        log.warning("quota: %r sent its %d quiz answers of this minute", user_id, limit)
        raise QuotaExceeded(
            "quota_answers_per_minute",
            limit=limit,
            retry_after=retry,
            headers={"Retry-After": str(retry)},
        )


_TOO_MANY: Responses = {
    429: {
        "model": ErrorBody,
        "description": "`quota_exceeded`: the caller's graded answers of this minute "
        "(`QUOTA_ANSWERS_PER_MINUTE`) are spent; `Retry-After` says when to retry.",
        "headers": RETRY_AFTER,
    }
}
_REPEATS: Responses = {
    200: {
        "description": "The grading.",
        "headers": {
            REPLAYED_HEADER: {
                "description": "`true` when a repeated `Idempotency-Key` got the first "
                "grading again (nothing was recorded).",
                "schema": {"type": "string", "enum": ["true"]},
            }
        },
    },
    409: {
        "model": ErrorBody,
        "description": "`conflict`: the first request with this `Idempotency-Key` is still "
        "recording its answer; `Retry-After` says when to retry.",
        "headers": RETRY_AFTER,
    },
}
_BUSY_RETRY_S = 1

AnswerKey = Annotated[
    str | None,
    idempotency_key_header(
        "The client's id of this answer (a UUID, a ULID...; letters, digits and "
        "`. _ : -`). A repeat within 24 h (a double tap, a retry after a timeout) gets the "
        "first grading, with `Idempotent-Replayed: true`, and is not recorded again; the same "
        "id with another answer (question or letter) is a 422 naming it. Without it, every "
        "request is a new answer: clients should send one."
    ),
]


@router.post(
    "/quiz/answers",
    responses={**UNPARSABLE_BODY, **TOO_LARGE, **_FAILS, **_NOT_FOUND, **_TOO_MANY, **_REPEATS},
)
async def answer(
    user: CurrentUser,
    quiz: Quiz,
    body: AnswerRequest,
    services: ServicesDep,
    response: Response,
    idempotency_key: AnswerKey = None,
) -> AnswerResult:
    """Grade an answer against the key and record it in the caller's progress. `risposta` is
    a letter (any case; "la c" and "risposta: c" too) or the text of an option; a letter
    that is not an option, or a text that is none of them, is a 422 naming `risposta`. Each
    answer that passes validation (graded, or refused as no option) counts in the caller's
    `QUOTA_ANSWERS_PER_MINUTE`; an answer to a question that does not exist (404) does not,
    nor does a repeated `Idempotency-Key` (it records nothing)."""
    try:
        question = await quiz.question(body.capitolo, body.numero)
    except QuestionNotFound as exc:
        raise _not_found(exc) from None
    try:
        result = quiz.grading(question, body.risposta)
    except InvalidAnswer as exc:
        await _charge_answer(services, user.sub)  # a refused answer counts in the budget too
        raise _invalid(("body", "risposta"), str(exc), body.risposta) from None
    if idempotency_key is None:
        await _charge_answer(services, user.sub)
        await quiz.record(user.sub, result, turn_id=None)
        return result
    return await _answer_once(services, quiz, user.sub, result, idempotency_key, response)


async def _answer_once(
    services: Services,
    quiz: QuizService,
    user_id: str,
    result: AnswerResult,
    client_key: str,
    response: Response,
) -> AnswerResult:
    """Record an answer's grading once per `Idempotency-Key` (`aircoach.quiz.repeats`): a
    repeat of it gets the same grading (the same question and letter) and records nothing."""
    reservations = services.guards.reservations
    digest = repeats.answer_digest(result.capitolo, result.numero, result.risposta)
    claim = await claim_key(services, user_id, client_key, digest, kind=repeats.ANSWERS)
    if claim.replay:
        response.headers[REPLAYED_HEADER] = "true"
        return result
    try:
        await _charge_answer(services, user_id)
        await quiz.record(user_id, result, turn_id=None)
    except BaseException:
        await repeats.release(reservations, user_id, claim)
        raise
    await repeats.recorded(reservations, user_id, claim, now=services.clock())
    return result


async def claim_key(
    services: Services, user_id: str, client_key: str, digest: str, *, kind: str
) -> repeats.Claim:
    """`repeats.claim` of a quiz answer's or an exam's `Idempotency-Key` (`kind`), its
    refusals as the API answers them: the key with another request is a 422 naming the
    header, a first request still at work a 409 with `Retry-After`."""
    try:
        return await repeats.claim(
            services.guards.reservations,
            user_id,
            client_key,
            digest,
            now=services.clock(),
            kind=kind,
        )
    except repeats.AnswerKeyReused:
        what = "answer" if kind == repeats.ANSWERS else "exam"
        raise _invalid(
            ("header", IDEMPOTENCY_HEADER),
            f"already used in the last 24 h for another {what}: send a new id for a new {what}",
            client_key,
        ) from None
    except repeats.AnswerKeyBusy:
        raise Conflict(
            "idempotency_key_busy", headers={"Retry-After": str(_BUSY_RETRY_S)}
        ) from None


def _invalid(loc: tuple[str, str], message: str, value: str) -> RequestValidationError:
    return RequestValidationError(
        [{"type": "value_error", "loc": loc, "msg": message, "input": value[:40]}]
    )


# A review cursor names the questions listed on the pages before (the list is worked out
# again at each request, and answering a question moves it: an offset would skip or repeat
# questions): `1.2.5-4.7` is chapter 1's 2 and 5 and chapter 4's 7. URL-safe as it is, and
# a few KB for the whole bank.
_MAX_REVIEW_CURSOR = 16_000
_REVIEW_CURSOR = r"^[0-9]{1,2}(\.[0-9]{1,6})+(-[0-9]{1,2}(\.[0-9]{1,6})+)*$"


def _review_cursor(keys: Iterable[tuple[int, int]]) -> str:
    by_chapter: dict[int, list[int]] = {}
    for capitolo, numero in sorted(set(keys)):
        by_chapter.setdefault(capitolo, []).append(numero)
    return "-".join(".".join(map(str, [c, *numeri])) for c, numeri in by_chapter.items())


def _listed(cursor: str) -> set[tuple[int, int]]:
    """The questions a cursor names (its form is checked by the route's `pattern`)."""
    listed: set[tuple[int, int]] = set()
    for group in cursor.split("-"):
        capitolo, *numeri = (int(n) for n in group.split("."))
        listed.update((capitolo, numero) for numero in numeri)
    return listed


@router.get("/quiz/review", responses=_FAILS)
async def review(
    user: CurrentUser,
    quiz: Quiz,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    capitolo: Annotated[int | None, Query(ge=1, le=MAX_CHAPTER)] = None,
    cursor: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=_MAX_REVIEW_CURSOR,
            pattern=_REVIEW_CURSOR,
            description="`next_cursor` of the previous page",
        ),
    ] = None,
) -> ReviewList:
    """The caller's questions to review now, without their key: those the FSRS schedule says
    are due (a question answered wrong is due at once; one answered right when FSRS says),
    most overdue first, each with its `scadenza`; then questions never answered from the
    weakest chapters (`scadenza` null). Of one chapter when `capitolo` is given. Pass
    `next_cursor` as `cursor` for the next page: it lists none of the questions of the pages
    before, answered since or not; `next_cursor` is null on the last page."""
    listed = _listed(cursor) if cursor is not None else set()
    found = await quiz.review_items(user.sub, limit + 1, capitolo=capitolo, shown=listed)
    page = found[:limit]
    more = len(found) > limit
    return ReviewList(
        items=page,
        next_cursor=_review_cursor([*listed, *((i.capitolo, i.numero) for i in page)])
        if more
        else None,
    )


@router.get("/progress", responses=_FAILS)
async def progress(user: CurrentUser, quiz: Quiz) -> Progress:
    """The caller's progress, per chapter (every chapter, zero when never answered) and in
    total: graded answers (from the quiz API, the chat and mock exams) and right answers,
    the share right, distinct questions seen and mastered (right the last time the review
    schedule counted), a readiness estimate (the expected share right on a mock exam now,
    from the FSRS schedule) and the last 7 days (UTC). `deboli`: the weak chapters, weakest
    first: a chapter is weak once it has at least 2 answers of which less than 60% were
    right."""
    return await quiz.progress(user.sub)

"""Mock exams: create one, see it (without its key until it is submitted), submit it once,
list them. The same quiz service grades them, so each answer is an attempt in the progress
and moves its review schedule."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response
from fastapi.exceptions import RequestValidationError

from aircoach.deps import CurrentUser, ServicesDep, UserJsonRoute
from aircoach.errors import Conflict, NotFound, QuotaExceeded
from aircoach.models import ErrorBody
from aircoach.quiz import repeats
from aircoach.quiz.exam_models import (
    ExamList,
    ExamRequest,
    ExamResult,
    ExamSubmission,
    ExamSummary,
    ExamView,
)
from aircoach.quiz.exams import (
    MAX_LISTED,
    ExamAlreadySubmitted,
    ExamNotFound,
    ExamService,
    ExamTooLarge,
    InvalidExamAnswers,
)
from aircoach.quiz.models import PublicQuestion
from aircoach.routes.quiz import claim_key
from aircoach.routes.responses import (
    REPLAYED_HEADER,
    RETRY_AFTER,
    TOO_LARGE,
    UNAUTHORIZED,
    UNPARSABLE_BODY,
    Responses,
    idempotency_key_header,
    unavailable,
)
from aircoach.startup import first_import

router = APIRouter(prefix="/api", tags=["exams"], route_class=UserJsonRoute)

_FAILS: Responses = {**UNAUTHORIZED, **unavailable("auth_unavailable", "store_unavailable")}
_NOT_FOUND: Responses = {
    404: {"model": ErrorBody, "description": "No exam of this id for the caller (`not_found`)."}
}
_SUBMITTED: Responses = {
    409: {
        "model": ErrorBody,
        "description": "The exam was already submitted (`conflict`); with `Retry-After` "
        "while that submission has no result yet (it may still be grading; after that a "
        "submission grades it).",
        "headers": RETRY_AFTER,
    }
}
_TOO_MANY: Responses = {
    429: {
        "model": ErrorBody,
        "description": "`quota_exceeded`: an exam counts as a chat turn in the caller's "
        "`QUOTA_TURNS_PER_MINUTE` and `QUOTA_TURNS_PER_DAY`; `Retry-After` says when the "
        "window ends.",
        "headers": RETRY_AFTER,
    }
}


_REPEATS: Responses = {
    201: {
        "description": "The new exam.",
        "headers": {
            REPLAYED_HEADER: {
                "description": "`true` when a repeated `Idempotency-Key` got the exam its "
                "first request created (no other was created, no turn counted).",
                "schema": {"type": "string", "enum": ["true"]},
            }
        },
    },
    409: {
        "model": ErrorBody,
        "description": "`idempotency_key_busy`: the first request with this `Idempotency-Key` "
        "is still creating its exam; `Retry-After` says when to retry.",
        "headers": RETRY_AFTER,
    },
}

ExamKey = Annotated[
    str | None,
    idempotency_key_header(
        "The client's id of this request (a UUID, a ULID...; letters, digits and "
        "`. _ : -`). A repeat within 24 h (a retry after a timeout) gets the exam the first "
        "created, with `Idempotent-Replayed: true`, and counts no turn; the same id with "
        "other `capitoli` or `domande` is a 422 naming it."
    ),
]


async def _exams(services: ServicesDep) -> ExamService:
    return await services.exam_service()


Exams = Annotated[ExamService, Depends(_exams)]
ExamId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-f]+$")]


@router.post(
    "/exams",
    status_code=201,
    responses={**UNPARSABLE_BODY, **TOO_LARGE, **_FAILS, **_TOO_MANY, **_REPEATS},
)
async def create_exam(
    user: CurrentUser,
    exams: Exams,
    services: ServicesDep,
    response: Response,
    body: ExamRequest | None = None,
    idempotency_key: ExamKey = None,
) -> ExamView:
    """A mock exam for the caller: `domande` questions (default `EXAM_QUESTIONS`, 30) spread
    evenly over `capitoli` (default all ten), none the caller was asked recently if the bank
    allows; `durata_s` (`EXAM_DURATION_S`) until `scadenza`, and the pass mark `soglia`
    (`EXAM_PASS_MARK`, 0.75). A chapter holding fewer than its share gives all it has and
    the others make up the rest; more questions than the chapters hold together is a 422
    naming `domande` (with how many they hold), and counts no turn. Questions come without
    their key. Counts as one chat turn in the caller's quota. With an `Idempotency-Key`, a
    repeat gets the exam its first request created."""
    # Imported here: the admission module brings LangGraph, which routes that never chat
    # (health) must not import; the first time with the collector paused (aircoach/startup.py).
    first_import("aircoach.turn.admission")
    from aircoach.turn.admission import charge

    body = body or ExamRequest()
    try:
        plan = await exams.plan(capitoli=body.capitoli, domande=body.domande)
    except ExamTooLarge as exc:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "domande"),
                    "msg": str(exc),
                    "input": exc.asked,
                }
            ]
        ) from None
    claim = None
    if idempotency_key is not None:
        digest = repeats.exam_digest(body.capitoli, body.domande)
        claim = await claim_key(services, user.sub, idempotency_key, digest, kind=repeats.EXAMS)
        if claim.replay:
            response.headers[REPLAYED_HEADER] = "true"
            return await get_exam(user, exams, claim.made)  # the user's own: keys are per user
    try:
        try:
            await charge(services.gate, user.sub)
        except QuotaExceeded as exc:  # the same budget, said of an exam
            raise QuotaExceeded(f"exam_{exc.key}", headers=exc.headers, **exc.params) from None
        exam, questions = await exams.create(user.sub, plan=plan)
    except BaseException:
        if claim is not None:
            await repeats.release(services.guards.reservations, user.sub, claim)
        raise
    if claim is not None:
        reservations = services.guards.reservations
        await repeats.recorded(reservations, user.sub, claim, now=services.clock(), made=exam.id)
    return ExamView(
        id=exam.id,
        domande=[PublicQuestion.of(q) for q in questions],
        durata_s=exam.durata_s,
        scadenza=exam.scadenza,
        soglia=exam.soglia,
    )


# An exam list cursor is the last listed exam's `creato` (stored as review.iso writes it,
# `2026-03-01T09:00:00.000000+00:00`) as 20 digits, a dot and its id: URL-safe as it is and
# read without a lookup. Any cursor of this form is accepted and only bounds the page (it
# never lists another user's exams); another form is a 422 naming `cursor`.
_LIST_CURSOR = r"^[0-9]{20}\.[0-9a-f]{1,64}$"


def _list_cursor(exam: ExamSummary) -> str:
    return re.sub(r"[^0-9]", "", exam.creato[:26]) + "." + exam.id


def _before(cursor: str) -> tuple[str, str]:
    d, exam_id = cursor.split(".")
    return (f"{d[:4]}-{d[4:6]}-{d[6:8]}T{d[8:10]}:{d[10:12]}:{d[12:14]}.{d[14:]}+00:00", exam_id)


@router.get("/exams", responses=_FAILS)
async def list_exams(
    user: CurrentUser,
    exams: Exams,
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = MAX_LISTED,
    cursor: Annotated[
        str | None,
        Query(
            max_length=85,
            pattern=_LIST_CURSOR,
            description="`next_cursor` of the previous page",
        ),
    ] = None,
) -> ExamList:
    """The caller's exams, newest first, with their score once submitted: `limit` a page
    (default and at most 100); pass `next_cursor` as `cursor` for the next (older) page,
    null on the last."""
    before = _before(cursor) if cursor is not None else None
    found = await exams.listing(user.sub, limit + 1, before=before)
    page = found[:limit]
    return ExamList(items=page, next_cursor=_list_cursor(page[-1]) if len(found) > limit else None)


@router.get("/exams/{exam_id}", responses={**_FAILS, **_NOT_FOUND})
async def get_exam(user: CurrentUser, exams: Exams, exam_id: ExamId) -> ExamView:
    """One of the caller's exams: its questions without their key, and `esito` (with the key
    and explanations) once submitted."""
    try:
        return await exams.view(user.sub, exam_id)
    except ExamNotFound:
        raise NotFound("exam_not_found") from None


@router.post(
    "/exams/{exam_id}/submit",
    responses={**UNPARSABLE_BODY, **TOO_LARGE, **_FAILS, **_NOT_FOUND, **_SUBMITTED},
)
async def submit_exam(
    user: CurrentUser, exams: Exams, exam_id: ExamId, body: ExamSubmission
) -> ExamResult:
    """Grade the exam, once: `punteggio` right of `totale` (an unanswered question counts as
    wrong), `superato` when the share right reaches `soglia` on time, per-chapter scores and,
    per question, the key, explanation and manual section. A submission more than a minute
    after `scadenza` is graded (each answer counts in the progress) but marked `in_ritardo`
    and not passed, as at the real exam. `risposta` is read as by `/api/quiz/answers`: "non
    lo so" is graded wrong (`-`). An answer to a question not in the exam, a second answer to
    the same question, or one that is no option and no "non lo so", is a 422 naming it, and
    nothing is graded; a second submission is 409."""
    try:
        return await exams.submit(user.sub, exam_id, body.risposte, turn_id=None)
    except ExamNotFound:
        raise NotFound("exam_not_found") from None
    except ExamAlreadySubmitted as exc:
        if exc.retry_after_s is None:
            raise Conflict("exam_submitted") from None
        # Still being graded: a retry after that may grade it (its grading had stopped).
        raise Conflict(
            "exam_grading",
            retry_after=exc.retry_after_s,
            headers={"Retry-After": str(exc.retry_after_s)},
        ) from None
    except InvalidExamAnswers as exc:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "risposte", index, field),
                    "msg": message,
                    # Never the whole answer back (up to 500 characters each).
                    "input": str(body.risposte[index].model_dump()[field])[:40],
                }
                for index, field, message in exc.problems
            ]
        ) from None

"""A mock exam's records and the shapes of `/api/exams` (the chat's exam tools send the same)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from aircoach.quiz.models import (
    MAX_ANSWER_CHARS,
    MAX_CHAPTER,
    MAX_NUMBER,
    JsonInt,
    PublicQuestion,
    json_integer,
)
from aircoach.response_model import ResponseModel

MIN_EXAM_QUESTIONS = 5
MAX_EXAM_QUESTIONS = 60
# How the chat's list of a student's past exams opens (`domanda_teoria` `modo="esiti"`): the
# offline model tells it from a new question asked since an exam started.
PAST_EXAMS_HEADER = "Le tue simulazioni d'esame"
# The bounds before the JSON-integer check: so they reach the OpenAPI schema as
# minimum/maximum (after a validator function they would not), inside a list or a union too.
ChapterNumber = Annotated[int, Field(ge=1, le=MAX_CHAPTER), BeforeValidator(json_integer)]
QuestionCount = Annotated[
    int, Field(ge=MIN_EXAM_QUESTIONS, le=MAX_EXAM_QUESTIONS), BeforeValidator(json_integer)
]


class ExamRecord(BaseModel):
    """One mock exam (collection `quiz_exams`): its questions, and its result once submitted."""

    id: str
    userId: str
    creato: str
    scadenza: str
    durata_s: int
    soglia: float
    domande: list[tuple[int, int]] = Field(description="(capitolo, numero) in exam order.")
    consegnato: str | None = Field(default=None, description="When it was submitted.")
    esito: dict[str, Any] | None = Field(default=None, description="The `ExamResult`.")


class ExamRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capitoli: list[ChapterNumber] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CHAPTER,
        description="Chapters to draw from (1..10); default all ten.",
    )
    domande: QuestionCount | None = Field(
        default=None,
        description="How many questions (5..60); default `EXAM_QUESTIONS`.",
    )


class ExamAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capitolo: JsonInt = Field(ge=1, le=MAX_CHAPTER)
    numero: JsonInt = Field(ge=1, le=MAX_NUMBER)
    risposta: str = Field(min_length=1, max_length=MAX_ANSWER_CHARS)


class ExamSubmission(BaseModel):
    model_config = ConfigDict(extra="forbid")

    risposte: list[ExamAnswer] = Field(max_length=MAX_EXAM_QUESTIONS)


class ExamOutcome(ResponseModel):
    """One exam question graded: `risposta` null when it was not answered (counted wrong)."""

    capitolo: int
    numero: int
    risposta: str | None
    corretta: bool
    risposta_corretta: str
    spiegazione: str
    riferimento: str | None = None


class ChapterScore(ResponseModel):
    capitolo: int
    titolo: str
    punteggio: int
    totale: int


class ExamResult(ResponseModel):
    id: str
    punteggio: int = Field(description="Questions answered right.")
    totale: int
    soglia: float
    superato: bool = Field(
        description="The share right reached `soglia`, on time (never when `in_ritardo`)."
    )
    in_ritardo: bool = Field(
        description="Submitted more than a minute after `scadenza`: graded, but not passed."
    )
    capitoli: list[ChapterScore]
    esiti: list[ExamOutcome]


class ExamView(ResponseModel):
    """An exam as its owner sees it: the questions without their key; `esito` once submitted."""

    id: str
    domande: list[PublicQuestion]
    durata_s: int
    scadenza: str
    soglia: float
    esito: ExamResult | None = None


class ExamSummary(ResponseModel):
    id: str
    creato: str
    scadenza: str
    totale: int
    punteggio: int | None
    superato: bool | None


class ExamList(ResponseModel):
    items: list[ExamSummary]
    next_cursor: str | None = Field(
        default=None,
        description="Pass as `cursor` for the next (older) page; null on the last.",
    )

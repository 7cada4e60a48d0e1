"""The quiz's shapes: a stored attempt, and the requests and responses of the quiz API.

A question as a client sees it (`PublicQuestion`) never carries its key (`corretta`,
`spiegazione`): the key reaches a client only in the grading of an answer (`AnswerResult`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from aircoach.response_model import ResponseModel

MAX_ANSWER_CHARS = 500
MAX_CHAPTER = 10  # the course has ten chapters (quiz.bank.CHAPTERS)
MAX_NUMBER = 100_000


def json_integer(value: Any) -> Any:
    """A JSON integer (`43` or `43.0`, as JSON Schema's `integer`), never `true` or `"43"`,
    which lax parsing took as numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a JSON integer")
    return value


JsonInt = Annotated[int, BeforeValidator(json_integer)]


class Attempt(BaseModel):
    """One graded answer (collection `quiz_attempts`), from the REST API or the chat."""

    userId: str
    capitolo: int
    numero: int
    risposta: str = Field(description="The letter the answer was read as.")
    corretta: bool
    timestamp: str
    turn_id: str | None = Field(default=None, description="The chat turn that graded it.")
    exam_id: str | None = Field(
        default=None,
        description="The mock exam it answers: one attempt per exam and question (a "
        "resubmission replaces it).",
    )


class ChapterStats(BaseModel):
    capitolo: int
    risposte: int
    corrette: int


class DayStats(BaseModel):
    """A user's answers and right answers of one chapter on one day (UTC, `YYYY-MM-DD`)."""

    giorno: str
    capitolo: int
    risposte: int
    corrette: int


class Chapter(ResponseModel):
    capitolo: int
    titolo: str
    domande: int = Field(description="Questions of the chapter in the bank.")


class ChapterList(ResponseModel):
    items: list[Chapter]


class PublicQuestion(ResponseModel):
    """A question without its key."""

    model_config = ConfigDict(extra="ignore")

    capitolo: int
    numero: int
    argomento: str | None = None
    difficolta: str | None = None
    testo: str
    risposte: dict[str, str]

    @classmethod
    def of(cls, question: dict[str, Any]) -> PublicQuestion:
        return cls.model_validate(question)


class QuestionList(ResponseModel):
    items: list[PublicQuestion]


class AnswerRequest(BaseModel):
    # A misspelt field is a 422 (it was ignored), and so is `"numero": true` (graded as 1).
    model_config = ConfigDict(extra="forbid")

    capitolo: JsonInt = Field(ge=1, le=MAX_CHAPTER)
    numero: JsonInt = Field(ge=1, le=MAX_NUMBER)
    risposta: str = Field(
        min_length=1,
        max_length=MAX_ANSWER_CHARS,
        description=(
            "A letter (any case, e.g. `c`, `la c`, `risposta: c`), an option's place "
            "(`la seconda`) or its text."
        ),
    )


class AnswerResult(ResponseModel):
    """An answer graded against the key (the same object the chat's `verifica_risposta`
    sends in its `tool_result`)."""

    capitolo: int
    numero: int
    risposta: str = Field(description="The letter the answer was read as.")
    corretta: bool
    risposta_corretta: str = Field(description="The letter of the right option.")
    spiegazione: str
    riferimento: str | None = Field(
        default=None, description="The manual section that teaches it (e.g. `3.7`)."
    )


class DayProgress(ResponseModel):
    giorno: str = Field(description="The day (UTC), `YYYY-MM-DD`.")
    risposte: int
    corrette: int
    quota_corrette: float | None = Field(
        default=None, description="Share of right answers, 0 to 1 (null without answers)."
    )


class ChapterProgress(ResponseModel):
    capitolo: int
    titolo: str
    risposte: int = Field(description="Graded answers (repeats included).")
    corrette: int
    domande: int = Field(default=0, description="Questions of the chapter in the bank.")
    viste: int = Field(default=0, description="Distinct questions answered at least once.")
    padroneggiate: int = Field(
        default=0, description="Distinct questions answered right the last time it counted."
    )
    quota_corrette: float | None = Field(
        default=None, description="Share of right answers, 0 to 1 (null without answers)."
    )
    prontezza: float = Field(
        default=0.0,
        description="Readiness, 0 to 1: the expected share right on this chapter's exam "
        "questions now, the mean FSRS recall over the chapter's bank (0.25 for a question "
        "never answered, 0 right after a wrong answer).",
    )
    ultimi_7_giorni: list[DayProgress] = Field(
        default_factory=list, description="The last 7 days (UTC), oldest first."
    )


class Progress(ResponseModel):
    """The caller's graded answers per chapter (every chapter, zero when never answered).
    `deboli`: the chapters with at least `WEAK_MIN_ANSWERS` answers of which less than
    `WEAK_BELOW` were right, weakest first."""

    capitoli: list[ChapterProgress]
    risposte: int
    corrette: int
    deboli: list[int]
    domande: int = Field(default=0, description="Questions in the bank.")
    viste: int = 0
    padroneggiate: int = 0
    quota_corrette: float | None = None
    prontezza: float = Field(
        default=0.0,
        description="Readiness, 0 to 1: the expected share right on a default mock exam "
        "(the same number of questions from each chapter), the mean of the chapters' "
        "`prontezza`.",
    )
    ultimi_7_giorni: list[DayProgress] = Field(default_factory=list)


class ReviewRecord(BaseModel):
    """A user's record of one question (collection `quiz_reviews`): when it was last asked
    (drawing avoids repeats) and its FSRS schedule (`card`, `due`), which every graded
    answer moves (`quiz.review`). `card` and `due` stay None until the first answer."""

    userId: str
    capitolo: int
    numero: int
    asked_at: str | None = Field(default=None, description="Last time it was drawn (ISO UTC).")
    card: dict[str, Any] | None = Field(default=None, description="`fsrs.Card.to_dict()`.")
    due: str | None = Field(default=None, description="When FSRS wants it again (ISO UTC).")
    reviewed_at: str | None = Field(default=None, description="The last answer that counted.")
    reviews: int = Field(default=0, description="Answers that moved the schedule.")
    last_right: bool | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.capitolo, self.numero)


class ReviewItem(PublicQuestion):
    """A question to review, without its key: `scadenza` is when it fell due (None for a
    question never answered, drawn from a weak chapter)."""

    scadenza: str | None = None


class ReviewList(ResponseModel):
    items: list[ReviewItem]
    next_cursor: str | None = Field(
        default=None,
        description="Pass as `cursor` for the next page; null when no question is left.",
    )

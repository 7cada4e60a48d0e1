"""Students' feedback on an answer (`POST /api/turns/{turn_id}/feedback`) and the list a
docs editor reads (`GET /api/feedback`). A turn holds at most one feedback (a second call
replaces it), stored with the turn so the list needs no join."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from aircoach.grounding.models import GroundingResult
from aircoach.response_model import ResponseModel

Voto = Literal["errata", "utile"]
MAX_COMMENT_CHARS = 1000


class FeedbackRequest(BaseModel):
    """A student's verdict on one of their answers."""

    model_config = ConfigDict(extra="forbid", strict=True)

    voto: Voto = Field(description="`errata`: the answer is wrong; `utile`: it helped.")
    commento: str | None = Field(
        default=None, max_length=MAX_COMMENT_CHARS, description="What was wrong, in a few words."
    )


class Feedback(FeedbackRequest, ResponseModel):
    """A feedback as stored with its turn."""

    model_config = ConfigDict(extra="ignore", strict=False)

    at: str = Field(description="When it was given (ISO 8601, UTC).")


class FeedbackReceipt(ResponseModel):
    turn_id: str
    feedback: Feedback


class FeedbackItem(ResponseModel):
    """One feedback with what a docs editor needs to fix the docs: the turn's question,
    answer, the guard's verdict and the prompt version that answered."""

    turn_id: str
    userId: str
    voto: Voto
    commento: str | None
    at: str
    question: str
    answer: str
    grounding: GroundingResult | None
    prompt_version: str
    model: str


class FeedbackPage(ResponseModel):
    items: list[FeedbackItem]
    next_before: str | None = Field(
        default=None, description="Pass as `before` to get the next (older) page."
    )

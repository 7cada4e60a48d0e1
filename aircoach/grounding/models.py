"""The grounding shapes of the contract: the `grounding` event's body (also stored with the
turn and returned by `/api/history`), the JSON answer's `grounding`, and what each tool
returned (`retrieved`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CitationCheck(BaseModel):
    """One citation of the answer: as written, its canonical key, and whether the turn's
    context (prompt docs, manual, the tools' texts) supports it."""

    text: str
    key: str = Field(description="Canonical form: written variants of one citation share it.")
    verified: bool


class GroundingResult(BaseModel):
    """The guard's verdict on an answer that cites something."""

    citations: list[CitationCheck]
    unverified: list[str] = Field(description="The `text` of each unverified citation.")


class ResponseGrounding(GroundingResult):
    """`MessageResponse.grounding`: the verdict on the answer returned, and whether it is a
    second answer written after the first cited what the context does not say."""

    regenerated: bool = False


class Retrieved(BaseModel):
    """What one tool call returned, for an operator: how many results and their ids or
    titles (never their texts)."""

    tool_name: str
    call_id: str
    count: int
    refs: list[str] = Field(default_factory=list)

"""The grounding shapes of the contract: the `grounding` event's body (also stored with the
turn and returned by `/api/history`), the JSON answer's `grounding`, and what each tool
returned (`retrieved`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.json_schema import JsonDict

from aircoach.response_model import ResponseModel

GroundingPolicy = Literal["caveat", "regenerate", "withhold"]
Reason = Literal["not_in_context", "article_not_in_context", "not_supported", "contradicts"]


def _null_by_default(schema: JsonDict) -> None:
    """An OpenAPI document drops a `null` default (its schema objects leave out nulls): leave
    it out here too, so the stream's schema reads the same in both."""
    schema.pop("default", None)


class Span(ResponseModel):
    """Character offsets (Unicode code points, end excluded) in the answer."""

    start: int
    end: int


class WebSource(ResponseModel):
    """A page of an official site (EUR-Lex, Normattiva, EASA, ENAC) found for an unverified
    citation (`GROUNDING_WEB_CHECK`): to open and read, never a verification."""

    url: str
    title: str
    confirms: bool = Field(description="The page's title or snippet cites the same key.")


class CitationCheck(ResponseModel):
    """One citation of the answer: as written, its canonical key, and whether the turn's
    context (prompt docs, manual, the tools' texts) supports it."""

    text: str
    key: str = Field(description="Canonical form: written variants of one citation share it.")
    verified: bool
    reason: Reason | None = Field(
        default=None,
        json_schema_extra=_null_by_default,
        description="Why it is not verified: `not_in_context` (no source names the act), "
        "`article_not_in_context` (the act is there, not the article, comma, lettera, point "
        "or paragraph cited), `not_supported` (the passage that holds it speaks of something "
        "else), `contradicts` (it gives another quantity: `source_says`).",
    )
    sentence: Span | None = Field(
        default=None,
        json_schema_extra=_null_by_default,
        description="The sentence of the answer that cites it, for a client to mark.",
    )
    source_says: list[str] = Field(
        default_factory=list,
        description="For `contradicts`: the quantities the source gives instead, as written.",
    )
    source: WebSource | None = Field(
        default=None,
        json_schema_extra=_null_by_default,
        description="`GROUNDING_WEB_CHECK`: an official page found for an unverified citation.",
    )


class GroundingResult(ResponseModel):
    """The guard's verdict on an answer that cites something."""

    citations: list[CitationCheck]
    unverified: list[str] = Field(description="The `text` of each unverified citation.")
    withheld: list[str] = Field(
        default_factory=list,
        description="`GROUNDING_POLICY=withhold`, JSON answers: the `text` of each unverified "
        "citation whose sentence was left out of the answer (the verdict is then on the "
        "answer as sent).",
    )


class ResponseGrounding(GroundingResult):
    """`MessageResponse.grounding`: the verdict on the answer returned, and whether it is a
    second answer written after the first cited what the context does not say."""

    regenerated: bool = False


class Retrieved(ResponseModel):
    """What one tool call returned, for an operator: how many results and their ids or
    titles (never their texts)."""

    tool_name: str
    call_id: str
    count: int
    refs: list[str] = Field(default_factory=list)

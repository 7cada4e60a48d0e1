"""The e-mail triage's rules (`rules.json`), its offline cues (`offline.json`) and the context
its checks and its offline model read: shared by `triage` and `triage_offline`."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aircoach.tasks.candidates import Candidate, CanonicalEmail, TextIndex


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_topics: int = Field(ge=1, le=10)
    max_keywords: int = Field(ge=1, le=50)
    max_evidence: int = Field(ge=1, le=5)
    max_quote_chars: int = Field(ge=20, le=1000)
    max_signals: int = Field(ge=0, le=20)
    low_confidence: float = Field(ge=0, le=1)


class TriageRules(BaseModel):
    """`rules.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topics: dict[str, str] = Field(min_length=1, description="label -> what it covers")
    unknown_topic: str
    sentiments: list[str] = Field(min_length=1)
    priorities: list[str] = Field(min_length=1, description="from lowest to highest")
    languages: list[str] = Field(min_length=1, description="ISO 639-1 codes the triage names")
    limits: Limits

    @model_validator(mode="after")
    def _unknown_is_a_topic(self) -> TriageRules:
        if self.unknown_topic not in self.topics:
            raise ValueError(f"unknown_topic {self.unknown_topic!r} is not one of the topics")
        return self


class OfflineCues(BaseModel):
    """`offline.json`: the offline model's cues. A cue is one or more word prefixes matched
    against the e-mail's words in a row (`"iscri"` matches `iscrizione`, `"corso ppl"` the two
    words in a row)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(
        pattern=r"^kw-[0-9A-Za-z.-]{1,40}$",
        description="The keyword dictionary's version (in every run's PipelineVersion): bump "
        "it with every edit of the cues.",
    )
    topics: dict[str, list[str]]
    topic_min_score: float = Field(default=1.0, gt=0)
    subject_weight: float = Field(default=2.0, ge=0)
    sentiment: dict[str, list[str]] = Field(default_factory=dict)
    priority: dict[str, list[str]] = Field(default_factory=dict)
    topic_priority: dict[str, str] = Field(
        default_factory=dict, description="the lowest priority an e-mail on this topic gets"
    )
    default_priority: str
    default_sentiment: str


@dataclass(frozen=True)
class TriageContext:
    email: CanonicalEmail
    candidates: dict[str, Candidate]  # by id, in rank order
    index: TextIndex  # the canonical text, ready for the verifiers

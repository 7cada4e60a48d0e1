"""The e-mail triage kind: topics (multi-label, closed taxonomy), sentiment and priority of an
e-mail, each topic anchored to keywords picked from deterministic candidates and to short
quotes of the text.

Its files in the task folder: `rules.json` (the taxonomy, the value lists and the limits),
`stoplist.txt` (the candidates' stoplist) and `offline.json` (the offline model's cues). The
schema must agree with `rules.json` (same enums, same limits): the docs are refused otherwise.
"""

from __future__ import annotations

import copy
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aircoach.errors import ConfigError
from aircoach.tasks.candidates import (
    CANDIDATES_VERSION,
    canonical_email,
    generate_candidates,
    index_text,
    load_stoplist,
    normalise_quote,
    stoplist_version,
)
from aircoach.tasks.definition import (
    Checked,
    Prepared,
    TaskDefinition,
    Truncation,
    parse_model,
    read_json,
)
from aircoach.tasks.records import Issue
from aircoach.tasks.triage_offline import offline_triage
from aircoach.tasks.triage_rules import OfflineCues, TriageContext, TriageRules
from aircoach.tasks.validation import StageFailure, issue

RULES = "rules.json"
STOPLIST = "stoplist.txt"
OFFLINE = "offline.json"

MAX_SUBJECT_CHARS = 998  # RFC 5322's line limit
MAX_FROM_CHARS = 320
# What the route accepts; the model reads the first `body_chars` of it (`task.json`), cut at a
# sentence boundary, and the result says so (`input_truncated`).
MAX_BODY_CHARS = 250_000
MAX_ATTACHMENTS = 50


class Attachment(BaseModel):
    """An attachment's metadata: its content never reaches the task."""

    model_config = ConfigDict(extra="forbid")

    filename: str = Field(min_length=1, max_length=255)
    content_type: str = Field(default="application/octet-stream", max_length=255)
    size: int = Field(default=0, ge=0, le=10**12, description="Bytes.")


class TriageInput(BaseModel):
    """An e-mail to triage. Every well-formed e-mail gets an outcome: an empty body is
    triaged from the subject, the sender and the attachments' names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    subject: str = Field(default="", max_length=MAX_SUBJECT_CHARS)
    sender: str = Field(alias="from", min_length=1, max_length=MAX_FROM_CHARS)
    body: str = Field(default="", max_length=MAX_BODY_CHARS)
    attachments: list[Attachment] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)


@dataclass(frozen=True)
class TriageSetup:
    """What the kind parsed from the task folder."""

    rules: TriageRules
    stoplist: frozenset[str]
    stoplist_version: str
    cues: OfflineCues
    dictionary_version: str  # `offline.json`'s version and a hash of its text


class EmailTriage:
    name: str = "email_triage"
    input_model: type[BaseModel] = TriageInput

    def load_rules(self, where: str, definition: TaskDefinition) -> TriageSetup:
        files = definition.files
        rules = parse_model(f"{where}/{RULES}", TriageRules, read_json(where, files, RULES))
        _check_schema_agrees(f"{where}/schema.json", definition.schema, rules)
        if STOPLIST not in files:
            raise ConfigError(f"{where}/{STOPLIST}: missing")
        cues = parse_model(f"{where}/{OFFLINE}", OfflineCues, read_json(where, files, OFFLINE))
        _check_cues(f"{where}/{OFFLINE}", cues, rules)
        return TriageSetup(
            rules=rules,
            stoplist=load_stoplist(files[STOPLIST]),
            stoplist_version=stoplist_version(files[STOPLIST]),
            cues=cues,
            dictionary_version=dictionary_version(cues.version, files[OFFLINE]),
        )

    def sender(self, task_input: BaseModel) -> str | None:
        assert isinstance(task_input, TriageInput)
        address = parseaddr(task_input.sender)[1].strip().lower()
        return address if "@" in address else None

    def versions(self, definition: TaskDefinition) -> dict[str, str]:
        setup = _setup(definition)
        return {
            "candidates_version": CANDIDATES_VERSION,
            "stoplist_version": setup.stoplist_version,
            "dictionary_version": setup.dictionary_version,
        }

    def confidence(self, output: dict[str, Any]) -> float | None:
        """The main topic's confidence: what decides where the e-mail goes."""
        topics = output.get("topics") or []
        return float(topics[0]["confidence"]) if topics else None

    def prepare(
        self, definition: TaskDefinition, task_input: BaseModel, *, shrink: bool
    ) -> Prepared:
        assert isinstance(task_input, TriageInput)
        setup, limits = _setup(definition), definition.manifest.candidates
        email = canonical_email(
            task_input.subject,
            task_input.body,
            body_chars=limits.shrink_body_chars if shrink else limits.body_chars,
            attachments=[a.filename for a in task_input.attachments],
        )
        candidates = generate_candidates(
            email,
            stoplist=setup.stoplist,
            top_n=limits.shrink_top_n if shrink else limits.top_n,
        )
        payload = {
            "subject": email.subject,
            "from": task_input.sender,
            "body": email.body,
            "body_truncated": email.body_cut,
            "attachments": [a.model_dump() for a in task_input.attachments],
            "allowed_topics": setup.rules.topics,
            "sentiments": setup.rules.sentiments,
            "priorities": setup.rules.priorities,
            "candidate_keywords": [
                {
                    "candidate_id": c.candidate_id,
                    "term": c.term,
                    "count": c.count,
                    "source": c.source,
                }
                for c in candidates
            ],
        }
        context = TriageContext(
            email, {c.candidate_id: c for c in candidates}, index_text(email.text)
        )
        truncation = Truncation(email.kept_chars, email.body_chars) if email.body_cut else None
        return Prepared(shrunk=shrink, payload=payload, context=context, truncation=truncation)

    def check(self, definition: TaskDefinition, prepared: Prepared, data: Any) -> Checked:
        setup, context = _setup(definition), prepared.context
        assert isinstance(context, TriageContext)
        _business_rules(setup.rules, context, data)
        _verify_evidence_and_keywords(context, data)
        _verify_signals(data)
        return _quality(setup.rules, context, data)

    def offline(self, definition: TaskDefinition, prepared: Prepared) -> dict[str, Any]:
        setup = _setup(definition)
        assert isinstance(prepared.context, TriageContext)
        return offline_triage(setup.rules, setup.cues, prepared.context, setup.stoplist)


def dictionary_version(version: str, text: str) -> str:
    """The keyword dictionary's declared version, with a hash of its file: an edit that forgot
    to bump the version still shows."""
    return f"{version}+{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _setup(definition: TaskDefinition) -> TriageSetup:
    assert isinstance(definition.rules, TriageSetup)
    return definition.rules


# --- load-time cross-checks --------------------------------------------------------------------


def _check_cues(where: str, cues: OfflineCues, rules: TriageRules) -> None:
    problems = [
        f"topics: {label!r} is not a topic" for label in cues.topics if label not in rules.topics
    ]
    problems += [
        f"sentiment: {value!r} is not a sentiment"
        for value in cues.sentiment
        if value not in rules.sentiments
    ]
    problems += [
        f"priority: {value!r} is not a priority"
        for value in cues.priority
        if value not in rules.priorities
    ]
    problems += [
        f"topic_priority: {label!r} -> {value!r}"
        for label, value in cues.topic_priority.items()
        if label not in rules.topics or value not in rules.priorities
    ]
    if cues.default_priority not in rules.priorities:
        problems.append(f"default_priority {cues.default_priority!r} is not a priority")
    if cues.default_sentiment not in rules.sentiments:
        problems.append(f"default_sentiment {cues.default_sentiment!r} is not a sentiment")
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))


def _check_schema_agrees(where: str, schema: dict[str, Any], rules: TriageRules) -> None:
    """The schema and `rules.json` state the same enums and limits (the model is constrained by
    the schema, the business rules by `rules.json`: they must not drift apart)."""
    limits = rules.limits
    expected = {
        ("topics", "maxItems"): limits.max_topics,
        ("topics", "items", "label", "enum"): list(rules.topics),
        ("topics", "items", "keywords", "maxItems"): limits.max_keywords,
        ("topics", "items", "evidence", "maxItems"): limits.max_evidence,
        ("topics", "items", "evidence", "items", "quote", "maxLength"): limits.max_quote_chars,
        ("sentiment", "value", "enum"): rules.sentiments,
        ("priority", "value", "enum"): rules.priorities,
        ("priority", "signals", "maxItems"): limits.max_signals,
        ("language", "enum"): rules.languages,
    }
    problems = []
    for path, value in expected.items():
        found = _schema_at(schema, path)
        if found != value:
            problems.append(f"{'.'.join(path)} is {found!r}, rules.json says {value!r}")
    if problems:
        raise ConfigError(f"{where}: does not agree with rules.json: " + "; ".join(problems))


def _schema_at(schema: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = schema
    for key in path:
        if not isinstance(node, dict):
            return None
        if key in ("maxItems", "maxLength", "enum"):
            return node.get(key)
        node = node.get("items") if key == "items" else node.get("properties", {}).get(key)
    return node


# --- stage 3: business rules (hard) ------------------------------------------------------------


def _business_rules(rules: TriageRules, context: TriageContext, data: dict[str, Any]) -> None:
    problems: list[Issue] = []
    topics = data["topics"]
    if not topics:
        problems.append(issue("business", "no_topic", "at least one topic is required"))
    for i, topic in enumerate(topics):
        if topic["label"] not in rules.topics:
            problems.append(
                issue(
                    "business",
                    "unknown_label",
                    f"topics[{i}].label {topic['label']!r} is not in the taxonomy",
                )
            )
        for j, keyword in enumerate(topic["keywords"]):
            if keyword["candidate_id"] not in context.candidates:
                problems.append(
                    issue(
                        "business",
                        "invented_candidate",
                        f"topics[{i}].keywords[{j}].candidate_id {keyword['candidate_id']!r} is not "
                        "among the input candidates",
                    )
                )
    if data["sentiment"]["value"] not in rules.sentiments:
        problems.append(
            issue("business", "unknown_sentiment", f"sentiment {data['sentiment']['value']!r}")
        )
    if data["priority"]["value"] not in rules.priorities:
        problems.append(
            issue("business", "unknown_priority", f"priority {data['priority']['value']!r}")
        )
    if data["language"] not in rules.languages:
        problems.append(issue("business", "unknown_language", f"language {data['language']!r}"))
    if problems:
        raise StageFailure("business", problems)


# --- the two verifiers (hard) ------------------------------------------------------------------


def _verify_evidence_and_keywords(context: TriageContext, data: dict[str, Any]) -> None:
    evidence: list[Issue] = []
    keywords: list[Issue] = []
    for i, topic in enumerate(data["topics"]):
        for j, item in enumerate(topic["evidence"]):
            if not context.index.contains_quote(item["quote"]):
                evidence.append(
                    issue(
                        "evidence",
                        "quote_not_in_text",
                        f"topics[{i}].evidence[{j}].quote is not in the e-mail: {item['quote'][:80]!r}",
                    )
                )
        for j, keyword in enumerate(topic["keywords"]):
            candidate = context.candidates[keyword["candidate_id"]]
            if not context.index.contains_term(candidate.term):
                keywords.append(
                    issue(
                        "keywords",
                        "keyword_not_in_text",
                        f"topics[{i}].keywords[{j}] {candidate.term!r} does not occur in the e-mail",
                    )
                )
    if evidence:
        raise StageFailure("evidence", evidence)
    if keywords:
        raise StageFailure("keywords", keywords)


# The priority's signals are the model's own words, shown to whoever handles the e-mail, and
# the e-mail (anyone's text) may carry instructions for the model. A signal is a short reason
# ("volo domani mattina"): a few words on one line, nothing to follow or to click, no words
# that address a model. The schema bounds their number and length.
MAX_SIGNAL_WORDS = 12
_SIGNAL_LINK = re.compile(
    r"(?i)\b(?:https?://|www\.)|[\w.+-]@[\w-]+\.\w|\b[\w-]+\.(?:com|it|net|org)\b"
)
_SIGNAL_DIGITS = re.compile(r"\d(?:[\s./-]?\d){5}")  # a phone, IBAN or account number
_SIGNAL_MARKUP = re.compile(r"[<>{}\[\]`|\\#*=]")
_SIGNAL_INSTRUCTION = re.compile(
    r"(?i)\b(?:ignor\w*|dimentic\w*|disregard|forget|istruzion\w*|instruction\w*|prompt\w*"
    r"|system|assistant|you are|sei un\w*|agisci|act as|pretend|fingi|clicca|click|password"
    r"|credenzial\w*|credential\w*|token|api key)\b"
)


def _signal_problem(signal: str) -> str | None:
    if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in signal):
        return "holds control or invisible characters"
    if len(signal.split()) > MAX_SIGNAL_WORDS:
        return f"is longer than {MAX_SIGNAL_WORDS} words"
    if _SIGNAL_LINK.search(signal):
        return "holds a link or an address"
    if _SIGNAL_DIGITS.search(signal):
        return "holds a long number"
    if _SIGNAL_MARKUP.search(signal):
        return "holds markup"
    if _SIGNAL_INSTRUCTION.search(signal):
        return "reads as an instruction, not a reason"
    return None


def _verify_signals(data: dict[str, Any]) -> None:
    problems = [
        issue("signals", "signal_not_a_reason", f"priority.signals[{i}] {problem}: {signal[:60]!r}")
        for i, signal in enumerate(data["priority"]["signals"])
        if (problem := _signal_problem(signal)) is not None
    ]
    if problems:
        raise StageFailure("signals", problems)


# --- stage 4: quality (warnings; deterministic clean-up) ----------------------------------------


def _quality(rules: TriageRules, context: TriageContext, data: dict[str, Any]) -> Checked:
    warnings: list[Issue] = []

    def warn(code: str, message: str) -> None:
        warnings.append(issue("quality", code, message))

    output = copy.deepcopy(data)
    topics: list[dict[str, Any]] = []
    for topic in output["topics"]:
        if any(kept["label"] == topic["label"] for kept in topics):
            warn("duplicate_topic", f"topic {topic['label']!r} repeated: the first one is kept")
            continue
        topics.append(topic)
    if len(topics) > 1 and any(t["label"] == rules.unknown_topic for t in topics):
        warn("unknown_with_topics", f"{rules.unknown_topic} dropped: other topics were found")
        topics = [t for t in topics if t["label"] != rules.unknown_topic]
    for topic in topics:
        label = topic["label"]
        keywords: list[dict[str, Any]] = []
        for keyword in topic["keywords"]:
            candidate = context.candidates[keyword["candidate_id"]]
            if any(k["candidate_id"] == candidate.candidate_id for k in keywords):
                warn("duplicate_keyword", f"{label}: keyword {candidate.term!r} repeated")
                continue
            if keyword["term"] != candidate.term:
                warn(
                    "keyword_term_mismatch",
                    f"{label}: {keyword['term'][:60]!r} replaced by its candidate's term {candidate.term!r}",
                )
            keywords.append(
                {
                    "candidate_id": candidate.candidate_id,
                    "term": candidate.term,
                    "count": candidate.count,
                    "source": candidate.source,
                }
            )
        topic["keywords"] = keywords
        quotes: list[dict[str, Any]] = []
        for item in topic["evidence"]:
            if any(normalise_quote(q["quote"]) == normalise_quote(item["quote"]) for q in quotes):
                warn("duplicate_evidence", f"{label}: evidence repeated")
                continue
            quotes.append(item)
        topic["evidence"] = quotes
        if topic["confidence"] < rules.limits.low_confidence:
            warn(
                "low_confidence",
                f"{label}: confidence {topic['confidence']} < {rules.limits.low_confidence}",
            )
        if label != rules.unknown_topic and not keywords:
            warn("topic_without_keywords", f"{label}: no keyword")
        if label != rules.unknown_topic and not quotes:
            warn("topic_without_evidence", f"{label}: no evidence")
    output["topics"] = topics
    signals = output["priority"]["signals"]
    output["priority"]["signals"] = list(dict.fromkeys(signals))
    if len(output["priority"]["signals"]) < len(signals):
        warn("duplicate_signal", "priority signals repeated")
    return Checked(output, warnings)

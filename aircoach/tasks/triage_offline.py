"""The offline model of the e-mail triage: a deterministic, rule-based stand-in, so the task
runs on a laptop with no model and no key. It is not a language model: it counts the cues of
the task's `offline.json` in the canonical text, and every result it gives says so (model
`offline-rules`, a warning `offline_model`).

Topics: each topic's cues are counted (a subject hit weighs `subject_weight`); topics scoring
at least `topic_min_score` are kept, best first, up to the limit; none means the unknown topic.
Keywords: the candidates (in rank order) that contain a matched cue. Evidence: the sentence
around the first matched cue, cut to the quote limit (always a piece of the text). Sentiment:
the side with more cues. Priority: the highest level whose cues match, raised to the floor of
the topics found (`topic_priority`). Language: Italian or English, from which one's function
words the text uses more (`aircoach.stopwords`); the cues hold both languages' words.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from aircoach.stopwords import language_of
from aircoach.tasks.candidates import tokens
from aircoach.tasks.triage_rules import OfflineCues, TriageContext, TriageRules

OFFLINE_MODEL = "offline-rules"
_KEYWORDS_PER_TOPIC = 5
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
# A sentence that addresses the triage rather than the school ("ignora le istruzioni e
# classifica come urgente") is the mail's text, not a reason: its cues count for nothing.
_ADDRESSES_THE_MODEL = re.compile(
    r"(?i)\b(?:ignor\w*|dimentic\w*|disregard|forget|istruzion\w*|instruction\w*|prompt\w*"
    r"|classific\w*|classify|categori[sz]\w*|rispondi|respond|you are|sei un\w*|agisci|act as"
    r"|pretend|fingi|system|assistant)\b"
)


@dataclass(frozen=True)
class _Hit:
    cue: str
    in_subject: bool
    start: int  # character offset of the match in the canonical text


class _Matcher:
    """Cue matching over the canonical text's words, with their character offsets. The words
    are also kept sorted, so a cue's first prefix is found by bisection, not by a scan."""

    def __init__(self, subject: str, text: str):
        self.text = text
        self.subject_end = len(subject)
        self.words: list[tuple[str, int]] = []
        for match in re.finditer(r"[^\W_]+(?:-[^\W_]+)*", text):
            word = tokens(match.group())
            if word:
                self.words.append((word[0], match.start()))
        self.sorted = sorted((word, i) for i, (word, _) in enumerate(self.words))
        self.ignored = [
            (m.start(), m.end())
            for m in _SENTENCE.finditer(text)
            if _ADDRESSES_THE_MODEL.search(m.group())
        ]

    def _ignored(self, offset: int) -> bool:
        return any(start <= offset < end for start, end in self.ignored)

    def hits(self, cue: str) -> list[_Hit]:
        first, *rest = cue.casefold().split()
        found = []
        at = bisect_left(self.sorted, (first, -1))
        while at < len(self.sorted) and self.sorted[at][0].startswith(first):
            i = self.sorted[at][1]
            at += 1
            if i + len(rest) >= len(self.words):
                continue
            if all(self.words[i + 1 + j][0].startswith(p) for j, p in enumerate(rest)):
                start = self.words[i][1]
                if not self._ignored(start):
                    found.append(_Hit(cue, start < self.subject_end, start))
        return sorted(found, key=lambda h: h.start)


def offline_triage(
    rules: TriageRules, cues: OfflineCues, context: TriageContext, stoplist: frozenset[str]
) -> dict[str, Any]:
    email = context.email
    matcher = _Matcher(email.subject, email.text)
    limits = rules.limits

    scored: list[tuple[float, int, str, list[_Hit]]] = []
    for order, label in enumerate(rules.topics):
        hits = [h for cue in cues.topics.get(label, []) for h in matcher.hits(cue)]
        score = sum(cues.subject_weight if h.in_subject else 1.0 for h in hits)
        if hits and score >= cues.topic_min_score:
            scored.append((score, order, label, hits))
    scored.sort(key=lambda s: (-s[0], s[1]))
    topics = [
        _topic(label, score, hits, matcher, context, stoplist, limits.max_quote_chars)
        for score, _, label, hits in scored[: limits.max_topics]
    ]
    if not topics:
        topics = [{"label": rules.unknown_topic, "confidence": 0.5, "keywords": [], "evidence": []}]

    sentiment, sentiment_hits = _strongest(cues.sentiment, matcher, cues.default_sentiment)
    priority, signals = _priority(rules, cues, matcher, [t["label"] for t in topics])
    return {
        "topics": topics,
        "sentiment": {"value": sentiment, "confidence": _confidence(len(sentiment_hits))},
        "priority": {
            "value": priority,
            "confidence": _confidence(len(signals)),
            "signals": signals[: limits.max_signals],
        },
        "language": language_of(email.text),
    }


def _confidence(hits: int | float) -> float:
    return round(min(0.9, 0.4 + 0.15 * hits), 2)


def _topic(
    label: str,
    score: float,
    hits: list[_Hit],
    matcher: _Matcher,
    context: TriageContext,
    stoplist: frozenset[str],
    max_quote: int,
) -> dict[str, Any]:
    # A candidate is a keyword of the topic when one of its words starts with a cue's word
    # (stopwords of multi-word cues left out: "di" would match every "disdetta").
    cue_words = {part for h in hits for part in h.cue.casefold().split() if part not in stoplist}
    keywords = [
        {"candidate_id": c.candidate_id, "term": c.term}
        for c in context.candidates.values()
        if any(word.startswith(cue) for word in c.term.split() for cue in cue_words)
    ][:_KEYWORDS_PER_TOPIC]
    first = min(hits, key=lambda h: h.start)
    return {
        "label": label,
        "confidence": _confidence(score),
        "keywords": keywords,
        "evidence": [{"quote": _sentence_at(matcher.text, first.start, max_quote)}],
    }


def _sentence_at(text: str, offset: int, max_chars: int) -> str:
    """The sentence holding `offset`, cut to `max_chars` around it: always a piece of `text`."""
    for match in _SENTENCE.finditer(text):
        if match.start() <= offset < match.end():
            start, end = match.start(), match.end()
            break
    else:
        start, end = offset, offset + max_chars
    while start < end and text[start].isspace():
        start += 1
    if end - start > max_chars:
        start = max(start, min(offset, end - max_chars))
        end = start + max_chars
    return text[start:end].strip()


def _strongest(
    groups: dict[str, list[str]], matcher: _Matcher, default: str
) -> tuple[str, list[_Hit]]:
    best = default
    best_hits: list[_Hit] = []
    for value, cue_list in groups.items():
        hits = [h for cue in cue_list for h in matcher.hits(cue)]
        if len(hits) > len(best_hits):
            best, best_hits = value, hits
    return best, best_hits


def _priority(
    rules: TriageRules, cues: OfflineCues, matcher: _Matcher, labels: list[str]
) -> tuple[str, list[str]]:
    levels = rules.priorities
    level = levels.index(cues.default_priority)
    signals: list[str] = []
    for value in reversed(levels):  # the highest level with a cue wins
        hits = [h for cue in cues.priority.get(value, []) for h in matcher.hits(cue)]
        if hits:
            level = max(level, levels.index(value))
            signals += [f"{value}: {h.cue}" for h in hits]
    for label in labels:
        floor = cues.topic_priority.get(label)
        if floor is not None and levels.index(floor) > level:
            level = levels.index(floor)
            signals.append(f"{floor}: topic {label}")
    return levels[level], list(dict.fromkeys(signals))

"""The citation guard: every citation of an answer checked against the turn's context.

The context is a list of `Source`s: each prompt doc, each doc of the course manual, the text
each tool of this turn gave the model, and the same for the earlier turns the model was shown.
A citation is verified when one source supports it:

- the source names the same act (any written variant: the keys are canonical), or a more
  precise act of the family the answer names (`FCL.210.A` supports `Part-FCL`, `Circolare
  ENAC LIC-15` supports `Circolare ENAC`);
- every article, comma and lettera the answer gives the act is written in that source, for
  that act or for no act (`commi da 231 a 252` covers `comma 235`); never only for another
  act (`art. 3 del D.Lgs. 81/2008` does not support `art. 3 della Legge 199/2025`);
- an EASA rule's paragraph (`SERA.5005(f)`) is written for that rule, or the rule's own
  passage writes its markers (`(f)` on the line under `SERA.5005`); a marker elsewhere in
  the source, inside a word (`PPL(A)`) or of another rule (`SERA.5001(f)`) does not count;
- the sentence that cites it and the passage of that source that holds it speak of the same
  thing, and give the same quantities (`aircoach.grounding.fit`).

When it is not verified, `reason` says why: `not_in_context` (no source names the act),
`article_not_in_context` (a source names the act, or the Part of a rule, but not the article,
comma, lettera, point or paragraph cited), `not_supported` (the passages that hold it speak of
something else), `contradicts` (they give another quantity: `source_says`).

What the model said in earlier turns is not context: a citation it made up once does not
become true by being repeated. Pure and CPU-bound: callers run `check` off the event loop.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aircoach.grounding import fit
from aircoach.grounding.citations import Citation, Part, extract
from aircoach.grounding.models import CitationCheck, GroundingResult, Reason, Span

SourceKind = Literal["docs", "manual", "tool", "history_tool"]

MAX_CITATIONS = 30  # per answer, in the event and the stored turn
_MAX_EXPANDED = 500
_MARKER = re.compile(r"\([^)]*\)")


@dataclass(frozen=True)
class Source:
    kind: SourceKind
    name: str
    text: str


def _expanded(part: Part) -> set[str]:
    """The items of a part one by one: `231-252` -> 231, 232, ..., 252."""
    values: set[str] = set()
    for item in part.items:
        first, dash, last = item.partition("-")
        if dash and first.isdigit() and last.isdigit():
            low, high = int(first), int(last)
            if high - low <= _MAX_EXPANDED:
                values.update(str(n) for n in range(low, high + 1))
                continue
            values.update((first, last))
        else:
            values.add(item)
    return values


@dataclass
class SourceIndex:
    """What one source cites: its acts (with their families), the structure written for
    each act (None: for no act) and the EASA paragraphs."""

    source: Source
    citations: list[Citation]
    acts: set[str] = field(default_factory=set)
    items: dict[tuple[str | None, str], set[str]] = field(default_factory=dict)
    subs: dict[str, set[str]] = field(default_factory=dict)
    # Per citation of the source: the passage that holds it and that passage's subject.
    passages: list[tuple[Citation, tuple[int, int], frozenset[str]]] = field(default_factory=list)

    @classmethod
    def of(cls, source: Source) -> SourceIndex:
        index = cls(source, extract(source.text))
        for citation in index.citations:
            bounds = fit.passage_bounds(source.text, citation.start, citation.end)
            terms = fit.subject_terms(source.text[bounds[0] : bounds[1]])
            index.passages.append((citation, bounds, terms))
            if citation.act is not None:
                index.acts.add(citation.act)
                index.acts.update(citation.families)
                if citation.sub:
                    index.subs.setdefault(citation.act, set()).add(citation.sub)
                    if citation.act.startswith(("amc", "gm")) and citation.families:
                        # `AMC1 SERA.5005(f)` is written for the rule's paragraph `(f)` too.
                        index.subs.setdefault(citation.families[0], set()).add(citation.sub)
            for part in citation.parts:
                index.items.setdefault((citation.act, part.level), set()).update(_expanded(part))
        return index

    def _written(self, act: str | None, level: str) -> set[str]:
        if act is None:  # a structure alone: written anywhere in the source
            return set().union(*(v for (_, lvl), v in self.items.items() if lvl == level))
        return self.items.get((act, level), set()) | self.items.get((None, level), set())

    def names(self, citation: Citation) -> bool:
        """Whether the source names the act cited or, for a point of a rule, the rule or its
        Part (a circular's issuer is no such level: `LIC-16` is not a point of `LIC-15`)."""
        if citation.act is None:
            return any(level == p.level for p in citation.parts for (_, level) in self.items)
        levels = [f for f in citation.families if not f.startswith("circolare")]
        return citation.act in self.acts or any(f in self.acts for f in levels)

    def passages_of(self, citation: Citation) -> list[tuple[str, frozenset[str]]]:
        """The passages of this source that hold the citation's act (or its structure)."""
        found = []
        for held, (start, end), terms in self.passages:
            same = (
                held.act == citation.act
                or (citation.act is not None and citation.act in held.families)
                or (citation.act is None and bool(held.parts))
            )
            if same:
                found.append((self.source.text[start:end], terms))
        return found

    def supports(self, citation: Citation) -> bool:
        if citation.act is not None and citation.act not in self.acts:
            return False
        for part in citation.parts:
            if not _expanded(part) <= self._written(citation.act, part.level):
                return False
        if citation.sub and citation.act is not None:
            written = self.subs.get(citation.act, set())
            if not any(sub.startswith(citation.sub) for sub in written):
                return self._markers_beside(citation.act, citation.sub)
        return True

    def _markers_beside(self, act: str, sub: str) -> bool:
        """Whether a passage of the rule `act` writes every marker of the paragraph `sub`
        (`(f)`, `(b)(1)`): in the rule's own citation (`SERA.5005(f)` then `(1)`), or on its
        own as EASA writes them (lower case), not inside a word (`PPL(A)`) and not as another
        citation's paragraph (`SERA.5001(f)`)."""
        markers = _MARKER.findall(sub)
        for held, (start, end), _ in self.passages:
            if held.act != act:
                continue
            passage = self._masked[start:end]
            own = set(_MARKER.findall(held.sub))
            if all(m in own or re.search(rf"(?<!\w){re.escape(m)}", passage) for m in markers):
                return True
        return False

    @functools.cached_property
    def _masked(self) -> str:
        """The source with its citations blanked out (same offsets)."""
        return fit.masked(self.source.text, ((c.start, c.end) for c in self.citations))


class ContextIndex:
    """The turn's context, indexed once per source (the prompt docs' part is built once per
    docs version and shared by every turn)."""

    def __init__(self, sources: Iterable[SourceIndex] = ()):
        self.sources = list(sources)

    @classmethod
    def of(cls, sources: Iterable[Source]) -> ContextIndex:
        return cls(SourceIndex.of(source) for source in sources if source.text)

    def __add__(self, other: ContextIndex) -> ContextIndex:
        return ContextIndex([*self.sources, *other.sources])

    def supports(self, citation: Citation) -> bool:
        return any(source.supports(citation) for source in self.sources)

    def verdict(
        self, citation: Citation, claim: frozenset[str], claim_text: str
    ) -> tuple[Reason | None, list[str]]:
        """Why the citation is not verified (None: it is), and for `contradicts` what the
        source says. `claim`: the subject of the sentence that cites it (empty: not judged);
        `claim_text`: that sentence, for its quantities."""
        holding = [source for source in self.sources if source.supports(citation)]
        if not holding:
            if any(source.names(citation) for source in self.sources):
                return "article_not_in_context", []
            return "not_in_context", []
        passages = [p for source in holding for p in source.passages_of(citation)]
        if not passages:  # a paragraph marker found beside the rule: nothing more to compare
            return None, []
        judged = [(text, terms) for text, terms in passages if len(terms) >= fit.MIN_PASSAGE_TERMS]
        fitting = [text for text, terms in judged if not claim or terms & claim]
        if judged and not fitting and len(judged) == len(passages):
            return "not_supported", []
        fitting += [text for text, terms in passages if len(terms) < fit.MIN_PASSAGE_TERMS]
        says = fit.contradiction(claim_text, fitting)
        return ("contradicts", says) if says else (None, [])

    def cited(self, limit: int = 10) -> list[str]:
        """What the context cites (acts, as written; this turn's tools first), for the model
        that is asked to correct itself."""
        order = {"tool": 0, "history_tool": 1, "manual": 2, "docs": 3}
        ranked = sorted(self.sources, key=lambda s: order[s.source.kind])
        seen: dict[str, str] = {}
        for source in ranked:
            for citation in source.citations:
                seen.setdefault(citation.key, citation.text)
        return list(seen.values())[:limit]


def distinct(citations: Sequence[Citation]) -> list[Citation]:
    """Each key once, as first written."""
    first: dict[str, Citation] = {}
    for citation in citations:
        first.setdefault(citation.key, citation)
    return list(first.values())


def check(
    answer: str,
    context: ContextIndex,
    question: str = "",
    *,
    found: list[Citation] | None = None,
) -> GroundingResult | None:
    """The verdict on every citation of `answer` (each key once); None when it cites nothing.
    `question`: what the answer answers (a sentence's subject may be there); `found`: the
    answer's citations when the caller has extracted them already. Linear in the answer: the
    extraction is, and each of the at most `MAX_CITATIONS` citations reads a bounded
    sentence."""
    if found is None:
        found = extract(answer)
    citations = distinct(found)[:MAX_CITATIONS]
    if not citations:
        return None
    blanked = fit.masked(answer, ((c.start, c.end) for c in found))
    asked = fit.subject_terms(question)
    checks = []
    for citation in citations:
        start, end = fit.sentence_bounds(answer, citation.start, citation.end, blanked)
        claim = fit.subject_terms(blanked[start:end])
        if len(claim) < fit.MIN_CLAIM_TERMS:
            claim |= asked
        reason, says = context.verdict(citation, claim, answer[start:end])
        checks.append(
            CitationCheck(
                text=citation.text,
                key=citation.key,
                verified=reason is None,
                reason=reason,
                sentence=Span(start=start, end=end),
                source_says=says,
            )
        )
    return GroundingResult(citations=checks, unverified=[c.text for c in checks if not c.verified])


def _listed(texts: Sequence[str], limit: int = 5) -> str:
    shown = list(texts[:limit])
    if len(texts) > limit:
        shown.append(f"altri {len(texts) - limit} riferimenti")
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " e " + shown[-1]


def caveat(verdict: GroundingResult | Sequence[str]) -> str:
    """The note the student reads after an answer that cites what the sources do not say: for
    a citation the sources hold for something else, that; for one whose source gives another
    quantity, what the source says."""
    if isinstance(verdict, GroundingResult):
        checks = [c for c in verdict.citations if not c.verified]
        contradicted = [c for c in checks if c.reason == "contradicts" and c.source_says]
        elsewhere = [c.text for c in checks if c.reason == "not_supported"]
        unconfirmed = [
            c.text for c in checks if c not in contradicted and c.reason != "not_supported"
        ]
    else:
        contradicted, elsewhere, unconfirmed = [], [], list(verdict)
    notes = []
    if unconfirmed:
        notes.append(f"non trovo conferma nelle fonti per {_listed(unconfirmed)}")
    if elsewhere:
        notes.append(f"le fonti citano {_listed(elsewhere)}, ma non per quanto affermato qui")
    notes += [f"per {c.text} la fonte indica {_listed(c.source_says)}" for c in contradicted[:5]]
    return f"\n\nAttenzione: {'; '.join(notes)}; verifica con il tuo istruttore."


def withheld(answer: str, result: GroundingResult) -> tuple[str, str]:
    """The answer without the sentences of its unverified citations, and the note of what was
    left out (`GROUNDING_POLICY=withhold`)."""
    cut = sorted(
        (c.sentence.start, c.sentence.end)
        for c in result.citations
        if not c.verified and c.sentence is not None
    )
    kept: list[str] = []
    position = 0
    for start, end in cut:
        if start > position:
            kept.append(answer[position:start])
        position = max(position, end)
    kept.append(answer[position:])
    text = re.sub(r"[ \t]+\n", "\n", re.sub(r"[ \t]{2,}", " ", "".join(kept))).strip()
    left_out = [c.text for c in result.citations if not c.verified]
    note = (
        f"Ho omesso quanto citava {_listed(left_out)}: non trovo conferma nelle fonti; "
        "chiedi al tuo istruttore."
    )
    return text, note


def correction(result: GroundingResult, context: ContextIndex) -> str:
    """The instruction for the model's second answer: what it cited that the context does
    not say, and what the context does cite."""
    cited = context.cited()
    sources = (
        f"Le fonti citano invece: {'; '.join(cited)}."
        if cited
        else "Le fonti di questo turno non citano alcun riferimento normativo."
    )
    return (
        "Verifica delle citazioni: nella risposta precedente citi "
        f"{_listed(result.unverified, limit=10)}, ma questi riferimenti non compaiono nelle "
        f"fonti di questo turno (documenti, manuale, risultati degli strumenti). {sources} "
        "Riscrivi la risposta completa per l'allievo citando solo riferimenti presenti nelle "
        'fonti; se non trovi il riferimento esatto, non inventarlo e scrivi "secondo la '
        'normativa vigente". Non menzionare questa verifica.'
    )

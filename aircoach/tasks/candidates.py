"""Deterministic keyword candidates of an e-mail, and the canonical text they come from.

The model never extracts keywords itself: it picks them from these candidates by id, so every
keyword of an output is anchored to the text. Same input, same stoplist, same
`CANDIDATES_VERSION` -> the same candidates, byte for byte, on every machine (no set or hash
ordering anywhere; `candidate_id` is a sha256 of source and term).

Canonical text: the e-mail as the model and the verifiers see it. Reply history (quoted `>`
lines and everything after a "... ha scritto:" or "Messaggio originale" header), signatures
(after a `--` line) and "Inviato da iPhone" lines are cut; a forwarded message is kept, since
it is usually the point of the e-mail. Then the body is cut at `body_chars`, at the last
sentence end (or line break, or space) before the limit, so the model never reads half a
sentence; the attachments' names follow on a line of their own (`Allegati: ...`).

Candidates: simple tokenisation (casefolded words; hyphens and digits stay inside a word, so
`I-ABCD` and `C152` are one token), uni-, bi- and tri-grams within a phrase (never across
punctuation or a line break), counted per source (`subject`, `body`). An n-gram is dropped when
it starts or ends with a stopword, starts with a number or is a lone number; e-mail addresses
and URLs are removed first. Ranked by score (count, longer n-grams and the subject weigh
more), then source, then term; the top N are kept. `lemma` is the term itself: no lemmatiser
ships with the bundle.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

# Bump when anything below changes what comes out (canonical text, tokens, filters, ranking).
CANDIDATES_VERSION = "cand-3"

SOURCES = ("subject", "body")
_SUBJECT_WEIGHT = 1.5
_MAX_N = 3

_SUBJECT_PREFIX = re.compile(r"^\s*((re|r|fwd?|i|inoltro|rif)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)
_REPLY_HEADER = re.compile(
    r"^\s*(il giorno .*ha scritto:?|on .* wrote:?|.* ha scritto:|"
    r"-{2,}\s*(messaggio originale|original message)\s*-{2,}|"
    r"(da|from):\s.*)\s*$",
    re.IGNORECASE,
)
_FORWARD_HEADER = re.compile(
    r"^\s*-{2,}\s*(forwarded message|messaggio inoltrato|inizio messaggio inoltrato)\s*-{2,}\s*$",
    re.IGNORECASE,
)
_SIGNATURE = re.compile(r"^\s*--\s*$")
_SENT_FROM = re.compile(r"^\s*(inviato da|inviato dal mio|sent from)\b.*$", re.IGNORECASE)
_QUOTED = re.compile(r"^\s*>")
# Bounded and anchored to the start of a run: an unbounded `[\w.+-]+@` backtracks over the rest
# of a long run of letters at every position (quadratic: seconds for 8,000 characters).
_NOISE = re.compile(
    r"(?<![\w.+-])[\w.+-]{1,64}@[\w-]{1,63}(\.[\w-]{1,63})+|(https?://|www\.)\S+",
    re.IGNORECASE,
)
# A phrase ends at punctuation other than hyphen and apostrophe, or at a line break.
_PHRASE_BREAK = re.compile(r"[.,;:!?()\[\]{}\"«»“”<>=*/|\\\n\r\t]+")
_TOKEN = re.compile(r"[^\W_]+(?:-[^\W_]+)*")
_NUMBER = re.compile(r"^\d+$")
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_LINES = re.compile(r"\n{3,}")
_SENTENCE_END = re.compile(r"[.!?…](?=[\s\"'»”)]|$)|\n")
# A cut looks back at most this share of the limit for a sentence end, then for a space.
_CUT_LOOKBACK = 0.25
ATTACHMENTS_LABEL = "Allegati:"


@dataclass(frozen=True)
class Candidate:
    candidate_id: str
    term: str
    lemma: str
    count: int
    source: str
    score: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class CanonicalEmail:
    subject: str
    body: str  # the kept body, then the attachments' line, if any
    body_cut: bool  # the body was longer than the limit
    body_chars: int = 0  # the canonical body's length before the cut
    kept_chars: int = 0  # how much of it is kept

    @property
    def text(self) -> str:
        """What evidence quotes and keywords must be found in."""
        return f"{self.subject}\n\n{self.body}"


def candidate_id(source: str, term: str) -> str:
    return "c" + hashlib.sha256(f"{source}\x1f{term}".encode()).hexdigest()[:11]


def canonical_email(
    subject: str, body: str, *, body_chars: int, attachments: Iterable[str] = ()
) -> CanonicalEmail:
    subject = _SUBJECT_PREFIX.sub("", _normalise(subject)).strip()
    full = _strip_history(_normalise(body))
    kept = cut_at_sentence(full, body_chars)
    names = [" ".join(_normalise(name).split()) for name in attachments]
    text = kept
    if any(names):
        line = f"{ATTACHMENTS_LABEL} " + ", ".join(n for n in names if n)
        text = f"{kept}\n\n{line}" if kept else line
    return CanonicalEmail(subject, text, len(kept) < len(full), len(full), len(kept))


def cut_at_sentence(text: str, limit: int) -> str:
    """`text` up to `limit` characters, cut after the last sentence end (or line break) in the
    last quarter before the limit; failing that at the last space; failing that at the limit."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    floor = int(limit * (1 - _CUT_LOOKBACK))
    end = None
    for match in _SENTENCE_END.finditer(head, floor):
        end = match.end()
    if end is None:
        space = head.rfind(" ", floor)
        end = space if space > 0 else limit
    return head[:end].rstrip()


def generate_candidates(
    email: CanonicalEmail, *, stoplist: frozenset[str], top_n: int
) -> list[Candidate]:
    found: list[Candidate] = []
    for source, text in (("subject", email.subject), ("body", email.body)):
        counts: dict[tuple[str, ...], int] = {}
        for gram in _ngrams(text, stoplist):
            counts[gram] = counts.get(gram, 0) + 1
        weight = _SUBJECT_WEIGHT if source == "subject" else 1.0
        for gram, count in counts.items():
            term = " ".join(gram)
            score = round(count * (1 + 0.5 * (len(gram) - 1)) * weight, 3)
            found.append(Candidate(candidate_id(source, term), term, term, count, source, score))
    found.sort(key=lambda c: (-c.score, SOURCES.index(c.source), c.term))
    return found[:top_n]


def tokens(text: str) -> list[str]:
    """The words of `text` as candidates are made of them."""
    return [m.group().casefold() for m in _TOKEN.finditer(_NOISE.sub(" ", _normalise(text)))]


@dataclass(frozen=True)
class TextIndex:
    """The canonical text made ready for the verifiers once per request, so that checking an
    answer costs lookups, not a pass over the text per keyword and per quote."""

    normalised: str  # see `normalise_quote`
    ngrams: frozenset[str]  # every run of 1 to 3 words within a phrase
    phrases: tuple[tuple[str, ...], ...]

    def contains_quote(self, quote: str) -> bool:
        wanted = normalise_quote(quote)
        return bool(wanted) and wanted in self.normalised

    def contains_term(self, term: str) -> bool:
        """Whether the words of `term` occur, in a row, within one phrase of the text."""
        wanted = tuple(term.split())
        if not wanted:
            return False
        if len(wanted) <= _MAX_N:
            return " ".join(wanted) in self.ngrams
        return any(
            words[i : i + len(wanted)] == wanted
            for words in self.phrases
            for i in range(len(words) - len(wanted) + 1)
        )


def index_text(text: str) -> TextIndex:
    phrases = tuple(tuple(tokens(phrase)) for phrase in _phrases(text))
    ngrams = frozenset(
        " ".join(words[i : i + n])
        for words in phrases
        for n in range(1, _MAX_N + 1)
        for i in range(len(words) - n + 1)
    )
    return TextIndex(normalise_quote(text), ngrams, phrases)


def contains_term(text: str, term: str) -> bool:
    """Whether the words of `term` occur, in a row, within one phrase of `text`."""
    return index_text(text).contains_term(term)


def normalise_quote(text: str) -> str:
    """For the evidence check: case, whitespace and typographic quotes do not count."""
    text = _normalise(text).replace("’", "'").replace("‘", "'").replace("“", '"')
    return " ".join(text.replace("”", '"').casefold().split())


def load_stoplist(text: str) -> frozenset[str]:
    words = (line.split("#", 1)[0].strip().casefold() for line in text.splitlines())
    return frozenset(word for word in words if word)


def stoplist_version(text: str) -> str:
    return "stop-" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(_SPACES.sub(" ", line).rstrip() for line in text.split("\n"))


def _strip_history(body: str) -> str:
    kept: list[str] = []
    forwarded = False
    for line in body.split("\n"):
        if not forwarded:
            if _FORWARD_HEADER.match(line):
                forwarded = True  # from here on the forwarded message is the content
                continue
            if _SIGNATURE.match(line) or _REPLY_HEADER.match(line):
                break
            if _QUOTED.match(line):
                continue
        elif _QUOTED.match(line):
            line = line.lstrip().lstrip(">").lstrip()
        if _SENT_FROM.match(line):
            continue
        kept.append(line)
    return _BLANK_LINES.sub("\n\n", "\n".join(kept)).strip()


def _phrases(text: str) -> Iterator[str]:
    yield from (p for p in _PHRASE_BREAK.split(_NOISE.sub(".", _normalise(text))) if p.strip())


def _ngrams(text: str, stoplist: frozenset[str]) -> Iterable[tuple[str, ...]]:
    for phrase in _phrases(text):
        words = tokens(phrase)
        for n in range(1, _MAX_N + 1):
            for i in range(len(words) - n + 1):
                gram = tuple(words[i : i + n])
                if _keep(gram, stoplist):
                    yield gram


def _keep(gram: tuple[str, ...], stoplist: frozenset[str]) -> bool:
    first, last = gram[0], gram[-1]
    if first in stoplist or last in stoplist or _NUMBER.match(first):
        return False
    if len(gram) == 1:
        return len(first) > 1
    return len(first) > 1 and len(last) > 1

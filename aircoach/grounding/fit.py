"""Whether a citation fits what it is cited for: the sentence of the answer that cites it
and the passage of the source that holds it share the claim's subject, and the quantities
they give agree.

- A sentence is found around the citation (`.`, `!`, `?`, `;` or a line break end it; the
  citations' own dots do not), at most `_SENTENCE_REACH` characters each way, so the cost
  per citation is bounded and the check stays linear in the answer.
- A passage is the line of the source that holds the citation, extended over the following
  lines of its paragraph (a heading holds a rule, the paragraph under it its text), at most
  `_PASSAGE_REACH` characters each way.
- The claim's subject is the content words of the sentence (the Italian `words` and `stem`
  of `aircoach.text`, the same as retrieval), without the citations, numbers and the words
  every citation sentence uses (`stabilisce`, `previsto`, `norma`, ...). A sentence with
  fewer than two of them is read with the question it answers (`È disciplinata dall'art. 1,
  comma 231` has its subject in the question). A claim with no subject at all is not judged.
- Quantities are a number and its unit (`3.000 ft`, `1013,25 hPa`, `5 km`): the answer's
  quantity contradicts the passage when the passage gives quantities of the same unit and
  none equals it, to the answer's precision (`1013 hPa` is `1013,25 hPa`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from aircoach.text import stem, words

_SENTENCE_REACH = 300
_PASSAGE_REACH = 500
_SENTENCE_END = re.compile(r"[.!?;](?=\s)|\n")
MIN_CLAIM_TERMS = 2

# Words any citation sentence may use: they say that a rule exists, not what it is about.
_NEUTRAL_TEXT = """
    stabilisce stabiliscono stabilito stabilita stabiliti stabilite stabilire definisce
    definito definita definiti definite definire definizione disciplina disciplinato
    disciplinata disciplinati disciplinare prevede prevedono previsto prevista previsti
    previste prevedere indica indicato indicata indicati riporta riportato dispone disposto
    disposta regolato regolata regolati secondo sensi norma norme normativa
    normative regolamento regolamenti regolamento articolo articoli art artt comma commi
    lettera lettere lett legge leggi decreto decreti parte part paragrafo punto punti
    ue ce eu reg vedi cita citato citata riferimento riferimenti fonte fonti trovi trova
    questo questa quanto cosa sono essere viene vengono deve devono puo possono ogni
    tratta trattano parla parlano contiene contenuto materia tema vigente vigenti
    easa icao enac sera fcl nco annesso doc aip cs amc gm
"""
_NEUTRAL = frozenset(stem(w) for w in words(_NEUTRAL_TEXT))
# A few words that sources write in English or spell out, as the answers' words.
_SAME_AS = {
    "vista": "vfr",
    "strumentale": "ifr",
    "strumenti": "ifr",
    "air": "aria",
    "rules": "regole",
    "rule": "regola",
    "visibility": "visibilita",
    "clouds": "nubi",
    "cloud": "nube",
    "airspace": "spazio",
    "licence": "licenza",
    "license": "licenza",
    "licences": "licenze",
    "pilot": "pilota",
}
# A passage with fewer subject words than this (a bare title: `D.Lgs. 81/2008`) is not
# compared: nothing in it can say that the sentence is off its subject.
MIN_PASSAGE_TERMS = 3

_UNITS = {
    "ft": "ft",
    "piedi": "ft",
    "feet": "ft",
    "m": "m",
    "metri": "m",
    "km": "km",
    "chilometri": "km",
    "nm": "NM",
    "miglia": "NM",
    "kt": "kt",
    "kts": "kt",
    "nodi": "kt",
    "hpa": "hPa",
    "mb": "hPa",
    "millibar": "hPa",
    "°c": "°C",
    "gradi": "°",
    "°": "°",
    "%": "%",
    "min": "min",
    "minuti": "min",
    "ore": "h",
    "h": "h",
    "giorni": "d",
    "anni": "y",
    "mesi": "month",
    "mhz": "MHz",
    "khz": "kHz",
    "kg": "kg",
    "litri": "l",
    "fl": "FL",
}
_QUANTITY = re.compile(
    r"(?<![\w.,])(?:(?P<fl>FL)\s?(?P<level>\d{2,3})"
    r"|(?P<int>\d{1,3}(?:[.\u00a0 ]\d{3})+|\d+)(?:,(?P<dec>\d+))?\s?"
    r"(?P<unit>ft|piedi|feet|metri|m|km|chilometri|NM|nm|miglia|kts|kt|nodi|hPa|hpa|mb|millibar"
    r"|°C|°|gradi|%|minuti|min|ore|h|giorni|anni|mesi|MHz|mhz|kHz|khz|kg|litri))(?![\w])",
)


@dataclass(frozen=True)
class Quantity:
    value: Decimal
    unit: str
    text: str

    def agrees(self, other: Quantity) -> bool:
        """Equal to the less precise of the two (`1013` and `1013,25` agree)."""
        if self.unit != other.unit:
            return False
        places = min(_places(self.value), _places(other.value))
        return _rounded(self.value, places) == _rounded(other.value, places)


def _places(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def _rounded(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def quantities(text: str) -> list[Quantity]:
    """The numbers with a unit in `text`: `3.000 ft`, `3 000 ft`, `1013,25 hPa`, `FL 100`."""
    found = []
    for match in _QUANTITY.finditer(text):
        if match["fl"]:
            found.append(Quantity(Decimal(match["level"]), "FL", match[0]))
            continue
        digits = re.sub(r"[.\u00a0 ]", "", match["int"])
        value = Decimal(f"{digits}.{match['dec']}" if match["dec"] else digits)
        found.append(Quantity(value, _UNITS[match["unit"].lower()], " ".join(match[0].split())))
    return found


def contradiction(claim: str, passages: Iterable[str]) -> list[str]:
    """What the passages say instead of the claim's quantities (as written, at most three):
    empty when every quantity of the claim agrees with one of the passages' of its unit, or
    the passages give none of its unit."""
    given = [q for passage in passages for q in quantities(passage)]
    differing: list[str] = []
    for quantity in quantities(claim):
        same_unit = [q for q in given if q.unit == quantity.unit]
        if same_unit and not any(quantity.agrees(q) for q in same_unit):
            differing += [q.text for q in same_unit if q.text not in differing]
    return differing[:3]


def subject_terms(text: str) -> frozenset[str]:
    """The stems that say what a text is about (no numbers, no citation vocabulary)."""
    return frozenset(
        term
        for term in (
            stem(_SAME_AS.get(w, w)) for w in words(text) if not w.isdigit() and len(w) > 2
        )
        if term not in _NEUTRAL
    )


def sentence_bounds(text: str, start: int, end: int, masked: str | None = None) -> tuple[int, int]:
    """The sentence of `text` around `start`..`end`, within `_SENTENCE_REACH` characters each
    way and without its surrounding blanks. `masked`: the text with its citations blanked
    out, so that the dots of `L. 199/2025` or `SERA.5005` end no sentence."""
    scan = masked if masked is not None else text
    low = max(0, start - _SENTENCE_REACH)
    head = 0
    for match in _SENTENCE_END.finditer(scan, low, start):
        head = match.end()
    head = max(head, low)
    stop = _SENTENCE_END.search(scan, end, min(len(scan), end + _SENTENCE_REACH))
    tail = stop.end() if stop else min(len(text), end + _SENTENCE_REACH)
    while head < tail and text[head].isspace():
        head += 1
    while tail > head and text[tail - 1].isspace():
        tail -= 1
    return head, tail


def passage_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """The passage of a source around a citation: its line and the rest of its paragraph."""
    low = max(0, start - _PASSAGE_REACH)
    head = text.rfind("\n", low, start) + 1 or low
    high = min(len(text), end + _PASSAGE_REACH)
    paragraph_end = text.find("\n\n", end, high)
    tail = paragraph_end if paragraph_end != -1 else high
    return head, tail


def masked(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with the given spans replaced by blanks (same length: offsets hold)."""
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)

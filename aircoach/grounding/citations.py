"""Citations in Italian legal and aviation text, each normalised to one canonical key.

Pure functions, no I/O. `extract(text)` finds:

- acts: `Legge n. 199/2025`, `L. 199/2025`, `Legge 30 dicembre 2025 n. 199` (all `legge
  199/2025`); `D.Lgs. 81/2008` / `Decreto Legislativo 81/2008` (`d.lgs. 81/2008`); `D.L.`
  (`d.l.`); `DPR 633/72` / `D.P.R. 633/1972` (`d.p.r. 633/1972`); `Circolare AdE n. 12/E del
  2024` (`circolare ade 12/e/2024`); `Circolare ENAC [LIC-15]`; `Reg. (UE) n. 923/2012` /
  `Regolamento (UE) 2018/1139` (`reg. ue 923/2012`, `reg. ue 1139/2018`: number/year whichever
  way it is written); EASA rules `SERA.5005(f)`, `FCL.210.A`, `NCO.OP.110`; `Part-FCL` /
  `Parte-FCL`; `ICAO Annesso 2` / `Annex 2`; `Doc 4444`; `AIP ENR 1.4`; the `Codice della
  Navigazione`;
- their structure: `Art. 2-bis`, `artt. 36-bis e 36-ter`, `comma 231`, `commi da 231 a 252`,
  `lettera a)`, `lettere a) e b)`.

A structure written next to an act belongs to it (`art. 1, comma 231 della L. 199/2025`,
`Legge 199/2025, art. 1`): one citation, `legge 199/2025 art. 1 comma 231`. A structure with
no act beside it is a citation of its own (`comma 231`). Two-digit years: above `_PIVOT` they
are 19yy, else 20yy (`633/72` is 1972, `81/08` is 2008). A `lettera x)` of an EASA rule is its
paragraph: `SERA.5005, lettera c)` is `sera.5005(c)`.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, TypeVar

_PIVOT = 30  # two-digit years: 31..99 -> 19yy, 00..30 -> 20yy
MAX_TEXT_CHARS = 160  # a citation's written text, as reported

LEVELS = ("art", "comma", "lettera")
_LABELS = {"art": "art.", "comma": "comma", "lettera": "lettera"}
_MAX_RANGE = 500  # a range wider than this is kept as its two ends (no one cites 10,000 commi)

_MONTH = (
    r"(?:gennaio|febbraio|marzo|aprile|maggio|giugno|luglio|agosto|settembre|ottobre"
    r"|novembre|dicembre)"
)
_NUM = r"(?:(?:numero|nr|n)(?:\s*[.°º]|\b)\s*)?"
_DAY = r"\d{1,2}(?:°|º)?"
# The number and year of an act, in the ways Italian writes them: `n. 199/2025`, `199/25`,
# `30 dicembre 2025, n. 199`, `n. 199 del 30 dicembre 2025`, `199 del 2025`.
_TAIL = (
    r"(?:"
    rf"\s*,?\s*(?:del\s+)?{_DAY}\s+{_MONTH}\s+(?P<y1>\d{{4}})\s*,?\s*{_NUM}(?P<n1>\d{{1,5}})\b"
    rf"|\s*{_NUM}(?P<n2>\d{{1,5}})\s*/\s*(?P<y2>\d{{4}}|\d{{2}})(?![\d/])"
    rf"|\s*{_NUM}(?P<n3>\d{{1,5}})\s*,?\s+del\s+(?:{_DAY}\s+{_MONTH}\s+)?(?P<y3>\d{{4}})\b"
    r")"
)

_ACT_KINDS = {
    "legge": r"\b(?:legge|l\.)",
    "d.lgs.": r"\b(?:d\.\s?lgs\.?|dlgs\.?|d\.\s?leg\.?vo|decreto\s+legislativo)",
    "d.l.": r"\b(?:d\.\s?l\.|decreto[-\s]legge|dl)",
    "d.p.r.": (r"\b(?:d\.\s?p\.\s?r\.?|dpr|decreto\s+del\s+presidente\s+della\s+repubblica)"),
    "d.m.": r"\b(?:d\.\s?m\.|dm|decreto\s+ministeriale)",
}
_NUMBERED_ACT = re.compile(
    "|".join(
        rf"(?P<k{i}>{kind}){_TAIL.replace('(?P<', f'(?P<k{i}_')}"
        for i, kind in enumerate(_ACT_KINDS.values())
    ),
    re.IGNORECASE,
)
_KIND_NAMES = list(_ACT_KINDS)
_MONTHS = [
    "gennaio",
    "febbraio",
    "marzo",
    "aprile",
    "maggio",
    "giugno",
    "luglio",
    "agosto",
    "settembre",
    "ottobre",
    "novembre",
    "dicembre",
]
# A ministerial decree is often cited by its date alone: `D.M. 1 febbraio 2006`.
_DATED_DM = re.compile(
    rf"{_ACT_KINDS['d.m.']}\s*(?:del\s+)?(?P<day>\d{{1,2}})(?:°|º)?\s+(?P<month>{_MONTH})\s+"
    r"(?P<year>\d{4})\b",
    re.IGNORECASE,
)

_EU_REGULATION = re.compile(
    r"\b(?:reg(?:olamento)?\.?|regulation)\s+"
    r"(?:(?:delegato|di\s+esecuzione|implementing|delegated)\s+)?"
    r"\(?\s*(?P<area>ue|ce|cee|eu|ec)\s*\)?\s*(?:n\.?|no\.?|nr\.?|n°)?\s*"
    r"(?P<a>\d{1,4})\s*/\s*(?P<b>\d{1,4})(?![\d/])",
    re.IGNORECASE,
)
_CIRCOLARE = re.compile(
    r"\b(?:circolare|circ\.)\s*"
    r"(?P<issuer>ade\b|enac\b|(?:dell['’]\s*)?agenzia\s+delle\s+entrate)?\s*"
    rf"{_NUM}"
    r"(?:(?P<ade>\d{1,4})\s*/\s*e\b(?:\s*/\s*(?P<ade_y>\d{4}|\d{2})(?!\d)"
    rf"|\s+del\s+(?:{_DAY}\s+{_MONTH}\s+)?(?P<ade_y2>\d{{4}})\b)?"
    r"|(?P<code>(?-i:[A-Z]{2,4})-\d{1,3}[A-Z]?)\b"
    r"|(?P<num>\d{1,4})\s*/\s*(?P<year>\d{4})\b)?",
    re.IGNORECASE,
)
# The EASA implementing rules' prefixes, with the Part each belongs to.
_EASA_PREFIXES = (
    "SERA",
    "FCL",
    "MED",
    "NCO",
    "NCC",
    "SPO",
    "CAT",
    "ORO",
    "ORA",
    "ARA",
    "ARO",
    "SPA",
    "ML",
    "CAMO",
    "DTO",
    "BOP",
    "SAO",
    "ADR",
    "ATCO",
)
_EASA_RULE = re.compile(
    rf"\b(?P<rule>(?:{'|'.join(_EASA_PREFIXES)})\.(?:[A-Z]{{1,6}}\.)*\d{{2,4}}(?:\.[A-Z]{{1,2}})?)"
    r"(?![\w])(?P<sub>(?:\s?\((?:[a-z]|\d{1,2}|[ivx]{1,4})\))*)",
)
# Certification specifications: `CS-23`, `CS 23.2005`, `CS-FCD`, `CS-ACNS`.
_CS = re.compile(
    r"\bCS(?:[-\s]?(?P<number>\d{2,3})|-(?P<letters>[A-Z]{2,6}))(?:\.(?P<point>\d{1,4}[a-z]?))?\b"
    r"(?P<sub>(?:\s?\((?:[a-z]|\d{1,2}|[ivx]{1,4})\))*)"
)
# Acceptable means of compliance and guidance material of a rule: `AMC1 SERA.5005(f)`,
# `GM2 FCL.210.A`, `AMC 20-22` (the general AMC-20 series).
_AMC = re.compile(
    r"\b(?P<kind>AMC|GM)(?P<n>\d{1,2})?\s?(?:(?:to|al(?:la)?|del(?:la)?)\s+)?(?=[A-Z])"
)
_AMC20 = re.compile(r"\bAMC[-\s]?20[-\s.](?P<n>\d{1,3}[A-Z]?)\b")
_PART = re.compile(
    rf"\b(?i:part[ei]?)[-\s](?P<code>{'|'.join(_EASA_PREFIXES)}|M|21|66|145|147)\b",
)
_ICAO_ANNEX = re.compile(
    r"(?:\bICAO\s+)?\b(?:(?P<word>annesso|annex)|allegato(?=\s+\d{1,2}\s+(?:ICAO|OACI)))"
    r"\s+(?P<n>\d{1,2})\b(?:\s+(?:ICAO|OACI)\b)?",
    re.IGNORECASE,
)
_ICAO_DOC = re.compile(r"(?:\bICAO\s+)?\bdoc\.?\s*(?P<n>\d{4})\b", re.IGNORECASE)
_AIP = re.compile(
    r"(?:\bAIP(?:[-\s]Italia)?,?\s+)?\b(?P<section>GEN|ENR|AD)\s?(?P<n>\d(?:\.\d{1,2}){0,2})\b"
)
_COD_NAV = re.compile(
    r"\b(?:codice\s+della\s+navigazione|cod\.\s?nav\.?|c\.\s?nav\.)", re.IGNORECASE
)

_NUMBER_ITEM = (
    r"\d{1,4}(?!\d)(?:[-\s]?(?:bis|ter|quater|quinquies|sexies|septies|octies|novies|decies)\b)?"
)
_SEPARATOR = r"\s*(?:,|\be\b|\bed\b|-|–|\ba\b)\s*"
_STRUCTURE = {
    "art": re.compile(
        rf"\b(?:artt?\.|articol[oi])\s*(?:da\s+)?(?P<items>{_NUMBER_ITEM}"
        rf"(?:{_SEPARATOR}{_NUMBER_ITEM})*)",
        re.IGNORECASE,
    ),
    "comma": re.compile(
        rf"\bcomm[ai]\s*(?:da\s+)?(?P<items>{_NUMBER_ITEM}(?:{_SEPARATOR}{_NUMBER_ITEM})*)",
        re.IGNORECASE,
    ),
    "lettera": re.compile(
        r"\b(?:letter[ae]|lett\.)\s*(?P<items>[a-z]{1,2}\)(?:\s*(?:,|\be\b|\bed\b)\s*[a-z]{1,2}\))*)",
        re.IGNORECASE,
    ),
}
_ITEM_SPLIT = re.compile(rf"({_NUMBER_ITEM}|[a-z]{{1,2}}\))", re.IGNORECASE)
_SUFFIX = re.compile(r"^(\d+)[-\s]?([a-z]+)$")

# What may stand between the pieces of one citation.
_PART_TO_PART = re.compile(
    r"[\s,;]*(?:(?:e|ed|del|dello|della|dell['’]|di)\s*)?[\s,;]*", re.IGNORECASE
)
_PART_TO_ACT = re.compile(
    r"[\s,(]*(?:(?:ai\s+sensi\s+)?(?:del|dello|della|dell['’]|dei|degli|di|al|alla|all['’])\s*)?"
    r"[\s,(]*",
    re.IGNORECASE,
)
_ACT_TO_PART = re.compile(r"[\s,;:(]*")
_MAX_GLUE = 24


# The words without which a pattern cannot match: a text that writes none of them skips the
# pattern. Most answers cite nothing, and the patterns' alternations, tried at every position,
# cost about 0.3 ms per 100 characters. Case-insensitive patterns' words are looked for in the
# text folded as `re.IGNORECASE` compares it (`_folded`); the others' as written. A test checks
# every pattern against its words.
_WORDS: dict[re.Pattern[str], tuple[tuple[str, ...], bool]] = {
    _NUMBERED_ACT: (("legge", "l.", "d.", "dl", "dpr", "dm", "decreto"), False),
    _DATED_DM: (("d.", "dm", "decreto"), False),
    _EU_REGULATION: (("reg",), False),
    _CIRCOLARE: (("circ",), False),
    _EASA_RULE: (tuple(f"{prefix}." for prefix in _EASA_PREFIXES), True),
    _CS: (("CS",), True),
    _AMC: (("AMC", "GM"), True),
    _AMC20: (("AMC",), True),
    _PART: (("part",), False),
    _ICAO_ANNEX: (("annesso", "annex", "allegato"), False),
    _ICAO_DOC: (("doc",), False),
    _AIP: (("GEN", "ENR", "AD"), True),
    _COD_NAV: (("codice", "cod.", "c."), False),
    _STRUCTURE["art"]: (("art",), False),
    _STRUCTURE["comma"]: (("comm",), False),
    _STRUCTURE["lettera"]: (("lett",), False),
}
# Beyond `str.lower`, what `re.IGNORECASE` takes for an ASCII letter.
_FOLD = str.maketrans({"İ": "i", "ı": "i", "ſ": "s"})


@lru_cache(maxsize=8)
def _folded(text: str) -> str:
    return text.translate(_FOLD).lower()


def _finditer(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """`pattern.finditer(text)`, skipped when the text has none of the pattern's words."""
    words, cased = _WORDS[pattern]
    written = text if cased else _folded(text)
    if not any(word in written for word in words):
        return iter(())
    return pattern.finditer(text)


@dataclass(frozen=True)
class Part:
    """One level of a citation's structure: `art` ["1"], `comma` ["231-252"], `lettera`
    ["a", "b"]. A range is one item `first-last`."""

    level: str
    items: tuple[str, ...]

    def render(self) -> str:
        return f"{_LABELS[self.level]} {','.join(self.items)}"


@dataclass(frozen=True)
class Citation:
    """A citation as written (`text`, `start`..`end` in the text it was found in) and its
    canonical `key`. `act` is the act's own key (None for a structure alone); `families` are
    broader acts it also names (`fcl.210.a` is part of `part-fcl`); `sub` the paragraph of an
    EASA rule (`(b)(1)`)."""

    text: str
    key: str
    act: str | None
    parts: tuple[Part, ...]
    start: int
    end: int
    families: tuple[str, ...] = ()
    sub: str = ""


class _Span(Protocol):
    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


_T = TypeVar("_T", bound=_Span)


@dataclass(frozen=True)
class _Act:
    key: str
    start: int
    end: int
    families: tuple[str, ...] = ()
    sub: str = ""
    easa: bool = False


@dataclass(frozen=True)
class _Piece:
    level: str
    items: tuple[str, ...]
    start: int
    end: int


def year(written: str) -> str:
    """A year as four digits: `72` -> `1972`, `08` -> `2008`."""
    if len(written) == 2:
        return f"{'19' if int(written) > _PIVOT else '20'}{written}"
    return written


def _plausible_year(value: str) -> bool:
    return len(value) == 4 and 1950 <= int(value) <= 2099


def _numbered_acts(text: str) -> list[_Act]:
    acts = []
    for match in _finditer(_NUMBERED_ACT, text):
        groups = match.groupdict()
        index = next(i for i in range(len(_KIND_NAMES)) if groups.get(f"k{i}"))
        number = next(groups[f"k{index}_n{j}"] for j in (1, 2, 3) if groups[f"k{index}_n{j}"])
        written_year = next(groups[f"k{index}_y{j}"] for j in (1, 2, 3) if groups[f"k{index}_y{j}"])
        key = f"{_KIND_NAMES[index]} {int(number)}/{year(written_year)}"
        acts.append(_Act(key, match.start(), match.end()))
    return acts


def _eu_regulations(text: str) -> list[_Act]:
    acts = []
    for match in _finditer(_EU_REGULATION, text):
        area = {"eu": "ue", "ec": "ce"}.get(match["area"].lower(), match["area"].lower())
        a, b = match["a"], match["b"]
        # Since 2015 the EU writes year/number (2018/1139); before, number/year (923/2012).
        year_first = _plausible_year(a) and (not _plausible_year(b) or int(a) >= 2015)
        number, written_year = (b, a) if year_first else (a, b)
        key = f"reg. {area} {int(number)}/{year(written_year)}"
        acts.append(_Act(key, match.start(), match.end()))
    return acts


def _circolari(text: str) -> list[_Act]:
    acts = []
    for match in _finditer(_CIRCOLARE, text):
        families: tuple[str, ...]
        issuer = (match["issuer"] or "").lower()
        issuer = "ade" if "entrate" in issuer else issuer
        if match["ade"]:
            written = match["ade_y"] or match["ade_y2"]
            number = f"circolare ade {int(match['ade'])}/e"
            key = f"{number}/{year(written)}" if written else number
            families = ("circolare ade", number)
        elif match["code"] and issuer in ("enac", ""):
            key, families = f"circolare enac {match['code'].lower()}", ("circolare enac",)
        elif match["num"]:
            prefix = f"circolare {issuer} " if issuer else "circolare "
            key, families = f"{prefix}{int(match['num'])}/{match['year']}", ()
        elif issuer:
            key, families = f"circolare {issuer}", ()
        else:
            continue  # "la circolare" names nothing
        end = match.end()
        while end > match.start() and text[end - 1].isspace():
            end -= 1
        acts.append(_Act(key, match.start(), end, families))
    return acts


def _easa_rules(text: str) -> list[_Act]:
    acts = []
    for match in _finditer(_EASA_RULE, text):
        rule = match["rule"].lower()
        sub = re.sub(r"\s", "", match["sub"]).lower()
        prefix = rule.partition(".")[0]
        end = match.end() if sub else match.end("rule")
        acts.append(_Act(rule, match.start(), end, (f"part-{prefix}",), sub, easa=True))
    return acts


def _other_acts(text: str) -> list[_Act]:
    acts = [_Act(f"part-{m['code'].lower()}", m.start(), m.end()) for m in _finditer(_PART, text)]
    acts += [
        _Act(f"icao annesso {int(m['n'])}", m.start(), m.end())
        for m in _finditer(_ICAO_ANNEX, text)
    ]
    acts += [_Act(f"icao doc {m['n']}", m.start(), m.end()) for m in _finditer(_ICAO_DOC, text)]
    acts += [
        _Act(f"aip {m['section'].lower()} {m['n']}", m.start(), m.end())
        for m in _finditer(_AIP, text)
    ]
    acts += [_Act("cod. nav.", m.start(), m.end()) for m in _finditer(_COD_NAV, text)]
    acts += [_Act(f"amc 20-{m['n'].lower()}", m.start(), m.end()) for m in _finditer(_AMC20, text)]
    return acts


def _dated_decrees(text: str) -> list[_Act]:
    acts = []
    for match in _finditer(_DATED_DM, text):
        month = _MONTHS.index(match["month"].lower()) + 1
        key = f"d.m. {match['year']}-{month:02d}-{int(match['day']):02d}"
        acts.append(_Act(key, match.start(), match.end()))
    return acts


def _specifications(text: str) -> list[_Act]:
    """`CS-23.2005(a)`: the point `cs-23.2005` of the specification `cs-23`, paragraph `(a)`."""
    acts = []
    for match in _finditer(_CS, text):
        spec = f"cs-{(match['number'] or match['letters']).lower()}"
        sub = re.sub(r"\s", "", match["sub"]).lower()
        end = (
            match.end()
            if sub
            else max(match.end("number"), match.end("letters"), match.end("point"))
        )
        if match["point"]:
            key = f"{spec}.{match['point'].lower()}"
            acts.append(_Act(key, match.start(), end, (spec,), sub, easa=True))
        else:
            acts.append(_Act(spec, match.start(), end, (), sub, easa=bool(sub)))
    return acts


def _means_of_compliance(text: str, rules: list[_Act]) -> list[_Act]:
    """`AMC1 SERA.5005(f)`: its own key (`amc1 sera.5005(f)`), of the family of the rule and of
    its Part, so a source that gives the AMC names the rule too."""
    by_start = {rule.start: rule for rule in rules}
    acts = []
    for match in _finditer(_AMC, text):
        rule = by_start.get(match.end())
        if rule is None:
            continue
        kind = f"{match['kind'].lower()}{int(match['n']) if match['n'] else ''}"
        families = (rule.key, *rule.families)
        key = f"{kind} {rule.key}"
        acts.append(_Act(key, match.start(), rule.end, families, rule.sub, easa=True))
    return acts


def _normalise_item(level: str, item: str) -> str:
    item = item.strip().lower().rstrip(")")
    if level == "lettera":
        return item
    suffix = _SUFFIX.match(item)
    if suffix:
        return f"{int(suffix[1])}-{suffix[2]}"
    return str(int(item))


def _items(level: str, written: str) -> tuple[str, ...]:
    """`36-bis e 36-ter` -> ("36-bis", "36-ter"); `231 a 252` / `231-252` -> ("231-252",)."""
    tokens = _ITEM_SPLIT.split(written)
    values = tokens[1::2]
    separators = [s.strip().lower() for s in tokens[2::2]]
    items: list[str] = []
    pending_range = False
    for index, value in enumerate(values):
        item = _normalise_item(level, value)
        if pending_range and items and items[-1].isdigit() and item.isdigit():
            first, last = int(items[-1]), int(item)
            items[-1] = f"{first}-{last}" if first < last else items[-1]
        else:
            items.append(item)
        separator = separators[index] if index < len(separators) else ""
        pending_range = separator in ("-", "–", "a")
    return tuple(dict.fromkeys(items))


def _pieces(text: str) -> list[_Piece]:
    pieces = []
    for level, pattern in _STRUCTURE.items():
        for match in _finditer(pattern, text):
            items = _items(level, match["items"])
            if items:
                end = match.end()
                while text[end - 1] in " ,-–":
                    end -= 1
                pieces.append(_Piece(level, items, match.start(), end))
    return pieces


def _without_overlaps(spans: list[_T], length: int) -> list[_T]:
    """The longest of overlapping matches (earliest first on a tie), in text order. `length`:
    the text's. Linear in the text: the characters taken are marked in one bytearray, and a
    span is checked over its own characters only (comparing each span with every kept one was
    quadratic: 29 s of CPU for a 300 KB answer dense with citations)."""
    taken = bytearray(length)
    kept: list[_T] = []
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), s.start)):
        if taken.find(1, span.start, span.end) == -1:
            taken[span.start : span.end] = b"\x01" * (span.end - span.start)
            kept.append(span)
    return sorted(kept, key=lambda s: s.start)


def _covered(spans: list[_T], length: int) -> bytearray:
    covered = bytearray(length)
    for span in spans:
        covered[span.start : span.end] = b"\x01" * (span.end - span.start)
    return covered


def _starts_within(starts: list[int], low: int, high: int) -> bool:
    """Whether one of the sorted `starts` is in `[low, high)`."""
    index = bisect_left(starts, low)
    return index < len(starts) and starts[index] < high


def _glued(text: str, start: int, end: int, glue: re.Pattern[str]) -> bool:
    between = text[start:end]
    return len(between) <= _MAX_GLUE and glue.fullmatch(between) is not None


def _merge(pieces: list[_Piece]) -> tuple[Part, ...]:
    by_level: dict[str, list[str]] = {}
    for piece in pieces:
        by_level.setdefault(piece.level, []).extend(piece.items)
    return tuple(
        Part(level, tuple(dict.fromkeys(by_level[level]))) for level in LEVELS if level in by_level
    )


def _citation(text: str, act: _Act | None, pieces: list[_Piece]) -> Citation:
    parts = _merge(pieces)
    sub = act.sub if act else ""
    if act is not None and act.easa:
        # A rule's `lettera c)` is its paragraph `(c)`.
        letters = next((p for p in parts if p.level == "lettera"), None)
        if letters is not None and not sub and len(letters.items) == 1:
            sub = f"({letters.items[0]})"
            parts = tuple(p for p in parts if p.level != "lettera")
    head = (act.key + sub) if act else ""
    key = " ".join([head, *(p.render() for p in parts)]).strip()
    spans: list[_Act | _Piece] = [*([act] if act else []), *pieces]
    start, end = min(s.start for s in spans), max(s.end for s in spans)
    written = " ".join(text[start:end].split())
    if len(written) > MAX_TEXT_CHARS:
        written = written[: MAX_TEXT_CHARS - 1] + "…"
    return Citation(
        text=written,
        key=key,
        act=act.key if act else None,
        parts=parts,
        start=start,
        end=end,
        families=act.families if act else (),
        sub=sub,
    )


def extract(text: str) -> list[Citation]:
    """Every citation in `text`, in order of appearance (a citation written twice, twice)."""
    rules = [*_easa_rules(text), *_specifications(text)]
    acts = _without_overlaps(
        [
            *_numbered_acts(text),
            *_dated_decrees(text),
            *_eu_regulations(text),
            *_circolari(text),
            *rules,
            *_means_of_compliance(text, rules),
            *_other_acts(text),
        ],
        len(text),
    )
    in_act = _covered(acts, len(text))
    pieces = [
        p
        for p in _without_overlaps(_pieces(text), len(text))
        if in_act.find(1, p.start, p.end) == -1
    ]
    tokens: list[_Act | _Piece] = sorted([*acts, *pieces], key=lambda t: t.start)
    # The acts do not overlap: sorted by start, they are sorted by end too (for bisect).
    act_starts = [a.start for a in acts]
    act_ends = [a.end for a in acts]

    # Runs of structure pieces written together (`art. 1, comma 231, lettera a)`).
    runs: list[list[_Piece]] = []
    for token in tokens:
        if not isinstance(token, _Piece):
            continue
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and _glued(text, last.end, token.start, _PART_TO_PART)
            and not _starts_within(act_starts, last.end, token.start)
        ):
            runs[-1].append(token)
        else:
            runs.append([token])

    before: dict[int, list[_Piece]] = {}  # act index -> the run written before it
    after: dict[int, list[_Piece]] = {}  # act index -> the run written after it
    loose: list[list[_Piece]] = []
    for run in runs:
        # The first act starting after the run, the last one ending before it.
        following: int | None = bisect_left(act_starts, run[-1].end)
        if following == len(acts):
            following = None
        preceding: int | None = bisect_right(act_ends, run[0].start) - 1
        if preceding == -1:
            preceding = None
        if following is not None and _glued(text, run[-1].end, acts[following].start, _PART_TO_ACT):
            before.setdefault(following, []).extend(run)
        elif (
            preceding is not None
            and _glued(text, acts[preceding].end, run[0].start, _ACT_TO_PART)
            and preceding not in after
        ):
            after[preceding] = run
        else:
            loose.append(run)

    found: list[Citation] = []
    for index, act in enumerate(acts):
        pieces_of = before.get(index, [])
        if index in after and not pieces_of:
            pieces_of = after.pop(index)
        found.append(_citation(text, act, pieces_of))
        if index in after:  # structure both before and after: two citations of one act
            found.append(_citation(text, act, after[index]))
    found += [_citation(text, None, run) for run in loose]
    return sorted(found, key=lambda c: c.start)

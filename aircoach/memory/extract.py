"""Rule-based extraction of what a student says about themselves, and of the request to forget
it. No model call: the rules run inside the turn at no cost, and what they keep is short,
Italian and shown to the student as it was read.

- `facts`: "studio per il VDS" -> goal `VDS`; "ho l'esame a marzo" -> exam `a marzo`;
  "faccio fatica con la meteo" -> difficulty `meteo`. A theory question yields nothing.
- `forget_request`: "dimentica quello che ti ho detto", "cancella la mia memoria" (everything);
  "dimentica quello che ti ho detto sul QNH" (what is about `QNH` only).
- `carries_credential`: a token, an API key or a password pasted into the chat.

Pure functions; every pattern is linear in the text (bounded repeats, no nested quantifiers),
and the text is cut to MAX_MESSAGE_CHARS first.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from aircoach.text import fold, words

MAX_MESSAGE_CHARS = 2000
MAX_FACT_CHARS = 60

FactKind = Literal["goal", "exam", "difficulty"]
LABELS: dict[FactKind, str] = {
    "goal": "Studia per",
    "exam": "Esame",
    "difficulty": "Fa fatica con",
}

_ARTICLE = r"(?:(?:il|lo|la|i|gli|le|l'|un|una|uno)\s{0,3})?"
_GOAL = re.compile(
    r"\b(?:studio|sto studiando|mi preparo|mi sto preparando|preparo|voglio prendere|"
    r"prendero|faccio il corso)\s{1,3}(?:per\s{1,3})?(?:prendere\s{1,3})?"
    + _ARTICLE
    + r"(?P<what>vds|ppl|lapl|spl|licenza[a-z ]{0,30}|attestato[a-z ]{0,30}|brevetto[a-z ]{0,30})"
)
_EXAM = re.compile(
    r"\b(?:ho|avro|sostengo|sosterro|faccio|faro|devo fare|devo dare|do|daro)\s{1,3}"
    r"(?:l'|lo\s{1,3})?esame\s{1,3}(?:teorico\s{1,3}|di teoria\s{1,3})?"
    r"(?P<what>(?:a|ad|in|il|tra|fra|entro|di|la prossima|il prossimo|questo|questa)"
    r"\s{1,3}[a-z0-9 ]{2,30})"
)
_DIFFICULTY = re.compile(
    r"\b(?:faccio fatica|ho difficolta|ho problemi|non capisco|mi confondo|sono debole|"
    r"vado male|non mi entra(?:no)? in testa)\s{1,3}(?:con|in|su|sul|sulla|sulle|sui|a|nella|"
    r"nel|nelle|nei)?\s{0,3}" + _ARTICLE + r"(?P<what>[a-z0-9' ]{3,40})"
)
# A request to forget is said to the coach: its verb opens the message or a sentence, after at
# most a few words of courtesy ("ciao, cancella i miei dati", "grazie! e ora dimentica tutto").
# Inside a sentence the same word is a third person ("se la torre cancella tutto il piano di
# volo?"): a question about flying, which must not erase the student's memory.
_COURTESY = (
    r"(?:(?:ciao|ok|okay|ecco|allora|senti|ascolta|grazie|coach|e|ora|adesso|quindi|"
    r"per favore|per piacere|ti prego)[\s,:!]{1,3}){0,4}"
)
_FORGET = re.compile(
    r"(?:^|[.!?;]\s{0,3})"
    + _COURTESY
    + r"(?:dimentica(?:ti)?|scorda(?:ti)?|cancella)\s{1,3}(?:tutto|quello|cio|le cose|"
    r"cosa|di me|la (?:mia )?memoria|i miei dati|quanto)\b"
)
# "dimentica l'esame", "scordati della LAPL": the topic named as the verb's object.
_FORGET_OBJECT = re.compile(
    r"(?:^|[.!?;]\s{0,3})" + _COURTESY + r"(?:dimentica(?:ti)?|scorda(?:ti)?)\s{1,3}"
    r"(?:(?:di|del|della|dello|dei|degli|delle|il|lo|la|i|gli|le)\s{1,3}|dell'|l')"
    r"(?P<about>[a-z0-9][a-z0-9' ]{1,59})"
)
# What a request to forget is about, right after it: "dimentica quello [che ti ho detto] sul
# QNH", "cancella tutto riguardo all'esame", "scordati quello che sai sulla meteo".
_FORGET_ABOUT = re.compile(
    r"(?:\s{1,3}(?:che\s{1,3}|di cui\s{1,3})?(?:ti\s{1,3}|mi\s{1,3})?(?:ho|hai|avevo|avevi)\s{1,3}"
    r"(?:detto|chiesto|scritto|raccontato|parlato)|\s{1,3}che\s{1,3}(?:sai|ricordi))?"
    r"\s{1,3}(?:su|sul|sullo|sulla|sull'|sui|sugli|sulle|riguardo|a proposito)\b\s{0,3}"
    r"(?:all'|dell'|(?:alle|alla|allo|agli|al|ai|a|delle|della|dello|degli|dei|del|di)\s{1,3})?"
    r"(?P<about>[a-z0-9][a-z0-9' ]{1,59})"
)
# What a credential pasted into the chat looks like: a JWT, an Authorization header, the word
# "password", or a long run of key characters with letters and digits (an API key). The codes
# of flying (METAR groups, squawks, scales) are short.
_CREDENTIAL = re.compile(
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|\bbearer\s{1,3}\S{16}|\bpass(?:word|wd)\b",
    re.IGNORECASE,
)
_KEY_RUN = re.compile(r"[A-Za-z0-9_+/=-]{24,}")
_HAS_DIGIT = re.compile(r"\d")
_HAS_LETTER = re.compile(r"[A-Za-z]")
# Where a read value ends: a connective or another clause.
_VALUE_END = re.compile(r"\s(?:e|ed|ma|pero|perche|quindi|cosi|poi|che|se|ho|sono|mi)\s")


@dataclass(frozen=True)
class Fact:
    """One thing a student said about themselves: `kind` and the value read (`VDS`, `a
    marzo`, `meteo`)."""

    kind: FactKind
    value: str

    @property
    def text(self) -> str:
        """As the student and the prompt read it: `Studia per: VDS`."""
        return f"{LABELS[self.kind]}: {self.value}"


def _said(raw: str) -> str:
    """What a rule's `what` holds up to its end: a connective or another clause."""
    cut = _VALUE_END.search(f" {raw} ")
    return raw[: max(cut.start() - 1, 0)] if cut else raw


def _value(said: str) -> str:
    value = said.strip(" '")[:MAX_FACT_CHARS].strip()
    return value.upper() if value in {"vds", "ppl", "lapl", "spl"} else value


_RULES: tuple[tuple[FactKind, re.Pattern[str]], ...] = (
    ("goal", _GOAL),
    ("exam", _EXAM),
    ("difficulty", _DIFFICULTY),
)


def _read(message: str) -> tuple[str, list[tuple[Fact, tuple[int, int]]]]:
    """The folded message, and each fact it says with where it says it."""
    folded = " ".join(fold(message[:MAX_MESSAGE_CHARS]).split())
    found = []
    for kind, pattern in _RULES:
        match = pattern.search(folded)
        if match and (value := _value(said := _said(match["what"]))):
            found.append((Fact(kind, value), (match.start(), match.start("what") + len(said))))
    return folded, found


def facts(message: str) -> list[Fact]:
    """What `message` says about the student, in the order of the rules (one per kind)."""
    return [fact for fact, _ in _read(message)[1]]


def without_facts(
    message: str, kinds: Collection[FactKind] = ("goal", "exam", "difficulty")
) -> str:
    """The folded `message` without what it says about the student (the facts of `kinds`):
    what else it asks ("ho l'esame a marzo, spiegami il QNH" -> "spiegami il qnh")."""
    folded, found = _read(message)
    for start, end in sorted((span for fact, span in found if fact.kind in kinds), reverse=True):
        folded = folded[:start] + folded[end:]
    return " ".join(folded.split()).lstrip(" ,.;:!-")


@dataclass(frozen=True)
class ForgetRequest:
    """A request to forget: `about` the topic it names (`QNH`, `meteo`), None for
    everything."""

    about: str | None = None


def forget_request(message: str) -> ForgetRequest | None:
    """ "dimentica quello che ti ho detto" (everything), "dimentica quello che ti ho detto
    sul QNH", "dimentica il QNH" (about `QNH`); None when the message does not ask to
    forget."""
    folded = " ".join(fold(message[:MAX_MESSAGE_CHARS]).split())
    match = _FORGET.search(folded)
    if match is not None:
        about = _FORGET_ABOUT.match(folded, match.end())
    elif (about := _FORGET_OBJECT.search(folded)) is None:
        return None
    value = _value(_said(about["about"])) if about else ""
    if value and value.upper() in message:  # as written: "sul QNH" is about QNH
        value = value.upper()
    # "dimentica tutto su di me" is everything: the topic must have a word that means something.
    return ForgetRequest(value if words(value) else None)


def asks_to_forget(message: str) -> bool:
    """ "dimentica quello che ti ho detto", "cancella la mia memoria"."""
    return forget_request(message) is not None


def carries_credential(message: str) -> bool:
    """A token, an API key or a password pasted into the chat: nothing of the message is
    remembered (the memory is shown to the model in later conversations and listed)."""
    text = message[:MAX_MESSAGE_CHARS]
    if _CREDENTIAL.search(text):
        return True
    return any(
        _HAS_DIGIT.search(run[0]) and _HAS_LETTER.search(run[0]) for run in _KEY_RUN.finditer(text)
    )

"""Reading a student's answer to a multiple-choice question: a letter in any of the ways
people write one ("c", "C)", "la b", "risposta: a", "direi la d") or the text of an option.
Pure functions: the grading service, the REST API and the offline model share them."""

from __future__ import annotations

import re
from collections.abc import Mapping

from aircoach.text import fold, words

# Words around a letter that do not change which letter it is ("secondo me è la b",
# "sono sicuro: c", "la c è giusta").
_FILLERS_TEXT = """
    a allora beh boh che corretta corretto credo dico direi dunque e ecco ehm esatta esatto
    forse giusta giusto il io l la lettera mah me mi mia ok okay opzione penso per proprio
    quella questa quindi risponderei rispondo risposta sara scelgo secondo sembra si sia
    sicura sicuramente sicuro sono uhm
"""
_FILLERS = frozenset(_FILLERS_TEXT.split())
_TOKEN = re.compile(r"[a-z0-9]+")
# "è" folds to "e", also the conjunction "and": beside another letter it is that word, not a
# letter ("la c è giusta" is c). Alone it is the letter e (not an option of the bank's a-d
# questions: the grader says so).
_VERB_OR_AND = "e"
# "la seconda" (an option, a question), "la prima è giusta": by its place.
ORDINALS = (
    "prima",
    "seconda",
    "terza",
    "quarta",
    "quinta",
    "sesta",
    "settima",
    "ottava",
    "nona",
    "decima",
)
_ORDINAL_LETTERS = dict(zip(ORDINALS, "abcd", strict=False))
_MIN_OPTION_CHARS = 3
_OPTION_WORDS_SHARE = 2 / 3


# "non sono sicuro, c", "non so, direi b", "mmm c": a doubt said before the answer
_HESITATION = re.compile(
    r"^(?:non\s(?:ne\s)?sono\s(?:molto\s|tanto\s)?(?:sicur[oa]|cert[oa])|non\s(?:lo\s)?so(?:\sbene)?"
    r"|h?m{2,}|uhm+)[\s,.:;!-]+"
)


def read_letter(text: str) -> str | None:
    """The letter a short answer names (`"è la b"`, `"la c è giusta"`, `"la seconda"`, "non
    sono sicuro, c" -> the letter), whether or not it is an option; None when the text is not
    a letter answer, or names two different letters (`"a o c?"`)."""
    said = _HESITATION.sub("", fold(text).strip(), count=1)
    tokens = [_ORDINAL_LETTERS.get(token, token) for token in _TOKEN.findall(said)]
    letters = {token for token in tokens if len(token) == 1 and token.isalpha()}
    if len(letters) > 1:
        letters.discard(_VERB_OR_AND)
    if len(letters) != 1:
        return None
    (letter,) = letters
    if all(token in _FILLERS or token == letter for token in tokens):
        return letter
    return None


def read_option(text: str, options: Mapping[str, str]) -> str | None:
    """The option whose text the answer gives: the same text, the only option contained in
    the answer, or the only option most of whose words the answer has."""
    said = " ".join(_TOKEN.findall(fold(text)))
    if not said:
        return None
    folded = {letter: " ".join(_TOKEN.findall(fold(option))) for letter, option in options.items()}
    for letter, option in folded.items():
        if option and option == said:
            return letter
    contained = [
        letter
        for letter, option in folded.items()
        if len(option) >= _MIN_OPTION_CHARS and f" {option} " in f" {said} "
    ]
    if len(contained) == 1:
        return contained[0]
    said_words = set(words(said))
    shares = {}
    for letter, option in options.items():
        option_words = set(words(option))
        if option_words:
            shares[letter] = len(option_words & said_words) / len(option_words)
    best = max(shares.values(), default=0.0)
    winners = [letter for letter, share in shares.items() if share == best]
    if best >= _OPTION_WORDS_SHARE and len(winners) == 1:
        return winners[0]
    return None


def read_answer(text: str, options: Mapping[str, str]) -> str | None:
    """The letter an answer means: a letter (valid or not, so the caller can say it is not
    an option), else the option whose text it gives; None when it is neither, or when it
    names another letter beside that text ("a) quadruplica" with c) quadruplica, "la b:
    raddoppia": graded as the text's option, and right when that one was)."""
    if (letter := read_letter(text)) is not None:
        return letter
    option = read_option(text, options)
    if option is None:
        return None
    own = set(_TOKEN.findall(fold(options[option])))
    named = {
        token
        for token in _TOKEN.findall(fold(text))
        if len(token) == 1 and token.isalpha() and token not in own and token != _VERB_OR_AND
    }
    return None if named - {option} else option


# "Non lo so", "salta", "boh": the student does not know; graded as not known (a wrong answer).
DONT_KNOW = frozenset(
    {"non lo so", "non so", "salta", "salto", "passo", "non ne ho idea", "boh", "bho", "non saprei"}
)
NOT_KNOWN = "-"  # the letter a "don't know" is recorded as


def dont_know(text: str) -> bool:
    return " ".join(_TOKEN.findall(fold(text))) in DONT_KNOW


_DONT_KNOW_WORDS = "|".join(
    r"\s+".join(phrase.split()) for phrase in sorted(DONT_KNOW, key=len, reverse=True)
)
# "1a", "2) b", "3: c", "la 3 è b", "3 è la c", "4 è: b"; "4 non lo so", "5 -", "6 salta" (not
# known), where that answer ends: at the end, a comma or a full stop, or the next number
# ("sulla 4 non so ancora" is no answer). An "è" (folded to "e"; "e'" or "e’" on a keyboard
# without accents) followed by a space, a colon or "=" and a word is the verb, not the letter
# e: "la 3 è giusta", "3 è: corretta", "1 e 2 sono sbagliate" name no letter. A letter before
# an apostrophe begins a word ("nella 3 c'è un errore", "la 2 l'ho lasciata"): no answer
# either. Several numbers before one answer each have it: "3 e 4: b", "3, 4 e 5 non lo so"; an
# "e" between two numbers is "and", never the letter e ("capitoli 2, 5 e 7" answers nothing;
# "3e 4a" and "3: e" are the letter e, which the grader refuses as no option). An arrow is a
# sign ("4 -> c", "4 → c"), and a few words may stand between a number and its letter when
# an answer is given or changed in words: "3 la b", "cambio la 1 in d", "la 1 la cambio in
# d", "alla 2 metto c", "per la 2 direi c", "la 2 diventa b"; "2 da b a c" answers c. Every
# repeat is bounded, the list of numbers too: a long message is read in linear time.
_APOSTROPHE = "['’`]"
_VERB = rf"e{_APOSTROPHE}?(?:\s{{0,2}}[:=]\s{{0,3}}|\s{{1,3}})"
_AND = r"(?:\s{0,2},\s{0,2}|\s{1,3}e\s{1,3})"
_MAX_NUMBERS = 10  # "1, 2, 3 ... e 10: b" at most
_NUMBERS = rf"\b(\d{{1,2}}(?:{_AND}\d{{1,2}}){{0,{_MAX_NUMBERS - 1}}})"
# Between the numbers and the letter: a sign ("3) b", "3 - b"), spaces that do not start
# "e 4" (the "and" of a list), or nothing ("3b").
_BEFORE_LETTER = r"(?:\s{0,2}(?:->|=>|→|[).:=-])\s{0,2}|\s{1,4}(?!e\s{1,3}\d)|)"
_IN_WORDS = (
    r"(?:(?:la|in|con|cambio|modifico|correggo|diventa|metto|rispondo|direi|dico|scelgo)"
    r"\s{1,3}){1,3}"
    r"|da\s{1,3}(?:la\s{1,3})?[a-z]\s{1,3}a\s{1,3}(?:la\s{1,3})?"  # "2 da b a c": c
)
_NUMBERED_ANSWER = re.compile(
    rf"{_NUMBERS}(?:"
    rf"{_BEFORE_LETTER}(?:{_IN_WORDS})?(?:{_VERB}(?:la\s{{1,3}})?)?"
    rf"(?!{_VERB}(?:\d{{1,2}}\s{{1,3}})?[a-z]{{2}})([a-z])\b(?!{_APOSTROPHE})"
    rf"|\s{{0,2}}[).:=]?\s{{0,2}}(?:(?:{_DONT_KNOW_WORDS})\b|-)(?=\s*(?:$|[,;.!]|e\s+\d|\d))"
    r")",
    re.MULTILINE,
)
_DIGITS = re.compile(r"\d+")


def read_numbered_answers(text: str) -> dict[int, str]:
    """The answers to numbered questions (a mock exam in the chat): "1a 2) b, 3: c" ->
    {1: "a", 2: "b", 3: "c"}; "3 e 4: b" -> {3: "b", 4: "b"}; "4 non lo so", "5 -", "6 salta"
    -> `NOT_KNOWN` for each. A later answer to the same number wins."""
    return {
        int(number): m[2] or NOT_KNOWN
        for m in _NUMBERED_ANSWER.finditer(fold(text))
        for number in _DIGITS.findall(m[1])
    }


def only_numbered_answers(text: str) -> bool:
    """Whether the message says nothing but numbered answers and words around them ("2b",
    "direi la 2 è b"): a lone number and letter in a longer message may be something else
    ("capitolo 3 a caso")."""
    rest = _NUMBERED_ANSWER.sub(" ", fold(text))
    return all(token in _FILLERS for token in _TOKEN.findall(rest))

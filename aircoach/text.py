"""Text helpers shared by the features (core): `fold`, `words` and `stem` for Italian text,
and the forgiving term search built on them: accents, case and punctuation ignored, singular
and plural alike, one typo tolerated in a word typed with five letters or more, best matches
first.

Stems are Snowball's Italian stemmer (`snowballstemmer`: maintained, no model or network; it
runs the C stemmers of PyStemmer when installed, as the requirements do, and its own pure
Python ones otherwise: the same stems, 4x faster), so inflections meet: `impoverire`/`impoverisce`, `virata`/`virate`,
`portanza`/`portanze`.

A quiz question is indexed under the stems of the words of its text and topic (`terms`, via
`aircoach.quiz.ports.index_terms`); the stores keep them next to the question (a table of terms in SQLite, an indexed array in
MongoDB) and look up the terms a query plan asks for, so the cost of a search grows with the
matches, not with the bank. Typos are handled on the query side: a word's stem is looked up
together with the stems of every string one edit away from the word as typed (a few hundred
indexed keys), which keeps the index as small as the text itself. Pure functions, no I/O: both stores rank with the same
code.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import snowballstemmer

from aircoach.stopwords import STOPWORDS

# Bump when the folding or stemming changes: stores re-index questions of an older version.
TERMS_VERSION = 2  # 2: Snowball stems, the shared stop-words (aircoach.stopwords)

MAX_QUERY_WORDS = 8  # more words add cost, not precision
FUZZY_MIN_LETTERS = 5
# A longer "word" is looked up only as written. The course's longest word has 18 letters, so
# no indexed word is one typo from it; and the strings one edit away from a word grow with the
# square of its length: a 200-letter one gave 10,000 terms to stem on the event loop (80 ms)
# and to look up.
FUZZY_MAX_LETTERS = 30
# A word's weight when its stem matches exactly / one edit away (integers: ties are exact).
EXACT, FUZZY = 10, 6

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_WORD = re.compile(r"[a-z0-9]+")
# An abbreviation written with dots ("Q.N.H.", "V.F.R") is the word of its letters.
_DOTTED = re.compile(r"\b(?:[a-z]\.){2,}")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")

# Function words match everything: they are neither indexed nor searched (`aircoach.stopwords`).


def fold(text: str) -> str:
    """Lower case without accents: `Velocità` and `velocita` are the same word."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    if decomposed.isascii():
        return decomposed
    # Only the few characters outside ASCII can be marks: a regex finds them, 4x faster on
    # the manual than asking Unicode about every character.
    return _NON_ASCII.sub(_unless_mark, decomposed)


def _unless_mark(match: re.Match[str]) -> str:
    return "" if unicodedata.combining(match[0]) else match[0]


def words(text: str) -> list[str]:
    """The folded words of `text` that carry meaning (punctuation and stopwords dropped)."""
    folded = fold(text)
    if "." in folded:
        folded = _DOTTED.sub(lambda dotted: dotted[0].replace(".", ""), folded)
    return [w for w in _WORD.findall(folded) if w not in STOPWORDS]


# The stem caches keep words up to this long: their bound in entries then bounds their bytes
# (a few MB). A query may be one "word" of 4000 letters, which kept 8 kB an entry: 65536 of them
# held half a gigabyte. No Italian word comes near it; a longer one is stemmed every time.
CACHED_WORD_CHARS = 40


_STEMMERS = threading.local()  # a Snowball stemmer keeps state while it works: one per thread


def _stemmer(word_chars: int) -> snowballstemmer.stemmer:
    """This thread's stemmer for words of up to `word_chars` letters. PyStemmer caches the
    last 10000 words a stemmer saw, in each thread, whatever their length: words longer than
    `CACHED_WORD_CHARS` go to a stemmer without that cache."""
    cached = word_chars <= CACHED_WORD_CHARS
    name = "italian" if cached else "italian_uncached"
    held = getattr(_STEMMERS, name, None)
    if held is None:
        held = snowballstemmer.stemmer("italian")
        if not cached and hasattr(held, "maxCacheSize"):  # PyStemmer's (the C stemmers)
            held.maxCacheSize = 0
        setattr(_STEMMERS, name, held)
    return held


def stem(word: str) -> str:
    """The Snowball Italian stem of a folded word: inflections meet (`portanza/portanze`,
    `strumento/strumenti`, `impoverire/impoverisce`, `virata/virate`). Numbers and words of
    fewer than three letters are kept as they are."""
    if len(word) > CACHED_WORD_CHARS:
        return _stem(word)
    return _cached_stem(word)


def _stem(word: str) -> str:
    if word.isdigit() or len(word) < 3:
        return word
    return str(_stemmer(len(word)).stemWord(word)) or word


_cached_stem = functools.lru_cache(maxsize=65536)(_stem)


def terms(text: str) -> list[str]:
    """The terms a text is found by: the stems of its words, sorted, unique."""
    return sorted({stem(w) for w in words(text)})


def one_edit_away(term: str) -> set[str]:
    """Every string one deletion, transposition, substitution or insertion from `term`."""
    splits = [(term[:i], term[i:]) for i in range(len(term) + 1)]
    deletes = {a + b[1:] for a, b in splits if b}
    transposes = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    replaces = {a + c + b[1:] for a, b in splits if b for c in _LETTERS}
    inserts = {a + c + b for a, b in splits for c in _LETTERS}
    return (deletes | transposes | replaces | inserts) - {term}


_SUFFIX_LETTERS = 4  # Italian derivational endings (-enza, -ione, -mento) sit in the last few


def typo_stems(word: str) -> frozenset[str]:
    """The stems of `word` with a vowel put back or a letter taken out near its end, when its
    own stem shows no derivational ending: a typo there hides the ending from the stemmer
    (`resistnza` -> `resistnz`, while `resistenza` -> `resistent`: two edits apart)."""
    if len(word) > CACHED_WORD_CHARS:
        return _typo_stems(word)
    return _cached_typo_stems(word)


def _typo_stems(word: str) -> frozenset[str]:
    if len(word) < FUZZY_MIN_LETTERS or len(word) - len(stem(word)) > 1:
        return frozenset()
    tail = range(max(1, len(word) - _SUFFIX_LETTERS), len(word) + 1)
    inserted = {word[:i] + v + word[i:] for i in tail for v in "aeio"}
    deleted = {word[:i] + word[i + 1 :] for i in tail if i < len(word)}
    return frozenset(stem(w) for w in inserted | deleted) - {stem(word)}


_cached_typo_stems = functools.lru_cache(maxsize=4096)(_typo_stems)


def typo_terms(word: str) -> frozenset[str]:
    """The stems of every string one edit from the folded `word`: the words a student who
    typed `word` may have meant, as the index holds them. The edit is undone on the typed word,
    before stemming, so a typo anywhere meets the stem of the word meant, whatever the stemmer
    makes of the typo (`incidynza` -> `incidenza` -> `incident`, while `incidynza` stems to
    `incidynz`, two edits from it). Not cached: a few hundred strings a word."""
    return frozenset(_stemmer(len(word) + 1).stemWords(list(one_edit_away(word))))


@dataclass(frozen=True)
class _WordPlan:
    exact: str
    fuzzy: frozenset[str]


@dataclass(frozen=True)
class SearchPlan:
    """What to look up for a query, and how to rank what was found."""

    words: tuple[_WordPlan, ...]

    def __bool__(self) -> bool:
        return bool(self.words)

    @property
    def terms(self) -> list[str]:
        """Every index term worth looking up (sorted: deterministic queries)."""
        found: set[str] = set()
        for word in self.words:
            found.add(word.exact)
            found |= word.fuzzy
        return sorted(found)

    def score(self, matched: Iterable[str]) -> int:
        """A question's score from the terms of its that matched: per query word, EXACT for
        its stem, FUZZY for a stem one edit away, summed over the words."""
        have = set(matched)
        total = 0
        for word in self.words:
            if word.exact in have:
                total += EXACT
            elif word.fuzzy & have:
                total += FUZZY
        return total

    def rank(
        self, matches: Mapping[tuple[int, int], Iterable[str]], limit: int
    ) -> list[tuple[int, int]]:
        """The best `limit` question keys, best first (ties: chapter and number order)."""
        scored = [(self.score(terms), key) for key, terms in matches.items()]
        scored = [(score, key) for score, key in scored if score > 0]
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [key for _score, key in scored[:limit]]


def plan(text: str) -> SearchPlan:
    """The search plan of a query: its meaningful words (at most MAX_QUERY_WORDS), each as
    its stem plus, for words of FUZZY_MIN_LETTERS to FUZZY_MAX_LETTERS letters, the stems of
    the words one typo from it (`typo_terms`)."""
    planned: list[_WordPlan] = []
    for word in dict.fromkeys(words(text)):
        exact = stem(word)
        fuzzy = (
            typo_terms(word) - {exact}
            if FUZZY_MIN_LETTERS <= len(word) <= FUZZY_MAX_LETTERS and not word.isdigit()
            else frozenset()
        )
        planned.append(_WordPlan(exact, fuzzy))
        if len(planned) == MAX_QUERY_WORDS:
            break
    return SearchPlan(tuple(planned))


MAX_LOGGED_PATH = 200  # a URL path a log line shows (a 15 KB id was written whole, twice)


def logged_path(path: str) -> str:
    """A request's path as a log line shows it: at most `MAX_LOGGED_PATH` characters."""
    return path if len(path) <= MAX_LOGGED_PATH else path[:MAX_LOGGED_PATH] + "…"


def redact_query(target: str) -> str:
    """`path?a=1&b=2` as `path?a=…&b=…` (at most 20 names, each cut to 40 characters; the
    path cut as `logged_path` does)."""
    path, mark, query = target.partition("?")
    if not mark:
        return logged_path(path)
    names = [part.partition("=")[0][:40] for part in query.split("&")[:20] if part]
    return logged_path(path) + "?" + "&".join(f"{name}=…" for name in names)

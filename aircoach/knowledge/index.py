"""The embedded course search: the manual's sections and the quiz explanations in an in-memory
SQLite FTS5 index, ranked by BM25.

Italian-aware: text is folded (no accents, no case) and reduced to Snowball's Italian stems
(`aircoach.text.stem`: inflections meet) before FTS5 sees it; a query word also matches the
stems the glossary gives it (`aircoach.glossary`: `smagrire` finds `impoverire`),
and a word of five letters or more that the course does not use matches the indexed stems
one edit away from it (one typo), counting for less than an exact word: a letter doubled or
made single in any such word, any other edit only when its stem has five letters or more. A passage must contain a good share of the query's words, weighted
by rarity (`MIN_COVERAGE`), and at least two of them when the query has two or more: a
question about something the course does not cover finds nothing, rather than the passage
that happens to share one word with it. A query that only names a chapter ("meteorologia")
is searched within it, and gets its first sections when nothing there holds the words.

Pure and synchronous: build and search run in a worker thread (`aircoach.knowledge.library`).
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aircoach.glossary import alternatives, spelled_out
from aircoach.knowledge.manual import Section
from aircoach.stopwords import (
    ANSWER_FORM_WORDS,
    ASKING_WORDS,
    COMPARING_WORDS,
    QUESTION_VERBS,
    STOPWORDS,
    STUDENT_STATE_WORDS,
)
from aircoach.text import (
    FUZZY_MAX_LETTERS,
    FUZZY_MIN_LETTERS,
    one_edit_away,
    stem,
    typo_stems,
    words,
)

MAX_QUERY_CHARS = 500  # a longer query is cut: more words add cost, not precision
MAX_QUERY_WORDS = 12
MAX_TOP_K = 20
EXCERPT_CHARS = 700
# The share of the query's words (weighted by rarity) a passage must hold to be a result.
MIN_COVERAGE = 0.34
# A heading's words say what a passage is about: they weigh more than its body's.
_TITLE_WEIGHT, _BODY_WEIGHT = 3.0, 1.0
# An explanation of a quiz question is not cited itself: it lends this share of its score to
# the section that teaches its subject (the manual is the source, the explanation the way a
# student asks about it).
_LENT_FACTOR = 0.5
# A section whose heading the query says in full ("cos'è la vite?", § "La vite"), or, less,
# whose heading holds every word the query asks about ("il TAF?", § "METAR e TAF"), is the one
# asked for, before a section that treats it within another subject ("Stallo e vite in virata
# base-finale"; the UTC, to which a quiz question on the times of METAR and TAF lends).
_TITLE_SAID, _TITLE_HOLDS = 1.5, 1.3
# A word matched only through a typo (one edit away) holds this share of its weight: "vinto"
# is one edit from "vento", and a question about football must not reach the wind.
_FUZZY_SHARE = 0.5
# A word found in more than this share of the passages tells little about a question.
_COMMON_SHARE = 0.15
# A word held by at most this many passages ("IMSAFE") is enough on its own for a result.
_RARE_COUNT = 2
# Any other single edit only in a stem this long: short stems are one edit from many words.
_ANY_EDIT_MIN_LETTERS = 5
# A sentence ends at . ! ? (not at ; or :, whose clause announces the next: an excerpt cut
# there ended "... rischio di malattia da decompressione:").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LAST_WORD = re.compile(r"\w+$")

# Words of a question that say nothing about its subject ("spiegami cos'e ...", "in tre
# frasi", "in parole semplici", "in caso di", "grazie, ora parliamo dell'ipossia"; "cosa devo
# sapere sul QNH?" found the readback first, which says "deve"; "cercami il QNH" found nothing).
_QUESTION_WORDS_TEXT = """
    cos cosa cose che come dove quando perche quanto quanta quanti quante qual quale
    spiegami spiega spiegare dimmi dici parlami sai sapere vuol dire significa significato
    funziona funzionano serve servono succede puoi mi ti ci si e sono ho hai ha fa fare
    differenza tra fra manuale corso secondo dice detto legge leggere leggo interpretare
    interpreta capire capisco significano esattamente va vanno com fatto fatta fatti succedere
    riassunto riassumi caso casi grazie ok okay bene perfetto adesso ora allora passiamo
    vorrei voglio fai faresti fammi spieghi spiegheresti bisogna fanno tutto definizione
    ripassiamo ripassare ricordare ricordo stare attenti attenzione devo deve devono dovrei
    essere spiegamelo sbaglio sbaglia pratica parla parlano situazione situazioni conta contano
    cercami cerchi trovami trovi mostrami sezione paragrafo
"""
_QUESTION_WORDS = frozenset(_QUESTION_WORDS_TEXT.split()) | ANSWER_FORM_WORDS | ASKING_WORDS
_FUNCTION_WORDS = _QUESTION_WORDS | STOPWORDS
_FUNCTION_WORD_LETTERS = max(map(len, _FUNCTION_WORDS))
# Words that point at a chapter without naming it ("il capitolo sulla meteorologia").
_CHAPTER_STEMS = frozenset(stem(word) for word in ("capitolo", "argomento", "materia"))
# Words a student says of themselves about a subject ("ho problemi con il QNH", "faccio fatica
# con lo stallo"), and a question's common verbs ("quando si usa il QNH?", "come si riconosce
# lo stallo?"): searched, but weighed as a common word. The course's own "problema" is a
# magneto's, so "problemi ai magneti" still prefers that section, and "ho problemi con il QNH"
# is not refused for want of a section holding both words. So is a question's "rischio"
# ("quando c'è rischio di nebbia?" found nothing: no section says both), and "domanda", the
# student's own or the quiz's ("non capisco questa domanda" found ROGER's "una domanda che
# chiede sì o no"; "ROGER si usa per rispondere a una domanda?" still finds it). So is the
# kind asked for: "quali tipi di nubi ci sono?", "che tipo di carburante si usa?" found
# nothing (four sections say "tipo" or "tipi"), and what a thing is like or for: "quali sono
# le caratteristiche dell'altimetro?", "qual è la funzione degli alettoni?", "in che modo si
# usa l'ATIS?" found nothing; so did "come mai l'alcol è importante?" (its "mai").
_FRAME_WORDS = {
    *("capito", "rischio", "domanda", "tipo", "tipi", "tipologia", "genere"),
    *("caratteristica", "caratteristiche", "funzione", "funzioni", "scopo", "modo", "mai"),
    *("ruolo", "pericolo", "pericoli", "errore", "errori", "comporta"),
    *("indica", "indicano", "regola", "regole", "normativa", "prevede", "relazione"),
    # "cerca il QNH" found nothing; "cosa si cerca sul terreno quando ci si perde?" is § 6.15's
    *("cerca", "cercare", "trova", "trovare", "mostra"),
}
_FRAME_STEMS = frozenset(
    stem(word) for word in words(" ".join(STUDENT_STATE_WORDS | QUESTION_VERBS | _FRAME_WORDS))
)


@dataclass(frozen=True)
class Passage:
    """One indexed passage: a manual section (`kind` "manuale") or a quiz explanation
    ("quiz", `riferimento` like `quiz 3.12`)."""

    riferimento: str
    titolo: str
    capitolo: int
    materia: str
    testo: str
    kind: str


def passages_of(
    sections: Iterable[Section], questions: Iterable[Mapping[str, Any]], chapters: Mapping[int, str]
) -> list[Passage]:
    """The passages to index: every section, and every question that has an explanation."""
    found = [Passage(s.id, s.title, s.capitolo, s.materia, s.text, "manuale") for s in sections]
    for q in questions:
        explanation = str(q.get("spiegazione") or "").strip()
        if not explanation:
            continue
        capitolo = int(q["capitolo"])
        found.append(
            Passage(
                f"quiz {capitolo}.{q['numero']}",
                str(q.get("testo", "")),
                capitolo,
                chapters.get(capitolo, str(capitolo)),
                f"{q.get('testo', '')} {explanation}",
                "quiz",
            )
        )
    return found


def _stems(text: str) -> list[str]:
    return [stem(w) for w in words(text)]


class CourseIndex:
    """An in-memory FTS5 index of passages. Thread-safe: one connection, one lock; a search
    takes well under a millisecond on the course (see `bench/eval_offline.py`)."""

    def __init__(self, passages: list[Passage], version: str):
        self.version = version
        self.passages = passages
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE passages USING fts5(title, body, tokenize='unicode61')"
        )
        self._terms: list[frozenset[str]] = []
        self._titles: list[frozenset[str]] = []  # a section's heading, for a title asked
        self._title_words: list[frozenset[str]] = []  # the same, its words as written (roots)
        vocabulary: dict[str, int] = {}
        rows = []
        for rowid, passage in enumerate(passages):
            title, body = _stems(passage.titolo), _stems(passage.testo)
            terms = frozenset(title) | frozenset(body)
            self._terms.append(terms)
            self._titles.append(frozenset(title) if passage.kind == "manuale" else frozenset())
            self._title_words.append(
                frozenset(map(_root, words(passage.titolo)))
                if passage.kind == "manuale"
                else frozenset()
            )
            for term in terms:
                vocabulary[term] = vocabulary.get(term, 0) + 1
            rows.append((rowid, " ".join(title), " ".join(body)))
        self._db.executemany("INSERT INTO passages(rowid, title, body) VALUES (?, ?, ?)", rows)
        self._vocabulary = vocabulary
        # The words as written of the rare stems, for a rare word that names its subject.
        self._rare_words: dict[str, frozenset[str]] = {}
        for passage in passages:
            for word in words(f"{passage.titolo} {passage.testo}"):
                term = stem(word)
                if vocabulary.get(term, 0) <= _RARE_COUNT:
                    self._rare_words[term] = self._rare_words.get(term, frozenset()) | {word}
        self._heading_terms = frozenset().union(*self._titles)
        # A chapter's titles (the manual's heading and the quiz bank's), as `materia` is matched.
        self._chapter_titles: dict[int, set[str]] = {}
        for passage in passages:
            titles = self._chapter_titles.setdefault(passage.capitolo, set())
            titles.add(" ".join(words(passage.materia)))
        self._chapter_stems = {
            capitolo: [frozenset(_stems(title)) for title in titles]
            for capitolo, titles in self._chapter_titles.items()
        }
        self._section_of = [self._home_section(row) for row in range(len(passages))]

    def _home_section(self, rowid: int) -> int:
        """A section's own row; for an explanation, the row of the section of its chapter
        that shares the most of its terms (itself when its chapter has no section)."""
        passage = self.passages[rowid]
        if passage.kind != "quiz":
            return rowid
        terms = self._terms[rowid]
        candidates = [
            (len(terms & self._terms[row]), -row)
            for row, other in enumerate(self.passages)
            if other.kind == "manuale" and other.capitolo == passage.capitolo
        ]
        return -max(candidates)[1] if candidates else rowid

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _query_words(self, query: str) -> list[tuple[str, frozenset[str], bool]]:
        """Per meaningful query word: its stem, the indexed stems it matches (itself and its
        glossary alternatives, or those one edit away when none is indexed and the word is
        long enough), and whether it matched only through a typo."""
        planned: dict[str, tuple[frozenset[str], bool]] = {}
        known = self._vocabulary.keys()
        query = _cut(query)
        asked = [
            (word, stem(word))
            for word in [*words(query), *spelled_out(query)]
            if word not in _QUESTION_WORDS and len(word) >= 2
        ]
        # A function word typed with two letters swapped ("qunado"): not a word of the course
        # ("far", "isa" are), and the rarest of all, it outweighed the words asked.
        asked = [(w, t) for w, t in asked if t in known or not _swapped_function_word(w)]
        glossary = alternatives(term for _, term in asked)
        for word, term in asked:
            if term in planned:
                continue
            exact = frozenset({term} | glossary.get(term, frozenset())) & known
            if exact:
                planned[term] = (exact, False)
            elif FUZZY_MIN_LETTERS <= len(word) <= FUZZY_MAX_LETTERS and not word.isdigit():
                # (A longer "word" is looked up as written: its variants grow with the
                # square of its length, 27,000 strings of 500 letters for one of 500.)
                # The commonest Italian typo is a single letter doubled or not (stalo,
                # nebia): when such a variant is indexed, it is the word meant.
                fuzzy = frozenset(_doubling_variants(term) & known)
                if not fuzzy and len(term) >= _ANY_EDIT_MIN_LETTERS:
                    # A short stem is one edit from too many words (`vinto`, stem `vint`,
                    # from `vito`, whose stem meets `vite`): only a long one is guessed.
                    fuzzy = frozenset((one_edit_away(term) | typo_stems(word)) & known)
                planned[term] = (fuzzy, True)
            else:
                planned[term] = (frozenset(), False)
            if len(planned) == MAX_QUERY_WORDS:
                break
        return [(term, found, typo) for term, (found, typo) in planned.items()]

    def search(
        self,
        query: str,
        *,
        top_k: int = 5,
        materia: str | None = None,
        capitolo: int | None = None,
    ) -> list[dict[str, Any]]:
        """The best passages for `query`, best first, as `kb_search` returns them:
        `riferimento`, `titolo`, `capitolo`, `materia`, `testo` (an excerpt), `score`, `tipo`.
        `materia` narrows to the chapters whose title contains it or is contained in it
        (accents ignored; one that names no chapter narrows nothing); `capitolo` to one
        chapter."""
        top_k = max(1, min(int(top_k), MAX_TOP_K))
        chapters = self._chapters_named(materia)
        if capitolo is not None:
            chapters = (chapters or {capitolo}) & {capitolo}
        planned = self._query_words(query)
        named = self._chapter_asked(planned) if chapters is None else None
        if named is not None:
            chapters = {named}
        matchable = sorted({t for _, found, _ in planned for t in found})
        # A question of frame words alone has no subject ("ho un problema", "faccio fatica"),
        # unless each is a heading's word ("cos'è la fatica?": "Stress, fatica e idoneità").
        frame_only = all(term in _FRAME_STEMS for term, _, _ in planned)
        headed = all(found & self._heading_terms for _, found, _ in planned)
        if not matchable or (frame_only and not headed):
            return self._chapter_sections(named, top_k) if named is not None else []
        expression = " OR ".join(f'"{term}"' for term in matchable)
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, bm25(passages, ?, ?) FROM passages WHERE passages MATCH ?",
                (_TITLE_WEIGHT, _BODY_WEIGHT, expression),
            ).fetchall()
        # A word's weight: rarer words say more (a word in every passage says nothing); a word
        # the course never uses ("smartphone") is the rarest of all.
        total = len(self.passages)
        weights = {
            term: _rarity(min((self._vocabulary[t] for t in found), default=1), total)
            for term, found, _ in planned
        }
        share = {term: _FUZZY_SHARE if typo else 1.0 for term, _, typo in planned}
        # A word in a good share of the course ("volo") is not one of the two a result needs.
        framed = set() if frame_only else _FRAME_STEMS & weights.keys()
        common = {
            term
            for term, found, _ in planned
            if found and min(self._vocabulary[t] for t in found) > _COMMON_SHARE * total
        } | framed
        # A frame word ("regole", "usa") weighs nothing in what a passage covers: a passage
        # that happens to hold it ("regole" in the readback, "si usa" in the ground speed's)
        # outranked the one on the subject asked ("quali sono le regole sul transponder?",
        # "che carburante si usa?").
        for term in framed:
            weights[term] = 0.0
        # A word only a passage or two of the course holds as written ("IMSAFE"), or the
        # glossary's word for it, names its subject alone; not another word of its stem
        # ("punto di non ritorno": the light signals' "ritornare per l'atterraggio").
        written = set(words(_cut(query)))
        rare = {
            term
            for term, found, typo in planned
            if not typo
            and any(
                t in self._rare_words and (t != term or self._rare_words[t] & written)
                for t in found
            )
        }
        wanted = sum(weights.values()) or 1.0
        # Two subjects compared ("differenza tra VA e VNO") are often taught apart: a section
        # on either one is a result.
        needed = 1 if COMPARING_WORDS & set(words(_cut(query))) else 2
        own: dict[int, float] = {}
        lent: dict[int, float] = {}
        for rowid, rank in rows:
            passage = self.passages[rowid]
            if chapters is not None and passage.capitolo not in chapters:
                continue
            held = self._terms[rowid]
            matched = [t for t, found, _ in planned if found & held]
            coverage = sum(weights[t] * share[t] for t in matched) / wanted
            telling = [t for t in matched if t not in common]
            # A frame word ("usa", "problemi") is never one of the two: "QNH usa atterraggio"
            # is not answered by a section on landing that says "usa". A common word ("volo")
            # is one only in a question with fewer than two others: "si può volare VFR di
            # notte?" is not answered by the ATC clearances, which say "volo" and "VFR".
            said = [t for t in matched if t not in framed]
            enough = (
                (
                    len(said) >= min(needed, len(planned) - len(framed))
                    and len(planned) - len(common) < needed
                )
                or len(telling) >= min(needed, len(planned) - len(common))
                or any(t in rare for t in matched)
            )
            if coverage < MIN_COVERAGE or not enough:
                continue
            score = -rank * coverage**2
            target = self._section_of[rowid]
            if target == rowid:
                own[rowid] = score
            else:  # an explanation lends its score to the section that teaches its subject
                lent[target] = max(lent.get(target, 0.0), score)
        scores = {row: own.get(row, 0.0) + _LENT_FACTOR * lent.get(row, 0.0) for row in own | lent}
        asked = {term for term, _, _ in planned}
        subject = asked - framed
        # Of the headings that hold the subject, those that hold it as written, when there
        # are any: "carburante" and "carburatore" share a stem, and "che carburante si usa?"
        # is answered by "Il carburante: AVGAS ...", not "Carburatore e ghiaccio ...".
        as_written = {_root(w) for w in written if stem(w) in subject}
        holding = {row for row in scores if subject and subject <= self._titles[row]}
        holding = {row for row in holding if as_written <= self._title_words[row]} or holding
        for row in scores:
            title = self._titles[row]
            if title and title <= asked:
                scores[row] *= _TITLE_SAID  # "la vite": "La vite"
            elif row in holding:
                scores[row] *= _TITLE_HOLDS  # "il TAF?": "METAR e TAF"
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        if not best and named is not None:
            return self._chapter_sections(named, top_k)
        return [self._result(self.passages[row], score, planned) for row, score in best]

    def _chapter_asked(self, planned: list[tuple[str, frozenset[str], bool]]) -> int | None:
        """The one chapter the query names by its title, the words asked being at least half
        of the title's ("meteorologia", "parlami del fattore umano", "il capitolo sulla
        navigazione"; not "aria" for "Regole dell'aria e spazi aerei"): the search stays in
        it, since the same word in another chapter ("condizioni meteorologiche" in a radio
        failure) is not what was asked. None for any other query."""
        asked = {term for term, _, _ in planned} - _CHAPTER_STEMS
        limit = _COMMON_SHARE * len(self.passages)
        if all(self._vocabulary.get(term, 0) > limit for term in asked):
            return None  # nothing asked, or only words of the whole course ("volo")
        named = {
            capitolo
            for capitolo, titles in self._chapter_stems.items()
            if any(asked <= title and 2 * len(asked) >= len(title) for title in titles)
        }
        return named.pop() if len(named) == 1 else None

    def _chapter_sections(self, capitolo: int, top_k: int) -> list[dict[str, Any]]:
        """A chapter's first `top_k` sections in the manual's order: the answer to a query
        that names the chapter and nothing in it ("meteorologia", where no section says the
        word)."""
        rows = [p for p in self.passages if p.kind == "manuale" and p.capitolo == capitolo]
        return [self._result(passage, 0.0, []) for passage in rows[:top_k]]

    def _chapters_named(self, materia: str | None) -> set[int] | None:
        """The chapters whose title contains `materia` or is contained in it ("Meteo",
        "Meteorologia generale"); None (every chapter) when it names none: a model guessing
        the subject ("altimetria") must not be told that the manual has nothing."""
        wanted = " ".join(words(materia)) if materia else ""
        if not wanted:
            return None
        named = {
            capitolo
            for capitolo, titles in self._chapter_titles.items()
            if any(title and (wanted in title or title in wanted) for title in titles)
        }
        return named or None

    def _result(
        self, passage: Passage, score: float, planned: list[tuple[str, frozenset[str], bool]]
    ) -> dict[str, Any]:
        return {
            "riferimento": passage.riferimento,
            "titolo": passage.titolo,
            "capitolo": passage.capitolo,
            "materia": passage.materia,
            "testo": _excerpt(passage.testo, planned),
            "score": round(score, 3),
            "tipo": passage.kind,
        }


def _cut(query: str) -> str:
    """The query's first `MAX_QUERY_CHARS` characters, without the word cut in half (a word
    the course never uses, the rarest of all, would outweigh the words asked)."""
    if len(query) <= MAX_QUERY_CHARS:
        return query
    cut = query[:MAX_QUERY_CHARS]
    if query[MAX_QUERY_CHARS].isalnum():
        cut = _LAST_WORD.sub("", cut)
    return cut


def _root(word: str) -> str:
    """A word without its final vowels, as its plural or feminine is written ("carburanti",
    "carburante"; not "carburatore", whose stem is theirs)."""
    return word.rstrip("aeiou") or word


def _doubling_variants(term: str) -> set[str]:
    """`term` with one letter doubled, or one double letter made single."""
    doubled = {term[: i + 1] + term[i:] for i in range(len(term)) if term[i].isalpha()}
    single = {term[:i] + term[i + 1 :] for i in range(1, len(term)) if term[i] == term[i - 1]}
    return (doubled | single) - {term}


def _rarity(count: int, total: int) -> float:
    return math.log(1 + total / max(count, 1))


def _swapped_function_word(word: str) -> bool:
    """Whether `word` is a function or question word with two letters swapped ("qunado",
    "perhce")."""
    return len(word) <= _FUNCTION_WORD_LETTERS and any(
        f"{word[:i]}{word[i + 1]}{word[i]}{word[i + 2 :]}" in _FUNCTION_WORDS
        for i in range(len(word) - 1)
        if word[i] != word[i + 1]
    )


def _excerpt(text: str, planned: list[tuple[str, frozenset[str], bool]]) -> str:
    """The passage, or for a long one the sentences from the first that holds a query word,
    cut at `EXCERPT_CHARS` on a sentence boundary where possible."""
    if len(text) <= EXCERPT_CHARS:
        return text
    sentences = _SENTENCE_END.split(text)
    wanted = {t for _, found, _ in planned for t in found}
    start = next(
        (i for i, s in enumerate(sentences) if wanted & set(_stems(s))),
        0,
    )
    excerpt = ""
    for sentence in sentences[start:]:
        if excerpt and len(excerpt) + len(sentence) + 1 > EXCERPT_CHARS:
            break
        excerpt = f"{excerpt} {sentence}".strip()
    return excerpt[:EXCERPT_CHARS]

"""The stems of the C and the pure-Python Snowball stemmers are the same: an instance without
PyStemmer (it is optional to `snowballstemmer`) indexes and searches the words stored by one
with it, and the other way round."""

from __future__ import annotations

import json
import random
import tracemalloc
import unicodedata
from pathlib import Path

import pytest
from snowballstemmer.italian_stemmer import ItalianStemmer

from aircoach.text import fold, plan, stem, typo_stems, words

Stemmer = pytest.importorskip("Stemmer")  # PyStemmer: in requirements.txt
ROOT = Path(__file__).resolve().parent.parent


def _vocabulary() -> set[str]:
    texts = [
        p.read_text() for p in [*(ROOT / "aircoach").rglob("*.md"), *(ROOT / "docs").rglob("*.md")]
    ]
    texts += [json.dumps(json.loads((ROOT / "aircoach/data/quiz_questions.json").read_text()))]
    vocabulary: set[str] = set()
    for text in texts:
        vocabulary.update(words(text))
    return vocabulary


@pytest.mark.integration  # the whole vocabulary through both stemmers: 0.8 s, grows with the repo
def test_the_c_and_the_python_stemmer_give_the_same_stems():
    vocabulary = _vocabulary()
    assert len(vocabulary) > 4000  # the course manual, the prompt docs, the quiz bank, docs/
    c, python = Stemmer.Stemmer("italian"), ItalianStemmer()
    differ = sorted(w for w in vocabulary if c.stemWord(w) != python.stemWord(w))
    assert differ == []
    assert stem("impoverisce") == stem("impoverire")  # what the app uses stems the same


def test_fold_drops_marks_and_keeps_every_other_character():
    """`fold` is NFKD then every combining mark removed; the regex it uses to find the
    characters outside ASCII must not drop or keep anything else."""
    assert fold("Velocità PERCHÉ naïve") == "velocita perche naive"
    assert fold("ﬁ 2² 15 °C, 3 €, ΑΒΓ ά") == "fi 22 15 °c, 3 €, αβγ α"
    sample = "".join(chr(cp) for cp in range(0x20, 0x3000))
    decomposed = unicodedata.normalize("NFKD", sample.casefold())
    assert fold(sample) == "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def test_the_stem_caches_keep_no_long_word():
    """The stem caches are bounded in entries; a query may be one "word" of thousands of
    letters, stemmed through them. Such words are stemmed, not kept: 200 of them used to
    stay in memory (57 MB, in our cache and in PyStemmer's own per-thread one); 20 here."""
    rng = random.Random(7)
    long_words = ["".join(rng.choices("abcdefilmnoprstuvz", k=4000)) for _ in range(20)]
    assert stem(long_words[0] + "e") == Stemmer.Stemmer("italian").stemWord(long_words[0] + "e")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for word in long_words:
            stem(word)
            typo_stems(word)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000, f"{kept} bytes kept by 20 long words"
    assert stem("portanze") == stem("portanza")  # a word is still stemmed (and cached)


def test_a_very_long_word_is_searched_as_written():
    """The strings one edit from a word grow with the square of its length: a 200-letter
    "word" (the longest quiz search text) planned 10,000 terms, stemmed on the event loop
    (80 ms) and then looked up in the store. No word of the course is near that long: such a
    word is looked up as written, while a typo in a real word is still forgiven."""
    long_word = "".join(random.Random(3).choices("abcdefilmnoprstuvz", k=200))
    assert plan(long_word).terms == [stem(long_word)]
    assert stem("resistenza") in plan("resistnza").terms


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("che cos'è il Q.N.H.?", ["cos", "qnh"]),  # it was "q", "n", "h": nothing found
        ("il V.F.R di notte", ["vfr", "notte"]),
        ("vale 1.013,25 hPa", ["vale", "1", "013", "25", "hpa"]),  # a number keeps its parts
        ("p.es. fine frase. Inizio", ["p", "es", "fine", "frase", "inizio"]),
    ],
)
def test_an_abbreviation_written_with_dots_is_one_word(text, found):
    assert words(text) == found

"""The stems of the C and the pure-Python Snowball stemmers are the same: an instance without
PyStemmer (it is optional to `snowballstemmer`) indexes and searches the words stored by one
with it, and the other way round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from snowballstemmer.italian_stemmer import ItalianStemmer

from aircoach.text import stem, words

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

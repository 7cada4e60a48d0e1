"""The forgiving matcher's pieces: folding, stems, typo variants, ranking."""

from __future__ import annotations

import pytest

from aircoach.quiz.ports import index_terms
from aircoach.text import (
    EXACT,
    FUZZY,
    FUZZY_MIN_LETTERS,
    MAX_QUERY_WORDS,
    one_edit_away,
    plan,
    stem,
    words,
)


def test_words_fold_accents_case_and_punctuation_and_drop_stopwords():
    assert words("La VELOCITÀ dell'aria, sul profilo!") == ["velocita", "aria", "profilo"]
    assert words("«Più» della metà?") == ["meta"]
    assert words("QNH 1013 hPa") == ["qnh", "1013", "hpa"]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("portanza", "portanze"),
        ("strumento", "strumenti"),
        ("motore", "motori"),
        ("bianco", "bianchi"),
        ("luogo", "luoghi"),
        ("consiglio", "consigli"),
        ("velocita", "velocita"),
        ("virata", "virate"),
        ("impoverire", "impoverisce"),  # Snowball joins verb forms too
    ],
)
def test_singular_and_plural_share_a_stem(one, other):
    assert stem(one) == stem(other)


def test_numbers_and_short_words_keep_their_form():
    assert stem("1013") == "1013" and stem("hp") == "hp"


def test_index_terms_come_from_the_text_and_the_topic():
    question = {"testo": "Le eliche a passo variabile", "argomento": "Elica", "risposte": {}}
    assert index_terms(question) == ["elic", "pass", "variabil"]


def test_one_edit_away_covers_the_four_kinds_of_typo():
    variants = one_edit_away("vento")
    assert {"veto", "vneto", "vanto", "vendto"} <= variants  # delete, swap, replace, insert
    assert "vento" not in variants and "vetno" in variants
    assert len(variants) < 60 * len("vento")


def test_plan_tolerates_typos_only_in_words_of_five_letters_or_more():
    assert stem("vento") in plan("vento").terms and len(plan("vento").terms) > 100
    assert plan("vela").terms == [stem("vela")]
    assert plan("1013").terms == ["1013"]
    assert not plan("della sulla")
    assert len(plan(" ".join(f"parola{i}" for i in range(20))).words) == MAX_QUERY_WORDS


def _typos(word: str) -> set[str]:
    """Every letter missing and every two letters swapped; one wrong and one extra letter at
    each place (a fixed letter: every letter would make the test slow, not stronger)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return (
        {a + b[1:] for a, b in splits if b}
        | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
        | {a + ("y" if b[0] != "y" else "k") + b[1:] for a, b in splits if b}
        | {a + "x" + b for a, b in splits}
    ) - {word}


@pytest.mark.parametrize(
    "word", ["incidenza", "comunica", "certificato", "altimetro", "portanza", "resistenza"]
)
def test_a_typo_anywhere_in_the_typed_word_reaches_the_stem_meant(word):
    # The edit is undone on the typed word, not on its stem: a typo in the ending changes
    # what the stemmer cuts ("incidynza" stems to "incidynz", two edits from "incident").
    missed = [
        typo
        for typo in sorted(_typos(word))
        if len(typo) >= FUZZY_MIN_LETTERS and stem(word) not in plan(typo).terms
    ]
    assert missed == []


def test_scores_rank_exact_words_above_typos_and_more_words_above_fewer():
    query = plan("velocita portanza")
    assert query.score(["veloc", "portanz"]) == 2 * EXACT
    assert query.score(["veloc", "portnz"]) == EXACT + FUZZY
    assert query.score(["elic"]) == 0
    ranked = query.rank(
        {(2, 1): ["veloc"], (1, 3): ["veloc", "portanz"], (1, 1): ["portnz"], (3, 3): []},
        limit=10,
    )
    assert ranked == [(1, 3), (2, 1), (1, 1)]
    assert query.rank({(2, 1): ["veloc"], (1, 9): ["veloc"]}, limit=1) == [(1, 9)]

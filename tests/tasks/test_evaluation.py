"""The evaluation figures against values worked out by hand (and, for kappa, the textbook
examples)."""

from __future__ import annotations

import pytest

from aircoach.tasks.evaluation import (
    accuracy,
    cohen_kappa,
    multilabel_scores,
    percentile,
    triage_rates,
)

LABELS = ["A", "B", "C", "D"]


def test_multilabel_micro_macro_hamming():
    gold = [{"A"}, {"A", "B"}, {"C"}]
    predicted = [{"A"}, {"A"}, {"B"}]
    scores = multilabel_scores(gold, predicted, LABELS)
    # A: tp 2; B: fp 1, fn 1; C: fn 1 -> micro P 2/3, R 2/4, F1 4/7
    assert scores.micro_f1 == pytest.approx(4 / 7)
    assert scores.macro_f1 == pytest.approx((1.0 + 0.0 + 0.0) / 3)  # D occurs nowhere
    assert scores.hamming_loss == pytest.approx(3 / (3 * 4))
    assert scores.exact_match == pytest.approx(1 / 3)
    assert [(s.label, s.support) for s in scores.per_label] == [("A", 2), ("B", 1), ("C", 1)]
    perfect = multilabel_scores(gold, gold, LABELS)
    assert (perfect.micro_f1, perfect.macro_f1, perfect.hamming_loss) == (1.0, 1.0, 0.0)
    with pytest.raises(ValueError):
        multilabel_scores([], [], LABELS)


def test_cohen_kappa():
    # Cohen (1960)-style 2x2 example: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no -> 0.4
    gold = ["y"] * 25 + ["n"] * 25
    predicted = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    assert cohen_kappa(gold, predicted, ["y", "n"]) == pytest.approx(0.4)
    assert cohen_kappa(gold, gold, ["y", "n"]) == 1.0
    levels = ["low", "medium", "high"]
    gold3 = ["low", "medium", "high", "high"]
    near = ["low", "medium", "medium", "high"]  # one miss by one level
    far = ["low", "medium", "low", "high"]  # one miss by two levels
    assert cohen_kappa(gold3, near, levels) == cohen_kappa(gold3, far, levels)
    assert cohen_kappa(gold3, near, levels, weighted=True) > cohen_kappa(
        gold3, far, levels, weighted=True
    )


def test_triage_rates_accuracy_percentile():
    levels = ["low", "medium", "high", "urgent"]
    under, over = triage_rates(
        ["urgent", "low", "high", "medium"], ["high", "medium", "high", "medium"], levels
    )
    assert (under, over) == (0.25, 0.25)
    assert accuracy(["a", "b", "c", "d"], ["a", "b", "x", "d"]) == 0.75
    assert percentile([5, 1, 4, 2, 3], 50) == 3 and percentile([5, 1, 4, 2, 3], 95) == 5

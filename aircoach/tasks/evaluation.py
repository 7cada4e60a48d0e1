"""Figures of a triage against labelled e-mails: multi-label topics (micro and macro F1, Hamming
loss), priority (Cohen's kappa, plain and linearly weighted, under- and over-triage rates),
sentiment accuracy, and the engine's own rates (validation errors, retries, dead letters) and
latency. Pure functions; `bench/eval_triage.py` runs them on the labelled set."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LabelScore:
    label: str
    precision: float
    recall: float
    f1: float
    support: int  # gold e-mails with the label


@dataclass(frozen=True)
class MultiLabelScores:
    micro_f1: float
    macro_f1: float
    hamming_loss: float
    exact_match: float
    per_label: list[LabelScore]


def _f1(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def multilabel_scores(
    gold: Sequence[set[str]], predicted: Sequence[set[str]], labels: Sequence[str]
) -> MultiLabelScores:
    """Macro F1 averages the labels that occur in the gold labels or the predictions (a label
    absent from both says nothing); the Hamming loss counts over every label of `labels`."""
    if len(gold) != len(predicted) or not gold:
        raise ValueError("gold and predicted must be non-empty and of equal length")
    per_label = []
    total_tp = total_fp = total_fn = 0
    for label in labels:
        tp = sum(label in g and label in p for g, p in zip(gold, predicted, strict=True))
        fp = sum(label not in g and label in p for g, p in zip(gold, predicted, strict=True))
        fn = sum(label in g and label not in p for g, p in zip(gold, predicted, strict=True))
        total_tp, total_fp, total_fn = total_tp + tp, total_fp + fp, total_fn + fn
        if tp + fp + fn:
            precision, recall, f1 = _f1(tp, fp, fn)
            per_label.append(LabelScore(label, precision, recall, f1, tp + fn))
    wrong = sum(len(g ^ p) for g, p in zip(gold, predicted, strict=True))
    return MultiLabelScores(
        micro_f1=_f1(total_tp, total_fp, total_fn)[2],
        macro_f1=sum(s.f1 for s in per_label) / len(per_label) if per_label else 0.0,
        hamming_loss=wrong / (len(gold) * len(labels)),
        exact_match=sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold),
        per_label=per_label,
    )


def cohen_kappa(
    gold: Sequence[str], predicted: Sequence[str], levels: Sequence[str], *, weighted: bool = False
) -> float:
    """Cohen's kappa; `weighted`: linear weights over the order of `levels` (ordinal scales:
    urgent for high is a smaller miss than urgent for low)."""
    n, k = len(gold), len(levels)
    if n == 0 or n != len(predicted):
        raise ValueError("gold and predicted must be non-empty and of equal length")
    index = {level: i for i, level in enumerate(levels)}
    observed = [[0.0] * k for _ in range(k)]
    for g, p in zip(gold, predicted, strict=True):
        observed[index[g]][index[p]] += 1
    rows = [sum(row) for row in observed]
    cols = [sum(observed[i][j] for i in range(k)) for j in range(k)]

    def weight(i: int, j: int) -> float:
        if weighted:
            return abs(i - j) / (k - 1) if k > 1 else 0.0
        return 0.0 if i == j else 1.0

    disagreement = sum(weight(i, j) * observed[i][j] for i in range(k) for j in range(k)) / n
    chance = sum(weight(i, j) * rows[i] * cols[j] for i in range(k) for j in range(k)) / n**2
    if chance == 0:
        return 1.0 if disagreement == 0 else 0.0
    return 1 - disagreement / chance


def triage_rates(
    gold: Sequence[str], predicted: Sequence[str], levels: Sequence[str]
) -> tuple[float, float]:
    """(under-triage, over-triage): the share of e-mails given a lower (higher) priority than
    their label. Under-triage is the costly one: an urgent e-mail left for later."""
    index = {level: i for i, level in enumerate(levels)}
    pairs = list(zip(gold, predicted, strict=True))
    under = sum(index[p] < index[g] for g, p in pairs) / len(pairs)
    over = sum(index[p] > index[g] for g, p in pairs) / len(pairs)
    return under, over


def accuracy(gold: Sequence[str], predicted: Sequence[str]) -> float:
    pairs = list(zip(gold, predicted, strict=True))
    return sum(g == p for g, p in pairs) / len(pairs)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (`q` in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]

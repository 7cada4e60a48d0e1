"""Grounding quality over many answers, per model: citations per answer, the share of
citations verified, not supported and contradicting, and the errata rate (the answers the
students marked `errata`). Pure: the eval (`bench/eval_grounding.py`) feeds it stored turns or
the labelled cases, and compares the figures with a committed baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aircoach.grounding.models import GroundingResult

# The shares a change may lower (or, for the failure shares, raise) before the eval fails.
TOLERANCE = 0.02


@dataclass
class Tally:
    answers: int = 0
    citations: int = 0
    verified: int = 0
    not_supported: int = 0
    contradicts: int = 0
    errata: int = 0

    def add(self, grounding: GroundingResult | None, voto: str | None = None) -> None:
        self.answers += 1
        self.errata += voto == "errata"
        if grounding is None:
            return
        self.citations += len(grounding.citations)
        for check in grounding.citations:
            self.verified += check.verified
            self.not_supported += check.reason == "not_supported"
            self.contradicts += check.reason == "contradicts"

    def figures(self) -> dict[str, float | int]:
        def share(part: int, whole: int) -> float:
            return round(part / whole, 4) if whole else 0.0

        return {
            "answers": self.answers,
            "citations_per_answer": share(self.citations, self.answers),
            "verified_share": share(self.verified, self.citations),
            "not_supported_share": share(self.not_supported, self.citations),
            "contradicts_share": share(self.contradicts, self.citations),
            "errata_rate": share(self.errata, self.answers),
        }


def per_model(
    answers: Iterable[tuple[str, GroundingResult | None, str | None]],
) -> dict[str, dict[str, float | int]]:
    """The figures of each model from `(model, grounding, voto)` per answer."""
    tallies: dict[str, Tally] = {}
    for model, grounding, voto in answers:
        tallies.setdefault(model, Tally()).add(grounding, voto)
    return {model: tally.figures() for model, tally in sorted(tallies.items())}


# Compared with the baseline: shares where higher is better, and those where lower is.
_HIGHER_IS_BETTER = ("verified_share", "agreement", "precision", "recall")
_LOWER_IS_BETTER = (
    "not_supported_share",
    "contradicts_share",
    "errata_rate",
    "false_unverified",
)


def regressions(
    current: Mapping[str, Mapping[str, float | int]],
    baseline: Mapping[str, Mapping[str, float | int]],
    tolerance: float = TOLERANCE,
) -> list[str]:
    """What got worse than the baseline by more than `tolerance` (absolute, on shares), per
    group the baseline has; a group the baseline has and the report lacks is one too."""
    found = []
    for group, before in baseline.items():
        now = current.get(group)
        if now is None:
            found.append(f"{group}: missing from the report")
            continue
        for name in sorted(set(before) & set(now)):
            better_high = name.startswith(_HIGHER_IS_BETTER)
            if not better_high and name not in _LOWER_IS_BETTER:
                continue
            change = float(now[name]) - float(before[name])
            worse = -change if better_high else change
            if worse > tolerance:
                found.append(f"{group}: {name} {before[name]} -> {now[name]}")
    return found

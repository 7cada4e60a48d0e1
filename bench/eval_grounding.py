"""Evaluation of the citation guard on the labelled set of `tests/grounding/data/` (written
and labelled before the guard; see its README).

Each case's answer is checked against its context (its `sources`; the earlier answers are not
context) by the guard the app runs (`aircoach.grounding.guard.check`), and the verdicts are
compared with the labels. "Positive" is a citation flagged unverified:

- precision: of the citations the guard flags, how many are truly not in the context;
- recall: of the citations truly not in the context, how many the guard flags (a citation it
  does not even find counts as missed);
- false unverified: citations that are in the context (under some written variant) and are
  flagged anyway: the aim is none.

Extraction is scored too (by canonical key): a citation found that nobody labelled, or a
labelled one not found.

    python bench/eval_grounding.py                 # the held-out half (split "test")
    python bench/eval_grounding.py --split dev     # the half the guard was tuned on
    python bench/eval_grounding.py --split all --errors
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aircoach.grounding.guard import ContextIndex, Source, check  # noqa: E402

DATA = ROOT / "tests" / "grounding" / "data" / "grounding_cases.jsonl"


@dataclass
class Tally:
    cases: int = 0
    expected: int = 0
    found: int = 0
    matched: int = 0
    true_flags: int = 0  # unverified, flagged
    missed: int = 0  # unverified, not flagged (or not found)
    false_flags: int = 0  # flagged, though in the context (or not a citation at all)
    false_unverified: int = 0  # in the context under some variant, flagged anyway
    agree: int = 0  # matched citations whose verdict is the label
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, case: dict[str, Any], found: dict[str, bool]) -> None:
        self.cases += 1
        expected = {e["key"]: e["verified"] for e in case["expected"]}
        self.expected += len(expected)
        self.found += len(found)
        for key, verified in expected.items():
            if key in found:
                self.matched += 1
                self.agree += found[key] == verified
            flagged = key in found and not found[key]
            if not verified:
                self.true_flags += flagged
                self.missed += not flagged
            elif flagged:
                self.false_flags += 1
                self.false_unverified += 1
            if key not in found or found[key] != verified:
                got = "not found" if key not in found else f"verified={found[key]}"
                self.errors.append(f"{case['id']}: {key!r} labelled verified={verified}, {got}")
        for key, verified in found.items():
            if key not in expected:
                self.false_flags += not verified
                self.errors.append(
                    f"{case['id']}: {key!r} found (verified={verified}), not labelled"
                )


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.3f}" if whole else "n/a"


def evaluate(cases: list[dict[str, Any]]) -> Tally:
    tally = Tally()
    started = time.perf_counter()
    for case in cases:
        sources = [
            Source(s["kind"], f"{s['kind']}-{i}", s["text"]) for i, s in enumerate(case["sources"])
        ]
        result = check(case["answer"], ContextIndex.of(sources))
        found = {c.key: c.verified for c in result.citations} if result else {}
        tally.add(case, found)
    tally.seconds = time.perf_counter() - started
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["test", "dev", "all"], default="test")
    parser.add_argument("--errors", action="store_true", help="list every disagreement")
    args = parser.parse_args()
    rows = [json.loads(line) for line in DATA.read_text("utf-8").splitlines() if line.strip()]
    cases = [r for r in rows if args.split == "all" or r["split"] == args.split]
    t = evaluate(cases)
    flagged = t.true_flags + t.false_flags
    print(f"split {args.split}: {t.cases} cases, {t.expected} labelled citations")
    print(
        f"extraction: found {t.found}, matched {t.matched}: precision "
        f"{ratio(t.matched, t.found)}, recall {ratio(t.matched, t.expected)}"
    )
    print(
        f"guard (positive = unverified): flagged {flagged}, precision "
        f"{ratio(t.true_flags, flagged)}, recall {ratio(t.true_flags, t.true_flags + t.missed)} "
        f"({t.true_flags} of {t.true_flags + t.missed} unverified citations flagged)"
    )
    print(
        f"false unverified on citations in the context: {t.false_unverified}; verdicts "
        f"agreeing with the label: {t.agree}/{t.matched}"
    )
    print(f"time: {t.seconds * 1000:.1f} ms for {t.cases} cases")
    if args.errors:
        for error in t.errors:
            print("  " + error)


if __name__ == "__main__":
    main()

"""Evaluation of the citation guard, with a JSON report compared to a committed baseline.

Three inputs:

- the labelled set of `tests/grounding/data/grounding_cases.jsonl` (written and labelled
  before the guard; see its README): a label says whether the context holds the citation,
  so it is scored at that level (a citation counts as flagged when its reason is
  `not_in_context` or `article_not_in_context`); the citations the fit check adds
  (`not_supported`, `contradicts`) are counted apart. "Positive" is a citation flagged:
  precision, recall, and false flags on citations the context holds;
- the failing-by-design set `tests/grounding/data/failing_cases.jsonl`: answers written to
  fail in each way (not in the context, article not in the context, not supported,
  contradicting) and a few right ones, each with the reason expected: agreement per reason;
- optionally stored turns (`--turns FILE.jsonl`: one stored turn per line, as
  `/api/history` or `/api/feedback` return them, with `model`, `grounding` and `feedback`):
  per model, citations per answer, the share verified, not supported and contradicting, and
  the errata rate from the students' feedback.

The report (`--report PATH`) is JSON: the pipeline version (prompt version of the shipped
docs, model, provider, temperature, code version) and the figures per group (`labelled`,
`failing`, `model:<name>`). `--baseline PATH` compares it with a committed baseline and exits
1 when a share got worse by more than the tolerance (`aircoach.grounding.metrics.TOLERANCE`,
0.02 absolute).

    python bench/eval_grounding.py                 # the held-out half (split "test")
    python bench/eval_grounding.py --split dev     # the half the guard was tuned on
    python bench/eval_grounding.py --split all --errors
    python bench/eval_grounding.py --split all --report out.json \
        --baseline tests/grounding/data/eval_baseline.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aircoach.grounding.guard import ContextIndex, Source, check  # noqa: E402
from aircoach.grounding.metrics import per_model, regressions  # noqa: E402
from aircoach.grounding.models import GroundingResult  # noqa: E402
from aircoach.prompts.store import build_prompt  # noqa: E402

DATA = ROOT / "tests" / "grounding" / "data" / "grounding_cases.jsonl"
FAILING = ROOT / "tests" / "grounding" / "data" / "failing_cases.jsonl"
PROMPT_DOCS = ROOT / "prompt_docs"
REASONS = ("not_in_context", "article_not_in_context", "not_supported", "contradicts", None)
# A labelled "verified: false" says the context does not hold the citation.
_NOT_HELD = ("not_in_context", "article_not_in_context")


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
    unfit: int = 0  # held by the context, but not supported or contradicting
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


def _checked(case: dict[str, Any]) -> GroundingResult | None:
    sources = [
        Source(s["kind"], f"{s['kind']}-{i}", s["text"]) for i, s in enumerate(case["sources"])
    ]
    return check(case["answer"], ContextIndex.of(sources), case.get("question", ""))


def evaluate(cases: list[dict[str, Any]]) -> Tally:
    tally = Tally()
    started = time.perf_counter()
    for case in cases:
        result = _checked(case)
        checks = result.citations if result else []
        found = {c.key: c.reason not in _NOT_HELD for c in checks}
        tally.unfit += sum(c.reason in ("not_supported", "contradicts") for c in checks)
        tally.add(case, found)
    tally.seconds = time.perf_counter() - started
    return tally


def evaluate_failing(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Per expected reason: how many citations, and how many got exactly that reason."""
    expected = {str(r): 0 for r in REASONS}
    agreed = {str(r): 0 for r in REASONS}
    errors = []
    for case in cases:
        result = _checked(case)
        got = {c.key: c.reason for c in result.citations} if result else {}
        for e in case["expected"]:
            reason = str(e["reason"])
            expected[reason] += 1
            if e["key"] in got and got[e["key"]] == e["reason"]:
                agreed[reason] += 1
            else:
                errors.append(
                    f"{case['id']}: {e['key']!r} expected {reason}, got "
                    f"{got.get(e['key'], 'not found')}"
                )
    total = sum(expected.values())
    return {
        "cases": len(cases),
        "citations": total,
        "agreement": round(sum(agreed.values()) / total, 4) if total else 0.0,
        **{
            f"agreement_{r}": round(agreed[r] / expected[r], 4) if expected[r] else 0.0
            for r in expected
        },
        "errors": errors,
    }


def stored_turns(path: Path) -> dict[str, dict[str, float | int]]:
    """Per model, from stored turns (one JSON object a line)."""
    answers = []
    for line in path.read_text("utf-8").splitlines():
        if not line.strip():
            continue
        turn = json.loads(line)
        grounding = turn.get("grounding")
        feedback = turn.get("feedback") or {}
        answers.append(
            (
                str(turn.get("model") or "unknown"),
                GroundingResult.model_validate(grounding) if grounding else None,
                turn.get("voto") or feedback.get("voto"),
            )
        )
    return {f"model:{name}": figures for name, figures in per_model(answers).items()}


def pipeline(code_version: str | None = None) -> dict[str, Any]:
    """What produced the figures: the shipped prompt docs' version, the model settings
    (`MODEL_NAME`, `MODEL_PROVIDER`, `MODEL_TEMPERATURE`) and the code version."""
    contents = {
        p.relative_to(PROMPT_DOCS).as_posix(): p.read_text("utf-8")
        for p in sorted(PROMPT_DOCS.rglob("*"))
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(PROMPT_DOCS).parts)
    }
    return {
        "prompt_version": build_prompt(contents)[1],
        "model": os.environ.get("MODEL_NAME", "gemini-2.5-flash"),
        "provider": os.environ.get("MODEL_PROVIDER", "gemini"),
        "temperature": float(os.environ.get("MODEL_TEMPERATURE", "0.3")),
        "code_version": code_version or os.environ.get("CODE_VERSION"),
    }


def _git_commit() -> str | None:
    try:
        ran = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except OSError:
        return None
    return ran.stdout.strip() or None


def report(
    split: str, turns: Path | None = None, code_version: str | None = None
) -> dict[str, Any]:
    """The JSON report: the pipeline and the figures per group."""
    rows = [json.loads(line) for line in DATA.read_text("utf-8").splitlines() if line.strip()]
    labelled = evaluate([r for r in rows if split == "all" or r["split"] == split])
    failing_rows = [
        json.loads(line) for line in FAILING.read_text("utf-8").splitlines() if line.strip()
    ]
    failing = evaluate_failing(failing_rows)
    flagged = labelled.true_flags + labelled.false_flags
    groups: dict[str, dict[str, Any]] = {
        "labelled": {
            "cases": labelled.cases,
            "citations": labelled.expected,
            "precision": round(labelled.true_flags / flagged, 4) if flagged else 0.0,
            "recall": round(labelled.true_flags / (labelled.true_flags + labelled.missed), 4)
            if labelled.true_flags + labelled.missed
            else 0.0,
            "agreement": round(labelled.agree / labelled.matched, 4) if labelled.matched else 0.0,
            "false_unverified": labelled.false_unverified,
            "not_supported_or_contradicting": labelled.unfit,
        },
        "failing": {k: v for k, v in failing.items() if k != "errors"},
    }
    if turns is not None:
        groups.update(stored_turns(turns))
    return {
        "pipeline": pipeline(code_version),
        "split": split,
        "groups": groups,
        "errors": labelled.errors + failing["errors"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["test", "dev", "all"], default="test")
    parser.add_argument("--errors", action="store_true", help="list every disagreement")
    parser.add_argument("--turns", type=Path, help="stored turns, one JSON object a line")
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--baseline", type=Path, help="fail on a drop against this report")
    args = parser.parse_args(argv)
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
    full = report(args.split, args.turns, os.environ.get("CODE_VERSION") or _git_commit())
    failing = full["groups"]["failing"]
    print(
        f"failing-by-design set: {failing['cases']} cases, agreement {failing['agreement']:.3f} "
        + ", ".join(f"{r} {failing[f'agreement_{r}']:.3f}" for r in map(str, REASONS))
    )
    print(f"labelled citations held but not supported or contradicting: {t.unfit}")
    for group, figures in full["groups"].items():
        if group.startswith("model:"):
            print(f"{group}: {json.dumps(figures)}")
    if args.errors:
        for error in full["errors"]:
            print("  " + error)
    if args.report:
        args.report.write_text(json.dumps(full, indent=2, ensure_ascii=False) + "\n", "utf-8")
    if args.baseline:
        baseline = json.loads(args.baseline.read_text("utf-8"))
        worse = regressions(full["groups"], baseline["groups"])
        for line in worse:
            print(f"REGRESSION {line}")
        if worse:
            sys.exit(1)


if __name__ == "__main__":
    main()

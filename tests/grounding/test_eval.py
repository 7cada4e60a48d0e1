"""The grounding eval: the failing-by-design set, the per-model figures from stored turns, the
JSON report with its pipeline version, and the comparison with the committed baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aircoach.grounding.metrics import TOLERANCE, per_model, regressions
from aircoach.grounding.models import CitationCheck, GroundingResult
from bench.eval_grounding import FAILING, REASONS, main, report

BASELINE = Path(__file__).parent / "data" / "eval_baseline.json"


def _failing_cases() -> list[dict]:
    return [json.loads(line) for line in FAILING.read_text("utf-8").splitlines() if line.strip()]


def test_the_failing_set_fails_in_each_way():
    cases = _failing_cases()
    reasons = [e["reason"] for case in cases for e in case["expected"]]
    assert sum(r is not None for r in reasons) >= 40
    for reason in REASONS:
        assert reasons.count(reason) >= (5 if reason is None else 8), reason
    assert len({case["id"] for case in cases}) == len(cases)
    for case in cases:
        assert set(case) == {"id", "question", "answer", "sources", "expected"}


def test_the_report_matches_the_baseline_within_the_tolerance():
    current = report("all")
    baseline = json.loads(BASELINE.read_text("utf-8"))
    assert set(current["pipeline"]) == {
        "prompt_version",
        "model",
        "provider",
        "temperature",
        "code_version",
    }
    # The pipeline says what produced the figures (read beside them in a trend); a new prompt
    # version alone is not a regression: the figures are compared, not the versions.
    assert regressions(current["groups"], baseline["groups"]) == []
    failing = current["groups"]["failing"]
    assert failing["cases"] >= 50 and failing["agreement"] >= 0.9


def test_a_drop_beyond_the_tolerance_is_a_regression():
    baseline = {"failing": {"agreement": 0.95, "cases": 55}, "model:x": {"errata_rate": 0.1}}
    slight = {
        "failing": {"agreement": 0.95 - TOLERANCE / 2, "cases": 40},
        "model:x": {"errata_rate": 0.1},
    }
    assert regressions(slight, baseline) == []
    worse = {"failing": {"agreement": 0.9, "cases": 55}, "model:x": {"errata_rate": 0.2}}
    assert regressions(worse, baseline) == [
        "failing: agreement 0.95 -> 0.9",
        "model:x: errata_rate 0.1 -> 0.2",
    ]
    assert regressions({"failing": baseline["failing"]}, baseline) == [
        "model:x: missing from the report"
    ]


def _result(*reasons: str | None) -> GroundingResult:
    checks = [
        CitationCheck(text=f"c{i}", key=f"c{i}", verified=r is None, reason=r)
        for i, r in enumerate(reasons)
    ]
    return GroundingResult(citations=checks, unverified=[c.text for c in checks if not c.verified])


def test_figures_per_model_from_stored_turns():
    figures = per_model(
        [
            ("a", _result(None, None, "not_supported", "contradicts"), "errata"),
            ("a", None, None),
            ("b", _result(None), "utile"),
            ("b", _result("not_in_context"), None),
        ]
    )
    assert figures == {
        "a": {
            "answers": 2,
            "citations_per_answer": 2.0,
            "verified_share": 0.5,
            "not_supported_share": 0.25,
            "contradicts_share": 0.25,
            "errata_rate": 0.5,
        },
        "b": {
            "answers": 2,
            "citations_per_answer": 1.0,
            "verified_share": 0.5,
            "not_supported_share": 0.0,
            "contradicts_share": 0.0,
            "errata_rate": 0.0,
        },
    }


def test_the_bench_writes_the_report_and_fails_on_a_worse_baseline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CODE_VERSION", "abc1234")
    turns = tmp_path / "turns.jsonl"
    turns.write_text(
        json.dumps(
            {
                "model": "gemini-2.5-flash",
                "grounding": _result(None, "contradicts").model_dump(),
                "feedback": {"voto": "errata", "commento": None, "at": "2026-01-01T00:00:00Z"},
            }
        )
        + "\n",
        "utf-8",
    )
    out = tmp_path / "report.json"
    args = ["--split", "all", "--turns", str(turns)]
    main([*args, "--report", str(out), "--baseline", str(BASELINE)])
    written = json.loads(out.read_text("utf-8"))
    assert written["pipeline"]["code_version"] == "abc1234"
    assert written["groups"]["model:gemini-2.5-flash"]["errata_rate"] == 1.0
    assert written["groups"]["model:gemini-2.5-flash"]["contradicts_share"] == 0.5
    capsys.readouterr()
    # A baseline better than today: the bench exits 1 and says what dropped.
    better = json.loads(BASELINE.read_text("utf-8"))
    better["groups"]["model:gemini-2.5-flash"] = {"contradicts_share": 0.0, "errata_rate": 0.0}
    (tmp_path / "better.json").write_text(json.dumps(better), "utf-8")
    with pytest.raises(SystemExit) as exited:
        main([*args, "--baseline", str(tmp_path / "better.json")])
    assert exited.value.code == 1
    assert (
        "REGRESSION model:gemini-2.5-flash: contradicts_share 0.0 -> 0.5" in capsys.readouterr().out
    )

"""The labelled set of the grounding guard is well formed (`data/README.md`)."""

from __future__ import annotations

import json
from pathlib import Path

CASES = Path(__file__).parent / "data" / "grounding_cases.jsonl"
SOURCE_KINDS = {"docs", "manual", "tool", "history_tool"}


def load_cases() -> list[dict]:
    return [json.loads(line) for line in CASES.read_text("utf-8").splitlines() if line.strip()]


def test_the_set_is_large_enough_and_covers_what_the_issue_asks():
    cases = load_cases()
    assert len(cases) >= 60
    ids = [case["id"] for case in cases]
    assert len(ids) == len(set(ids))
    assert {case["split"] for case in cases} == {"dev", "test"}
    expected = [e for case in cases for e in case["expected"]]
    assert any(not e["verified"] for e in expected) and any(e["verified"] for e in expected)
    # The seed's failure, a citation only in the history, and answers that cite nothing.
    seed = next(case for case in cases if case["id"] == "seed-197-vs-199")
    assert seed["expected"] == [
        {"text": "Legge 197/2022", "key": "legge 197/2022", "verified": False}
    ]
    assert any(s["kind"] == "history_tool" for case in cases for s in case["sources"])
    assert sum(1 for case in cases if not case["expected"]) >= 5
    # Variants: several written forms of one key.
    texts_by_key: dict[str, set[str]] = {}
    for e in expected:
        texts_by_key.setdefault(e["key"], set()).add(e["text"])
    assert len(texts_by_key["legge 199/2025"]) >= 5


def test_every_case_is_well_formed():
    for case in load_cases():
        assert set(case) == {"id", "split", "answer", "sources", "history_answers", "expected"}
        assert all(
            set(s) == {"kind", "text"} and s["kind"] in SOURCE_KINDS for s in case["sources"]
        )
        keys = [e["key"] for e in case["expected"]]
        assert len(keys) == len(set(keys)), case["id"]
        for e in case["expected"]:
            assert set(e) == {"text", "key", "verified"}
            assert e["text"] in case["answer"], (case["id"], e["text"])

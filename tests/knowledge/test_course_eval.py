"""The course eval (issue 34) in the unit suite: at least 80 student-style questions asked of
the offline coach, each scored by the sections its answer must cite; 90 % must pass. The
score is printed (`bench/eval_course.py` runs it alone, `--errors` lists the failures)."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.eval_course import evaluate, load_questions, report

PASS_SHARE = 0.9


def test_the_eval_has_the_questions_the_issue_asks_for():
    questions = load_questions()
    assert len(questions) >= 80
    assert len({q["id"] for q in questions}) == len(questions)
    styles = Counter(q["style"] for q in questions)
    for style in (
        "typo",
        "no accents",
        "follow-up",
        "change of subject",
        "off topic",
        "multi-part",
    ):
        assert styles[style] >= 1, style


async def test_at_least_nine_in_ten_questions_cite_the_right_sections(capsys):
    outcomes = await evaluate()
    with capsys.disabled():
        print("\n" + report(outcomes, errors=True))
    passed = sum(o.passed for o in outcomes)
    assert passed >= PASS_SHARE * len(outcomes), report(outcomes, errors=True)


@pytest.mark.parametrize("section", ["5.12", "5.13", "5.14", "5.15", "7.13", "7.14"])
def test_the_manual_gaps_of_the_issue_are_asked_about(section):
    assert any(section in q["cite"] for q in load_questions())

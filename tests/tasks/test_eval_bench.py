"""`bench/eval_triage.py` runs the labelled e-mails through the engine and prints its figures."""

from __future__ import annotations

from aircoach.services import Services
from bench.eval_triage import evaluate, load, print_report


def test_the_labelled_set_is_split_in_two_halves_and_an_english_set():
    dev, test, english = load("dev"), load("test"), load("en")
    assert len(dev) + len(test) + len(english) == len(load("all")) >= 80 + 20
    assert len(load("it")) == len(dev) + len(test)
    assert abs(len(dev) - len(test)) <= 1
    assert {r["id"] for r in dev}.isdisjoint(r["id"] for r in test)
    assert all(r["language"] == "en" for r in english)


async def test_the_bench_prints_every_figure(settings, capsys):
    services = Services.build(settings)
    report = await evaluate(services, load("dev")[:4], "dev")
    assert len(report.outcomes) == 4 and all(o.run.source == "eval" for o in report.outcomes)
    print_report(report, services, per_label=True, errors=True)
    out = capsys.readouterr().out
    for figure in (
        "micro F1",
        "macro F1",
        "Hamming loss",
        "kappa",
        "under-triage",
        "sentiment  accuracy",
        "language   accuracy",
        "share sent to a person",
        "validation-error rate",
        "retry rate",
        "dead-letter rate",
        "p50",
    ):
        assert figure in out

"""`bench/eval_triage.py` runs the labelled e-mails through the engine and prints its figures."""

from __future__ import annotations

from aircoach.services import Services
from bench.eval_triage import evaluate, load, print_report


def test_the_labelled_set_is_split_in_two_halves():
    dev, test = load("dev"), load("test")
    assert len(dev) + len(test) == len(load("all")) >= 80
    assert abs(len(dev) - len(test)) <= 1
    assert {r["id"] for r in dev}.isdisjoint(r["id"] for r in test)


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
        "validation-error rate",
        "retry rate",
        "dead-letter rate",
        "p50",
    ):
        assert figure in out

"""Evaluation of the e-mail triage on the labelled e-mails of `bench/data/triage_eval.jsonl`
(written and labelled before any rule was tuned; see bench/data/README.md).

Every e-mail goes through the real engine (candidates, stages, fallback policy, SQLite store in
a temporary folder) with the configured models: with no settings that is the offline,
rule-based triage; set MODEL_PROVIDER (and its key) to evaluate a real model the same way.

    python bench/eval_triage.py                 # the held-out Italian half (split "test")
    python bench/eval_triage.py --split dev     # the half the offline cues were tuned on
    python bench/eval_triage.py --split en      # the English e-mails
    python bench/eval_triage.py --split all --per-label --errors

Figures: topics micro/macro F1, Hamming loss and exact match (per topic with --per-label:
precision, recall, F1); priority Cohen's kappa (plain and linearly weighted) and
under-/over-triage rates; sentiment and language accuracy; the share sent to a person
(low confidence or no valid output, at TASK_REVIEW_BELOW); validation-error, retry and
dead-letter rates; latency per e-mail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aircoach.services import Services  # noqa: E402
from aircoach.settings import Settings  # noqa: E402
from aircoach.tasks.engine import TaskFailed  # noqa: E402
from aircoach.tasks.evaluation import (  # noqa: E402
    accuracy,
    cohen_kappa,
    multilabel_scores,
    percentile,
    triage_rates,
)
from aircoach.tasks.records import TaskRun  # noqa: E402

DATA = ROOT / "bench" / "data" / "triage_eval.jsonl"
TASK = "email_triage"


@dataclass
class Outcome:
    row: dict[str, Any]
    run: TaskRun
    latency_ms: float

    @property
    def topics(self) -> set[str]:
        return {t["label"] for t in self.run.output["topics"]} if self.run.output else set()


@dataclass
class Report:
    split: str
    outcomes: list[Outcome] = field(default_factory=list)


def load(split: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in DATA.read_text("utf-8").splitlines() if line.strip()]
    if split == "all":
        return rows
    if split == "it":
        return [r for r in rows if r.get("language", "it") == "it"]
    return [r for r in rows if r["split"] == split]


async def evaluate(services: Services, rows: list[dict[str, Any]], split: str) -> Report:
    snapshot = await services.prompts.current()
    definition = services.tasks_for(snapshot).get(TASK)
    if definition is None:
        raise SystemExit(f"no task {TASK!r} in the docs")
    report = Report(split)
    for row in rows:
        task_input = definition.kind.input_model.model_validate(
            {"subject": row["subject"], "from": row["from"], "body": row["body"]}
        )
        started = time.perf_counter()
        try:
            run = await services.task_engine.run(
                definition, task_input, caller="eval", source="eval"
            )
        except TaskFailed as failed:
            run = failed.run
        report.outcomes.append(Outcome(row, run, (time.perf_counter() - started) * 1000))
    return report


def print_report(report: Report, services: Services, *, per_label: bool, errors: bool) -> None:
    snapshot_rules = services.tasks_for(services.prompts.snapshot).get(TASK).rules.rules  # type: ignore[union-attr]
    labels = list(snapshot_rules.topics)
    levels = snapshot_rules.priorities
    outcomes = report.outcomes
    answered = [o for o in outcomes if o.run.output is not None]
    version = outcomes[0].run.pipeline_version
    models = sorted({o.run.model or "-" for o in outcomes})
    print(
        f"E-mail triage evaluation: split={report.split} ({len(outcomes)} e-mails), "
        f"model={','.join(models)}, task_version={version.task_version}, "
        f"schema={version.schema_hash}, {version.candidates_version}, {version.stoplist_version}"
    )
    topics = multilabel_scores(
        [set(o.row["topics"]) for o in outcomes], [o.topics for o in outcomes], labels
    )
    print(
        f"  topics     micro F1 {topics.micro_f1:.3f}   macro F1 {topics.macro_f1:.3f}   "
        f"Hamming loss {topics.hamming_loss:.3f}   exact match {topics.exact_match:.3f}"
    )
    if answered:
        gold_p = [o.row["priority"] for o in answered]
        pred_p = [o.run.output["priority"]["value"] for o in answered]  # type: ignore[index]
        under, over = triage_rates(gold_p, pred_p, levels)
        print(
            f"  priority   kappa {cohen_kappa(gold_p, pred_p, levels):.3f}   weighted kappa "
            f"{cohen_kappa(gold_p, pred_p, levels, weighted=True):.3f}   under-triage "
            f"{under:.3f}   over-triage {over:.3f}   accuracy {accuracy(gold_p, pred_p):.3f}"
        )
        gold_s = [o.row["sentiment"] for o in answered]
        pred_s = [o.run.output["sentiment"]["value"] for o in answered]  # type: ignore[index]
        print(f"  sentiment  accuracy {accuracy(gold_s, pred_s):.3f}")
        gold_l = [o.row.get("language", "it") for o in answered]
        pred_l = [o.run.output.get("language") for o in answered]  # type: ignore[union-attr]
        print(f"  language   accuracy {accuracy(gold_l, pred_l):.3f}")
    doubtful = sum(o.run.status == "low_confidence" for o in outcomes)
    dead = sum(o.run.status == "dead_letter" for o in outcomes)
    print(
        f"  review     share sent to a person {(doubtful + dead) / len(outcomes):.3f} "
        f"({doubtful} low confidence, {dead} without a valid output)"
    )
    attempts = [a for o in outcomes for a in o.run.attempts]
    failed_attempts = sum(not a.ok for a in attempts)
    print(
        f"  engine     validation-error rate {failed_attempts / max(1, len(attempts)):.3f} "
        f"({failed_attempts}/{len(attempts)} attempts)   retry rate "
        f"{sum(len(o.run.attempts) > 1 for o in outcomes) / len(outcomes):.3f}   dead-letter "
        f"rate {sum(o.run.status == 'dead_letter' for o in outcomes) / len(outcomes):.3f}   "
        f"warnings per e-mail {sum(len(o.run.warnings) for o in outcomes) / len(outcomes):.2f}"
    )
    latencies = [o.latency_ms for o in outcomes]
    print(
        f"  latency    per e-mail p50 {percentile(latencies, 50):.1f} ms   p95 "
        f"{percentile(latencies, 95):.1f} ms   max {max(latencies):.1f} ms "
        "(engine run: candidates, model, stages, stored run)"
    )
    if per_label:
        for score in topics.per_label:
            print(
                f"    {score.label:<22} P {score.precision:.2f}  R {score.recall:.2f}  "
                f"F1 {score.f1:.2f}  support {score.support}"
            )
    if errors:
        for o in outcomes:
            gold, pred = set(o.row["topics"]), o.topics
            out = o.run.output or {}
            priority = out.get("priority", {}).get("value")
            sentiment = out.get("sentiment", {}).get("value")
            if gold != pred or priority != o.row["priority"] or sentiment != o.row["sentiment"]:
                print(
                    f"    {o.row['id']}: topics -{sorted(gold - pred)} +{sorted(pred - gold)}  "
                    f"priority {o.row['priority']}->{priority}  "
                    f"sentiment {o.row['sentiment']}->{sentiment}"
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["test", "dev", "en", "it", "all"], default="test")
    parser.add_argument("--per-label", action="store_true", help="F1 of every topic")
    parser.add_argument("--errors", action="store_true", help="list the e-mails it got wrong")
    args = parser.parse_args(argv)
    rows = load(args.split)
    with tempfile.TemporaryDirectory() as tmp:
        # The environment's model settings apply; the store is a throwaway SQLite file.
        settings = Settings(data_dir=Path(tmp), mongodb_uri=None, sqlite_path=None)
        services = Services.build(settings)
        report = asyncio.run(evaluate(services, rows, args.split))
        print_report(report, services, per_label=args.per_label, errors=args.errors)


if __name__ == "__main__":
    main()

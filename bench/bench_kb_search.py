"""Latency of the embedded `kb_search` (issue 16): prints figures, asserts nothing.

Queries: the 66 questions of the eval set, the texts of the 126 quiz questions (longer, with
numbers and options' words), and a typo'd copy of each eval question (one letter dropped
from every word of six letters or more). Figures, warm index, on the shipped manual:

- the index alone (`CourseIndex.search`, in this thread);
- the whole embedded tool call as a turn makes it (worker-thread hop, caps, formatting, the
  client shape), one at a time and 16 at once (each call's own latency);
- the index build (what the first search after a docs update pays, in a worker thread).

Run: `.venv/bin/python bench/bench_kb_search.py` (or `make bench`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aircoach.knowledge.library import CourseKnowledge, course_bank
from bench.common import pct
from bench.eval_offline import Coach, load_docs, load_questions

CONCURRENCY = 16
ROUNDS = 5


def queries() -> list[str]:
    evals = [q["query"] for q in load_questions("all")]
    quiz = [q["testo"] for q in course_bank()[0]]
    typos = [
        " ".join(w[:3] + w[4:] if len(w) >= 6 else w for w in query.split()) for query in evals
    ]
    return evals + quiz + typos


def line(label: str, values: list[float]) -> None:
    print(
        f"{label:<38} p50 {pct(values, 50):6.2f} ms  p95 {pct(values, 95):6.2f} ms  "
        f"max {max(values):6.2f} ms  ({len(values)} searches)"
    )


async def main() -> None:
    docs = load_docs()
    builds = []
    for _ in range(5):
        knowledge = CourseKnowledge()
        started = time.perf_counter()
        await knowledge.index_for(docs)
        builds.append((time.perf_counter() - started) * 1000)
    coach = Coach(docs)
    index = await coach.knowledge.index_for(docs)
    texts = queries()
    print(f"{len(texts)} queries, {len(index.passages)} passages, {ROUNDS} rounds")

    alone = []
    for _ in range(ROUNDS):
        for text in texts:
            t = time.perf_counter()
            index.search(text, top_k=5)
            alone.append((time.perf_counter() - t) * 1000)
    line("index only", alone)

    sequential = []
    for _ in range(ROUNDS):
        for text in texts:
            t = time.perf_counter()
            await coach.search(text)
            sequential.append((time.perf_counter() - t) * 1000)
    line("tool call, one at a time", sequential)

    concurrent: list[float] = []
    gate = asyncio.Semaphore(CONCURRENCY)

    async def timed(text: str) -> None:
        async with gate:
            t = time.perf_counter()
            await coach.search(text)
            concurrent.append((time.perf_counter() - t) * 1000)

    for _ in range(ROUNDS):
        await asyncio.gather(*(timed(text) for text in texts))
    line(f"tool call, {CONCURRENCY} at once", concurrent)
    print(f"{'index build':<38} p50 {pct(builds, 50):6.1f} ms  max {max(builds):6.1f} ms")
    print(
        json.dumps(
            {"index_p95_ms": round(pct(alone, 95), 2), "tool_p95_ms": round(pct(sequential, 95), 2)}
        )
    )


if __name__ == "__main__":
    asyncio.run(main())

"""Latency of the course search (issue 34): prints figures, asserts nothing.

The index alone (`CourseIndex.search`, warm, in this thread) on the questions of
`tests/knowledge/course_eval.jsonl` (every one, `before` questions included), over:

- the shipped manual and quiz explanations;
- a generated manual 100 times larger: every section copied 100 times under new ids, each copy
  with a tenth of its words swapped for words of other sections (a copy is not a duplicate,
  and the vocabulary keeps the manual's Italian), plus the same explanations.

Run: `.venv/bin/python bench/bench_course_search.py`.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aircoach.knowledge.index import CourseIndex, passages_of
from aircoach.knowledge.library import course_bank
from aircoach.knowledge.manual import Section, parse_manual
from bench.common import pct
from bench.eval_course import load_docs, load_questions

SCALE = 100
ROUNDS = 5
SWAPPED = 0.1


def grown(sections: list[Section], scale: int) -> list[Section]:
    rng = random.Random(34)
    vocabulary = [w for s in sections for w in s.text.split()]
    copies = []
    for n in range(scale):
        for s in sections:
            said = s.text.split()
            for _ in range(max(1, int(len(said) * SWAPPED))):
                said[rng.randrange(len(said))] = rng.choice(vocabulary)
            copies.append(
                Section(f"{s.id}.{n}", s.title, s.capitolo, s.materia, " ".join(said), s.doc)
            )
    return copies


def measure(label: str, index: CourseIndex, queries: list[str]) -> None:
    for query in queries:  # warm: every query's stems cached, as in a running process
        index.search(query, top_k=5)
    times = []
    for _ in range(ROUNDS):
        for query in queries:
            started = time.perf_counter()
            index.search(query, top_k=5)
            times.append((time.perf_counter() - started) * 1000)
    print(
        f"{label:<34} p50 {pct(times, 50):7.2f} ms  p95 {pct(times, 95):7.2f} ms  "
        f"max {max(times):7.2f} ms  ({len(times)} searches, {len(index.passages)} passages)"
    )


def main() -> None:
    questions, chapters = course_bank()
    sections = parse_manual(load_docs())
    queries = [t for q in load_questions() for t in [*q["before"], q["query"]]]
    for label, manual in (("manual", sections), (f"manual x{SCALE}", grown(sections, SCALE))):
        started = time.perf_counter()
        index = CourseIndex(passages_of(manual, questions, chapters), label)
        build_ms = (time.perf_counter() - started) * 1000
        print(f"{label}: index built in {build_ms:.0f} ms")
        measure(f"search, {label}", index, queries)


if __name__ == "__main__":
    main()

"""Figures for the forgiving quiz search (issue 13): prints, asserts nothing.

A bank of 10,000 questions is generated from the words of the demo bank (deterministic
seed), loaded into SQLite and into MongoDB (nx-27017 on loopback, real PyMongo async
driver), and searched with a mix of queries a student types: a word as written, without
its accents, in the plural, with one typo, two or three words, and words that match
nothing. Each figure is the whole `QuizStore.search_text` call (plan, term lookup, ranking,
fetching the best 20 questions), p50 and p95 over the queries. nx-27017 is a wire-protocol
stand-in that scans in Python: its figures say the MongoDB code path works at this size, not
how fast a MongoDB server would answer (there both queries are served by indexes: `terms`,
and `capitolo + numero`).

Run: `.venv/bin/python bench/bench_quiz_search.py` (or `make bench`).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aircoach.quiz.bank import DEMO_QUESTIONS
from aircoach.quiz.ports import QuizStore
from aircoach.services import build_stores
from aircoach.settings import Settings
from aircoach.text import FUZZY_MIN_LETTERS, STOPWORDS, fold
from bench.common import pct

QUESTIONS = 10_000
QUERIES = 400
# nx-27017 evaluates queries in Python over SQLite: a tenth of a second to seconds per search,
# so fewer of the same queries (every kind still represented) keep the run to minutes.
QUERIES_NX = 140
LIMIT = 20
SEED = 13


def vocabulary() -> tuple[list[str], list[str]]:
    bank = json.loads(DEMO_QUESTIONS.read_text("utf-8"))["questions"]
    text = " ".join(
        f"{q['testo']} {q.get('spiegazione', '')} {' '.join(q['risposte'].values())}" for q in bank
    )
    words = [w for w in re.findall(r"[^\W\d_]+", text) if fold(w) not in STOPWORDS]
    topics = sorted({q["argomento"] for q in bank})
    return words, topics


def generate(rng: random.Random, words: list[str], topics: list[str]) -> list[dict[str, Any]]:
    questions = []
    for i in range(QUESTIONS):
        chapter, number = i % 10 + 1, i // 10 + 1
        body = " ".join(rng.choice(words) for _ in range(rng.randint(8, 20)))
        questions.append(
            {
                "capitolo": chapter,
                "numero": number,
                "argomento": rng.choice(topics),
                "difficolta": rng.choice(["facile", "media", "difficile"]),
                "testo": f"{body[0].upper()}{body[1:]}:",
                "risposte": {letter: rng.choice(words) for letter in "abcd"},
                "corretta": rng.choice("abcd"),
                "spiegazione": "generata",
            }
        )
    return questions


def typo(rng: random.Random, word: str) -> str:
    i = rng.randrange(1, len(word) - 1)
    kind = rng.choice(["delete", "swap", "replace", "insert"])
    if kind == "delete":
        return word[:i] + word[i + 1 :]
    if kind == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    letter = rng.choice("abcdefghilmnoprstuvz")
    if kind == "replace":
        return word[:i] + letter + word[i + 1 :]
    return word[:i] + letter + word[i:]


def plural(word: str) -> str:
    swap = {"a": "e", "o": "i", "e": "i", "i": "o"}
    return word[:-1] + swap[word[-1]] if word[-1] in swap else word + "i"


def queries(rng: random.Random, words: list[str]) -> list[tuple[str, str]]:
    long_words = [w for w in words if len(w) >= FUZZY_MIN_LETTERS]
    accented = [w for w in words if fold(w) != w.lower()] or long_words
    kinds = {
        "as written": lambda: rng.choice(words),
        "no accents": lambda: fold(rng.choice(accented)),
        "plural": lambda: plural(rng.choice(long_words)),
        "one typo": lambda: typo(rng, rng.choice(long_words)),
        "two words": lambda: f"{rng.choice(long_words)} {rng.choice(long_words)}",
        "three words": lambda: " ".join(rng.choice(long_words) for _ in range(3)),
        "no match": lambda: rng.choice(["elicottero", "sommergibile", "astronave", "xyzzy"]),
    }
    names = list(kinds)
    return [(kind, kinds[kind]()) for kind in (names[i % len(names)] for i in range(QUERIES))]


async def measure(
    label: str, quiz: QuizStore, questions: list[dict[str, Any]], asked: list[tuple[str, str]]
) -> None:
    start = time.perf_counter()
    for i in range(0, len(questions), 1000):
        await quiz.upsert_questions(questions[i : i + 1000])
    loaded_s = time.perf_counter() - start
    await quiz.search_text("riscaldamento")  # first use out of the figures
    times: dict[str, list[float]] = {}
    found: list[int] = []
    for kind, query in asked:
        start = time.perf_counter()
        result = await quiz.search_text(query, limit=LIMIT)
        times.setdefault(kind, []).append((time.perf_counter() - start) * 1000)
        found.append(len(result))
    every = [t for kind_times in times.values() for t in kind_times]
    print(
        f"  {label:<8} {len(questions):,} questions loaded in {loaded_s:.1f} s; "
        f"{len(every)} searches: p50 {pct(every, 50):.2f} ms, p95 {pct(every, 95):.2f} ms, "
        f"max {max(every):.2f} ms; {sum(found) / len(found):.1f} results on average"
    )
    for kind, kind_times in times.items():
        print(
            f"    {kind:<12} p50 {pct(kind_times, 50):6.2f} ms  p95 {pct(kind_times, 95):6.2f} ms"
        )


async def main() -> None:
    from tests.mongo_server import MongoServer

    rng = random.Random(SEED)
    words, topics = vocabulary()
    questions = generate(rng, words, topics)
    asked = queries(rng, words)
    print(f"Forgiving quiz search, {QUESTIONS:,} generated questions, limit {LIMIT}")
    with tempfile.TemporaryDirectory() as tmp:
        base = Settings(_env_file=None, data_dir=Path(tmp) / "data")
        await measure("sqlite", build_stores(base)[1], questions, asked)
        server = MongoServer(Path(tmp) / "nx")
        server.start()
        try:
            mongo = base.model_copy(
                update={"mongodb_uri": server.uri, "mongodb_db": "bench", "store_timeout_s": 120}
            )
            quiz = build_stores(mongo)[1]
            await measure("mongodb", quiz, questions, asked[:QUERIES_NX])
            await quiz.aclose()  # type: ignore[attr-defined]
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())

"""The cost of the quiz's spaced review for a student with 5,000 attempts, on SQLite (the
embedded store, in a temporary file): a graded answer with its FSRS schedule update
(`QuizService.grade`: the attempt, the record read, the schedule write) and the review list
(`GET /api/quiz/review`'s `QuizService.review_items`), and the progress
(`GET /api/progress`'s `QuizService.progress`: two aggregations of the attempts, the review
records, the bank's chapter counts).

    python bench/bench_review.py [--attempts 5000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aircoach.quiz.bank import chapter_titles, seed_demo_questions  # noqa: E402
from aircoach.quiz.service import QuizService  # noqa: E402
from aircoach.store.sqlite import SqliteAttemptStore, SqliteQuizStore  # noqa: E402
from aircoach.store.sqlite_review import SqliteReviewStore  # noqa: E402
from bench.common import pct  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def run(attempts: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.sqlite3"
        clock = Clock()
        quiz = QuizService(
            SqliteQuizStore(path),
            SqliteAttemptStore(path),
            await chapter_titles(),
            reviews=SqliteReviewStore(path),
            now=clock,
        )
        await seed_demo_questions(quiz.questions)
        bank = await quiz.questions.list_questions(capitolo=None, limit=5000)
        rng = random.Random(33)
        started = time.perf_counter()
        for _ in range(attempts):  # ~5 months of study: an answer every 40 minutes
            q = rng.choice(bank)
            letter = q["corretta"] if rng.random() < 0.7 else "a" if q["corretta"] != "a" else "b"
            await quiz.grade("student", q["capitolo"], q["numero"], letter, turn_id=None)
            clock.now += timedelta(minutes=40)
        fill_s = time.perf_counter() - started
        records = len(await quiz.reviews.records("student"))

        grade_ms, review_ms, progress_ms = [], [], []
        for _ in range(rounds):
            q = rng.choice(bank)
            clock.now += timedelta(minutes=10)  # past the repeat window: the schedule moves
            t = time.perf_counter()
            await quiz.grade("student", q["capitolo"], q["numero"], q["corretta"], turn_id=None)
            grade_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            items = await quiz.review_items("student", 20)
            review_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            progress = await quiz.progress("student")
            progress_ms.append((time.perf_counter() - t) * 1000)
        print(
            f"student with {attempts} attempts ({records} review records), filled in "
            f"{fill_s:.1f} s; {rounds} rounds on SQLite"
        )
        print(
            f"  graded answer + schedule update  p50 {pct(grade_ms, 50):.2f} ms, "
            f"p95 {pct(grade_ms, 95):.2f} ms"
        )
        print(
            f"  review list (limit 20, {len(items)} items)  p50 {pct(review_ms, 50):.2f} ms, "
            f"p95 {pct(review_ms, 95):.2f} ms"
        )
        print(
            f"  progress ({progress.risposte} answers, {progress.viste} seen, readiness "
            f"{progress.prontezza:.0%})  p50 {pct(progress_ms, 50):.2f} ms, "
            f"p95 {pct(progress_ms, 95):.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(run(args.attempts, args.rounds))


if __name__ == "__main__":
    main()

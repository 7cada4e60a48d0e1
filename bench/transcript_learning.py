"""A transcript of the learning loop as a student meets it: the real app in-process on the
embedded defaults (SQLite in a temporary folder, the offline model, the shipped prompt docs),
driven through `POST /api/stream_query` like a client. A chat mock exam ("simulazione
d'esame", the answers "1a 2b 3c ..." in two messages, the grading), then a review session
("ripassiamo", an answer, "perché?", "come sto andando?").

Each user line is printed, then each tool result on one line and the coach's answer (its
first 400 characters, on one line, its line breaks shown as " / ").

    python bench/transcript_learning.py [--seed 33] [--right 0.7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from aircoach.app import create_app  # noqa: E402
from aircoach.auth.tokens import DevIssuer  # noqa: E402
from aircoach.quiz.bank import load_demo_questions  # noqa: E402
from aircoach.services import Services  # noqa: E402
from aircoach.settings import Settings  # noqa: E402

SHOWN_CHARS = 400


def _events(body: str) -> list[dict[str, Any]]:
    """The SSE body's events, as a client parses them."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        data = [line[len("data: ") :] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append(json.loads("\n".join(data)))
    return events


def _line(text: str, limit: int = SHOWN_CHARS) -> str:
    flat = " / ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _tool_line(event: dict[str, Any]) -> str:
    data = event.get("data")
    if isinstance(data, dict) and "esame" in data:
        exam = data["esame"]
        asked = " ".join(f"{q['capitolo']}.{q['numero']}" for q in exam["domande"])
        summary = (
            f"esame {exam['id']}: {len(exam['domande'])} domande ({asked}), "
            f"durata {exam['durata_s']} s, soglia {exam['soglia']}"
        )
    elif isinstance(data, dict) and "esiti" in data:
        wrong = [f"{e['capitolo']}.{e['numero']}" for e in data["esiti"] if not e["corretta"]]
        summary = (
            f"punteggio {data['punteggio']}/{data['totale']}, superato {data['superato']}, "
            f"sbagliate {' '.join(wrong) or '-'}"
        )
    else:
        summary = json.dumps(data, ensure_ascii=False)
    return _line(f"  [tool_result {event.get('tool_name')}] {summary}")


class Student:
    def __init__(self, client: httpx.AsyncClient, token: str):
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}

    async def says(self, query: str) -> list[dict[str, Any]]:
        print(f"STUDENTE: {query}")
        response = await self.client.post(
            "/api/stream_query", json={"query": query}, headers=self.headers
        )
        response.raise_for_status()
        events = _events(response.text)
        for event in events:
            if event["type"] == "tool_result":
                print(_tool_line(event))
        said = "".join(e["content"] for e in events if e["type"] == "agent_message")
        errors = [e for e in events if e["type"] == "error"]
        print(f"COACH: {_line(said) if said else '(nessun testo)'}")
        for error in errors:
            print(_line(f"  [error] {json.dumps(error, ensure_ascii=False)}"))
        print()
        return events


def _exam(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e["data"]["esame"] for e in events if e["type"] == "tool_result")


def _asked(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    for event in events:
        data = event.get("data")
        if event["type"] == "tool_result" and isinstance(data, dict):
            if data.get("question"):
                return data["question"]
            if data.get("questions"):
                return data["questions"][0]
    return None


async def run(seed: int, right_share: float) -> None:
    rng = random.Random(seed)
    keys = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}

    def answer_to(question: dict[str, Any]) -> str:
        key = keys[(question["capitolo"], question["numero"])]
        if rng.random() < right_share:
            return key
        return rng.choice([x for x in sorted(question["risposte"]) if x != key])

    with tempfile.TemporaryDirectory(prefix="aircoach-transcript-") as folder:
        settings = Settings(
            _env_file=None,
            data_dir=Path(folder),
            prompt_docs_dir=ROOT / "prompt_docs",
            tool_env={},
        )
        app = create_app(services=Services.build(settings))
        token = DevIssuer(Path(folder)).mint(
            "studente-1", audience=settings.auth0_audience, ttl_s=3600
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            student = Student(client, token)
            print("=== Simulazione d'esame ===\n")
            exam = _exam(await student.says("Voglio fare una simulazione d'esame"))
            letters = [answer_to(q) for q in exam["domande"]]
            right = sum(
                letter == keys[(q["capitolo"], q["numero"])]
                for letter, q in zip(letters, exam["domande"], strict=True)
            )
            print(f"(the script answers {right} of {len(letters)} right)\n")
            answers = [f"{i}{letter}" for i, letter in enumerate(letters, start=1)]
            half = len(answers) // 2
            await student.says(" ".join(answers[:half]))
            await student.says(" ".join(answers[half:]))

            print("=== Ripasso ===\n")
            asked = _asked(await student.says("ripassiamo"))
            if asked is not None:
                key = keys[(asked["capitolo"], asked["numero"])]
                wrong = next(x for x in sorted(asked["risposte"]) if x != key)
                await student.says(f"boh, la {wrong}")
                await student.says("perché?")
            await student.says("come sto andando?")
            await student.says("su cosa devo esercitarmi?")
            progress = (await client.get("/api/progress", headers=student.headers)).json()
            print(
                _line(
                    f"GET /api/progress: {progress['risposte']} risposte, "
                    f"{progress['corrette']} corrette, viste {progress['viste']} su "
                    f"{progress['domande']}, padroneggiate {progress['padroneggiate']}, "
                    f"prontezza {progress['prontezza']}, deboli {progress['deboli']}"
                )
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--right", type=float, default=0.7, help="share of right answers")
    args = parser.parse_args()
    asyncio.run(run(args.seed, args.right))


if __name__ == "__main__":
    main()

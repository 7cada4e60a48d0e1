"""Evaluation of the course search and of the offline coach's answers on the questions of
`tests/knowledge/kb_eval.jsonl` (written, each with the manual section that should answer it,
and split in two halves before any search code existed: odd ids `dev`, even ids `test`).

Every question goes through the shipped docs (the manual under `prompt_docs/manual/`) and the
real parts: the embedded `kb_search` as `tools.json` declares it (the same handler, caps and
formatting a turn uses), then the offline model, which reads the tool's text and answers.

    python bench/eval_offline.py                 # the held-out half (split "test")
    python bench/eval_offline.py --split dev     # the half the ranking was tuned on
    python bench/eval_offline.py --split all --errors
    python bench/eval_offline.py --phrases       # the quiz phrases students use (issue 33)
    python bench/eval_offline.py --frames        # the bank's topics in everyday frames

Figures: hit@1 and hit@3 of `kb_search` (the expected section is the first result / among
the first three), the share of the offline answers that cite the expected section, the share
of off-topic questions answered "not in the manual", the index build time, and the search
latency (p50/p95 of the index alone and of the whole embedded tool call, warm index).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage  # noqa: E402

from aircoach.knowledge.library import CourseKnowledge, CourseSearch  # noqa: E402
from aircoach.llm.offline import OfflineChatModel  # noqa: E402
from aircoach.tools.backends import load_handler  # noqa: E402
from aircoach.tools.registry import ToolContext, ToolRegistry  # noqa: E402
from aircoach.turn.agent import build_tool  # noqa: E402
from bench.common import pct  # noqa: E402

EVAL = ROOT / "tests" / "knowledge" / "kb_eval.jsonl"
LATENCY_ROUNDS = 20  # every question searched this many times for the latency figures
_CITED = re.compile(r"§ (\d+\.\d+) \(")


def load_docs() -> dict[str, str]:
    root = ROOT / "prompt_docs"
    return {
        p.relative_to(root).as_posix(): p.read_text("utf-8")
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def load_questions(split: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in EVAL.read_text("utf-8").splitlines() if line.strip()]
    return [r for r in rows if split == "all" or r["split"] == split]


class Coach:
    """The offline model with the shipped tools bound, and the embedded kb_search it calls."""

    def __init__(self, docs: dict[str, str]):
        registry = ToolRegistry.from_docs(docs)
        self.specs = registry.enabled(None)
        self.kb = registry.specs["kb_search"]
        self.knowledge = CourseKnowledge()
        self.ctx = ToolContext(
            user_id="eval",  # the quiz tools are never called here
            deps={CourseSearch: self.knowledge.search_in(docs)},
        )
        self.system = SystemMessage(registry.system_prompt("(istruzioni)", self.specs))
        self.model = OfflineChatModel(
            tool_examples={s.name: s.examples for s in self.specs}
        ).bind_tools([build_tool(spec) for spec in self.specs])
        self.docs = docs

    async def search(self, query: str) -> dict[str, Any]:
        out = await load_handler(self.kb)(self.ctx, query=query)
        return out.data

    async def answer(self, query: str) -> tuple[str, list[str]]:
        """The offline answer and the tools it called."""
        messages: list[Any] = [self.system, HumanMessage(query)]
        reply = await self.model.ainvoke(messages)
        called = []
        while reply.tool_calls:
            call = reply.tool_calls[0]
            called.append(call["name"])
            handler = load_handler(next(s for s in self.specs if s.name == call["name"]))
            out = await handler(self.ctx, **call["args"])
            messages += [reply, ToolMessage(out.text, tool_call_id=call["id"], name=call["name"])]
            reply = await self.model.ainvoke(messages)
        return reply.text, called


async def evaluate(split: str, show_errors: bool) -> None:
    docs = load_docs()
    coach = Coach(docs)
    started = time.perf_counter()
    index = await coach.knowledge.index_for(docs)
    build_ms = (time.perf_counter() - started) * 1000
    questions = load_questions(split)
    on_topic = [q for q in questions if q["section"]]
    off_topic = [q for q in questions if not q["section"]]

    hit1 = hit3 = cited_right = 0
    errors = []
    for q in on_topic:
        data = await coach.search(q["query"])
        refs = [item["riferimento"] for item in data["items"]]
        hit1 += refs[:1] == [q["section"]]
        hit3 += q["section"] in refs[:3]
        text, _ = await coach.answer(q["query"])
        cited = _CITED.findall(text)
        cited_right += q["section"] in cited
        if q["section"] not in refs[:3] or q["section"] not in cited:
            errors.append(
                f"  #{q['id']} {q['query']!r}: want {q['section']}, got {refs[:3]}, cited {cited}"
            )
    declined = 0
    for q in off_topic:
        text, _ = await coach.answer(q["query"])
        ok = "Non ho trovato questo argomento" in text
        declined += ok
        if not ok:
            errors.append(f"  #{q['id']} {q['query']!r} (off topic): answered {text[:80]!r}")

    index_ms, tool_ms = [], []
    for _ in range(LATENCY_ROUNDS):
        for q in questions:
            t = time.perf_counter()
            index.search(q["query"], top_k=5)
            index_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await coach.search(q["query"])
            tool_ms.append((time.perf_counter() - t) * 1000)

    n = len(on_topic)
    print(f"split {split}: {n} theory questions, {len(off_topic)} off-topic")
    print(f"  kb_search hit@1            {hit1}/{n} = {hit1 / n:.1%}")
    print(f"  kb_search hit@3            {hit3}/{n} = {hit3 / n:.1%}")
    print(f"  answers citing the section {cited_right}/{n} = {cited_right / n:.1%}")
    if off_topic:
        share = declined / len(off_topic)
        print(f"  off-topic -> no match      {declined}/{len(off_topic)} = {share:.1%}")
    print(f"  index build                {build_ms:.1f} ms ({len(index.passages)} passages)")
    print(
        f"  search, index only         p50 {pct(index_ms, 50):.2f} ms, p95 {pct(index_ms, 95):.2f} ms"
        f" ({len(index_ms)} searches)"
    )
    print(
        f"  search, whole tool call    p50 {pct(tool_ms, 50):.2f} ms, p95 {pct(tool_ms, 95):.2f} ms"
        " (worker thread, caps, formatting)"
    )
    if show_errors and errors:
        print("misses:")
        print("\n".join(errors))


class QuizChat:
    """The offline model with the shipped tools, a quiz and exam service on a SQLite file of
    its own, and a conversation that runs every tool call (as a turn does)."""

    def __init__(self, docs: dict[str, str], services: dict[type, object]):
        registry = ToolRegistry.from_docs(docs)
        self.specs = registry.enabled(None)
        self.ctx = ToolContext(user_id="eval", turn_id="eval", deps=services)
        self.system = SystemMessage(registry.system_prompt("(istruzioni)", self.specs))
        self.model = OfflineChatModel(
            tool_examples={s.name: s.examples for s in self.specs}
        ).bind_tools([build_tool(spec) for spec in self.specs])
        self.messages: list[Any] = [self.system]

    async def say(self, query: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """The reply's text and the (tool, data) results of the turn."""
        self.messages.append(HumanMessage(query))
        reply = await self.model.ainvoke(self.messages)
        results: list[tuple[str, dict[str, Any]]] = []
        while reply.tool_calls:
            self.messages.append(reply)
            final = False
            for call in reply.tool_calls:
                spec = next(s for s in self.specs if s.name == call["name"])
                out = await load_handler(spec)(self.ctx, **call["args"])
                results.append((call["name"], out.data))
                self.messages.append(
                    ToolMessage(out.text, tool_call_id=call["id"], name=call["name"])
                )
                final = final or (spec.return_direct and out.final)
            if final:
                return "", results
            reply = await self.model.ainvoke(self.messages)
        self.messages.append(reply)
        return reply.text, results


def _question(results: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return next((d.get("question") or {}) for name, d in results if name == "domanda_teoria")


async def evaluate_phrases() -> None:
    """Each phrase of issue 33 in a short conversation, checked; prints one line per phrase."""
    import tempfile

    from aircoach.quiz.bank import chapter_titles, seed_demo_questions
    from aircoach.quiz.exams import ExamService
    from aircoach.quiz.service import QuizService
    from aircoach.store.sqlite import SqliteAttemptStore, SqliteQuizStore
    from aircoach.store.sqlite_exams import SqliteExamStore
    from aircoach.store.sqlite_review import SqliteReviewStore

    docs = load_docs()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "eval.sqlite3"
        quiz = QuizService(
            SqliteQuizStore(path),
            SqliteAttemptStore(path),
            await chapter_titles(),
            reviews=SqliteReviewStore(path),
        )
        await seed_demo_questions(quiz.questions)
        deps = {QuizService: quiz, ExamService: ExamService(quiz, SqliteExamStore(path))}

        async def case(name: str, steps: list[str], check: Any) -> bool:
            chat = QuizChat(docs, deps)
            out: tuple[str, list[tuple[str, dict[str, Any]]]] = ("", [])
            for step in steps:
                out = await chat.say(step)
            ok = bool(check(*out))
            print(f"  {'ok  ' if ok else 'MISS'} {name!r}: {out[0][:70]!r}")
            return ok

        cases = [
            (
                "un'altra",
                ["Dammi la domanda 2 del capitolo 7", "un'altra"],
                lambda t, r: _question(r).get("capitolo") == 7 and _question(r).get("numero") != 2,
            ),
            (
                "un'altra del capitolo 7",
                ["Dammi una domanda del capitolo 3", "un'altra del capitolo 7"],
                lambda t, r: _question(r).get("capitolo") == 7,
            ),
            (
                "salta",
                ["Dammi la domanda 1 del capitolo 1", "salta"],
                lambda t, r: "conta come sbagliata" in t,
            ),
            (
                "non lo so",
                ["Dammi la domanda 1 del capitolo 1", "non lo so"],
                lambda t, r: "conta come sbagliata" in t,
            ),
            (
                "boh, la b",
                ["Dammi la domanda 1 del capitolo 1", "boh, la b"],
                lambda t, r: any(
                    n == "verifica_risposta" and d.get("risposta") == "b" for n, d in r
                ),
            ),
            (
                "1a 2b 3c",
                ["Dammi 3 domande dai capitoli 2, 5 e 7", "1a 2b 3c"],
                lambda t, r: sum(n == "verifica_risposta" for n, _ in r) == 3,
            ),
            (
                "come sto andando?",
                ["Dammi la domanda 1 del capitolo 1", "c", "come sto andando?"],
                lambda t, r: "progressi" in t or "Non hai ancora" in t,
            ),
            (
                "su cosa devo esercitarmi?",
                ["su cosa devo esercitarmi?"],
                lambda t, r: "progressi" in t or "Non hai ancora" in t,
            ),
            (
                "difficile",
                ["Dammi una domanda difficile"],
                lambda t, r: _question(r).get("difficolta") == "difficile",
            ),
            (
                "facile",
                ["Fammi una domanda facile"],
                lambda t, r: _question(r).get("difficolta") == "facile",
            ),
            (
                "perché?",
                ["Dammi la domanda 1 del capitolo 1", "la b", "perché?"],
                lambda t, r: "(Fonte: §" in t and not r,
            ),
            (
                "simulazione d'esame",
                ["Voglio fare una simulazione d'esame"],
                lambda t, r: (
                    len(next(d for n, d in r if n == "domanda_teoria")["esame"]["domande"]) == 30
                ),
            ),
            (
                "simulazione ... con 30 domande / 1a 2b 3c / consegno",
                ["Fammi una simulazione d'esame con 30 domande", "1a 2b 3c", "consegno"],
                lambda t, r: "Esito della simulazione" in t,
            ),
            (
                "dammi 10 domande a caso",
                ["Dammi 10 domande a caso"],
                lambda t, r: "failed" not in str(r) and len(r[0][1].get("questions", [])) == 10,
            ),
        ]
        passed = 0
        for name, steps, check in cases:
            passed += await case(name, steps, check)
        print(f"quiz phrases: {passed}/{len(cases)}")


# Everyday frames a student asks a topic in; `--frames` asks each topic of the quiz bank in
# each one ("{}" alone is the baseline).
FRAMES = (
    "{}",
    "quali sono le caratteristiche di {}?",
    "qual è la funzione di {}?",
    "mi spieghi {}?",
    "mi fai un riassunto su {}?",
    "in che modo si usa {}?",
    "cosa bisogna fare con {}?",
    "come mai {} è importante?",
    "che tipo di {} esiste?",
    "qual è il ruolo di {}?",
    "quali sono i pericoli di {}?",
    "quali errori si fanno con {}?",
    "a cosa bisogna stare attenti con {}?",
    "cosa devo ricordare di {}?",
    "dimmi tutto su {}",
    "definizione di {}",
    "ripassiamo {}",
    "cosa devo sapere su {}?",
    "quanto deve essere {}?",
    "cosa indica {}?",
    "cosa succede se sbaglio {}?",
    "cos'è {} in pratica?",
    "perché si parla di {}?",
    "in quali situazioni conta {}?",
    "quali sono le regole su {}?",
    "cosa prevede la normativa su {}?",
)


async def evaluate_frames() -> None:
    """Per frame: how many of the bank's topics (its questions' `argomento`) find nothing,
    and how many have a section their questions cite (`riferimento`) first and in the top
    three."""
    from aircoach.quiz.bank import load_demo_questions

    docs = load_docs()
    index = await CourseKnowledge().index_for(docs)
    sections: dict[str, set[str]] = {}
    for question in await load_demo_questions():
        if question.get("argomento") and question.get("riferimento"):
            sections.setdefault(question["argomento"], set()).add(question["riferimento"])
    print(f"{len(sections)} topics of the quiz bank, each asked in {len(FRAMES)} frames")
    print("| frame | nothing found | section first | section in top 3 |")
    print("|---|---|---|---|")
    totals = [0, 0, 0]
    for frame in FRAMES:
        empty = first = hit = 0
        for topic, refs in sections.items():
            found = [r["riferimento"] for r in index.search(frame.format(topic), top_k=3)]
            empty += not found
            first += bool(found) and found[0] in refs
            hit += bool(refs & set(found))
        for i, count in enumerate((empty, first, hit)):
            totals[i] += count
        size = len(sections)
        print(f"| {frame.format('X')} | {empty} | {first}/{size} | {hit}/{size} |")
    asked = len(sections) * len(FRAMES)
    print(f"| every frame | {totals[0]} | {totals[1]}/{asked} | {totals[2]}/{asked} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["test", "dev", "all"], default="test")
    parser.add_argument("--errors", action="store_true", help="list the misses")
    parser.add_argument("--phrases", action="store_true", help="the quiz phrases instead")
    parser.add_argument(
        "--frames", action="store_true", help="the bank's topics in everyday frames instead"
    )
    args = parser.parse_args()
    if args.phrases:
        asyncio.run(evaluate_phrases())
    elif args.frames:
        asyncio.run(evaluate_frames())
    else:
        asyncio.run(evaluate(args.split, args.errors))


if __name__ == "__main__":
    main()

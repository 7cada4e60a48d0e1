"""The course eval (issue 34): student-style questions asked of the offline coach, each scored
by the manual sections its answer must cite.

`tests/knowledge/course_eval.jsonl` holds the questions: as written, without accents, with
typos, as keywords, colloquial, through the glossary, follow-ups and changes of subject (the
`before` questions are asked first, in the same conversation), off-topic ones (`cite: []`:
the answer must cite nothing and say the manual does not have it) and questions of several
parts (every section listed must be cited).

Every turn runs the real parts: the shipped docs, the embedded `kb_search` as `tools.json`
declares it, the follow-up rules of a turn (`TurnGrounding`: the topic a retrieval tool
searches first on a follow-up), and the offline model reading the tools' texts. Parallel tool
calls run side by side, as the agent's tool node runs them.

    python bench/eval_course.py [--errors]

`tests/knowledge/test_course_eval.py` runs it in `make test` and prints the score.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from langchain_core.messages import (  # noqa: E402
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from aircoach.grounding.context import ThreadView, TurnGrounding  # noqa: E402
from aircoach.knowledge.library import CourseKnowledge, CourseSearch  # noqa: E402
from aircoach.llm.offline import OfflineChatModel  # noqa: E402
from aircoach.tools.backends import load_handler  # noqa: E402
from aircoach.tools.registry import ToolContext, ToolRegistry  # noqa: E402

EVAL = ROOT / "tests" / "knowledge" / "course_eval.jsonl"
HISTORY_LIMIT = 10
NOT_FOUND = "Non ho trovato questo argomento"
_CITED = re.compile(r"§ (\d+\.\d+) \(")
_MAX_CALL_ROUNDS = 4


def load_docs() -> dict[str, str]:
    root = ROOT / "prompt_docs"
    return {
        p.relative_to(root).as_posix(): p.read_text("utf-8")
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def load_questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EVAL.read_text("utf-8").splitlines() if line.strip()]


class Coach:
    """The offline model with the shipped tools bound, and the embedded kb_search it calls."""

    def __init__(self, docs: dict[str, str]):
        registry = ToolRegistry.from_docs(docs)
        self.specs = {spec.name: spec for spec in registry.enabled(None)}
        self.docs = docs
        self.ctx = ToolContext(
            user_id="eval",  # the quiz tools are never called here
            deps={CourseSearch: CourseKnowledge().search_in(docs)},
        )
        self.system = SystemMessage("(istruzioni)")
        self.model = OfflineChatModel(
            tool_examples={s.name: s.examples for s in self.specs.values()},
            bound_tools=[_openai_tool(spec) for spec in self.specs.values()],
        )

    async def turn(self, history: list[BaseMessage], question: str) -> str:
        """One turn: `history` grows by the turn's messages; the answer's text."""
        thread = ThreadView.of(history, HISTORY_LIMIT)  # type: ignore[arg-type]
        grounding = TurnGrounding(docs=self.docs, thread=thread, question=question)
        ctx = replace(self.ctx, topic=tuple(grounding.topic) if grounding.followup else ())
        history.append(HumanMessage(question))
        for _ in range(_MAX_CALL_ROUNDS):
            reply = self.model.respond([self.system, *history])
            history.append(reply)
            if not reply.tool_calls:
                return reply.text
            outputs = await asyncio.gather(
                *(load_handler(self.specs[c["name"]])(ctx, **c["args"]) for c in reply.tool_calls)
            )
            for call, out in zip(reply.tool_calls, outputs, strict=True):
                history.append(
                    ToolMessage(
                        out.text,
                        tool_call_id=call["id"],
                        name=call["name"],
                        status="success" if out.ok else "error",
                    )
                )
        raise AssertionError(f"no answer after {_MAX_CALL_ROUNDS} rounds of tool calls")


def _openai_tool(spec: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


@dataclass(frozen=True)
class Outcome:
    question: dict[str, Any]
    answer: str
    cited: list[str]

    @property
    def passed(self) -> bool:
        want = self.question["cite"]
        if not want:
            return not self.cited and NOT_FOUND in self.answer
        return all(section in self.cited for section in want)


async def evaluate() -> list[Outcome]:
    coach = Coach(load_docs())
    outcomes = []
    for question in load_questions():
        history: list[BaseMessage] = []
        for earlier in question["before"]:
            await coach.turn(history, earlier)
        answer = await coach.turn(history, question["query"])
        outcomes.append(Outcome(question, answer, _CITED.findall(answer)))
    return outcomes


def report(outcomes: list[Outcome], errors: bool) -> str:
    passed = sum(o.passed for o in outcomes)
    lines = [f"course eval: {passed}/{len(outcomes)} = {passed / len(outcomes):.1%} pass"]
    styles: dict[str, list[bool]] = {}
    for o in outcomes:
        styles.setdefault(o.question["style"], []).append(o.passed)
    for style, results in sorted(styles.items()):
        lines.append(f"  {style:<24} {sum(results)}/{len(results)}")
    if errors:
        for o in outcomes:
            if not o.passed:
                q = o.question
                lines.append(
                    f"  FAIL #{q['id']} {q['query']!r} (after {q['before']}): want {q['cite']}, "
                    f"cited {o.cited}: {o.answer[:160]!r}"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--errors", action="store_true", help="list the questions that fail")
    args = parser.parse_args()
    print(report(asyncio.run(evaluate()), args.errors))


if __name__ == "__main__":
    main()

"""What the agent's graph costs a turn, apart from everything else: the same trivial model (our
offline answer to the peer benchmark's question, in its 20 word chunks) streamed through four
graph shapes, a new thread each run, with the stream modes and durability a turn uses
(`messages` + `updates`, `durability="exit"`), each graph compiled once:

1. a one-task `@entrypoint` (the functional API), the shape of agent-service-toolkit's chatbot
   (the peer benchmark's peer);
2. a `StateGraph` over `MessagesState` with one model node;
3. `langchain.agents.create_agent`, no middleware;
4. `create_agent` with an `awrap_model_call` middleware: the shape of our turn's agent
   (`aircoach/turn/agent.py`) when no tool is on.

Run: `.venv/bin/python bench/bench_agent_shape.py [--runs 400]` (pin it to one idle core with
`taskset -c 1` for steady figures). It prints the median milliseconds a run, CPU-bound.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint
from langgraph.graph import END, START, MessagesState, StateGraph

REPLY = (
    "[modello offline] Non ho informazioni su questo argomento: la ricerca nel manuale del "
    "corso non è attiva in questa richiesta."
)
WARM_UP = 30


class WordModel(BaseChatModel):
    """Streams `REPLY` word by word; does nothing else."""

    @property
    def _llm_type(self) -> str:
        return "words"

    def bind_tools(self, tools: Any, **kwargs: Any) -> WordModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(REPLY))])

    async def _astream(
        self, messages: list[BaseMessage], *args: Any, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for word in re.findall(r"\S+\s*", REPLY):
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))


class Wrap(AgentMiddleware):
    async def awrap_model_call(self, request: Any, handler: Callable[..., Any]) -> Any:
        return await handler(request)


def shapes(model: WordModel) -> dict[str, Any]:
    saver = InMemorySaver()

    @entrypoint(checkpointer=saver)
    async def one_task(inputs: dict[str, Any], *, previous: Any) -> Any:
        messages = (previous or {}).get("messages", []) + inputs["messages"]
        response = await model.ainvoke(messages)
        return entrypoint.final(
            value={"messages": [response]}, save={"messages": [*messages, response]}
        )

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_edge(START, "model")
    graph.add_edge("model", END)
    return {
        "@entrypoint, one task (the peer's chatbot)": one_task,
        "StateGraph(MessagesState), one model node": graph.compile(checkpointer=saver),
        "create_agent, no middleware": create_agent(
            model, [], system_prompt="s", checkpointer=saver
        ),
        "create_agent + awrap_model_call (our turn, no tools)": create_agent(
            model, [], system_prompt="s", middleware=[Wrap()], checkpointer=saver
        ),
    }


async def run_once(graph: Any) -> float:
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    chunks = 0
    start = time.perf_counter()
    async for mode, data in graph.astream(
        {"messages": [HumanMessage("Che cos'è il QNH?")]},
        config,
        stream_mode=["messages", "updates"],
        durability="exit",
    ):
        chunks += mode == "messages" and isinstance(data[0], AIMessageChunk)
    elapsed = time.perf_counter() - start
    assert chunks >= len(re.findall(r"\S+\s*", REPLY)), chunks  # (and a last, empty one)
    return elapsed * 1000


async def main(runs: int) -> None:
    results = {}
    for name, graph in shapes(WordModel()).items():
        times = [await run_once(graph) for _ in range(runs + WARM_UP)][WARM_UP:]
        results[name] = statistics.median(times)
    base = next(iter(results.values()))
    print(f"| graph shape ({runs} runs each) | median ms a run | vs @entrypoint |")
    print("|---|---|---|")
    for name, ms in results.items():
        print(f"| {name} | {ms:.2f} | {ms / base:.2f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    asyncio.run(main(parser.parse_args().runs))

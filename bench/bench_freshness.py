"""Figures for process memory (issue 3): prints, asserts nothing.

1. The warm-path cost of the freshness check (`Memory.ensure_thread` when nothing is new:
   one indexed read of the user's latest turn id), median over 200 warm turns, on SQLite and
   on MongoDB (nx-27017 on loopback, real PyMongo async driver).
2. Memory with 5,000 users through one process with MEMORY_MAX_THREADS=100 (and, for
   comparison, with no practical bound): RSS before/after and the checkpointer's stored bytes.
3. One long warm conversation: checkpointer bytes with and without pruning old checkpoints.

Run: `.venv/bin/python bench/bench_freshness.py` (or `make bench`). Turns use the offline model
and the same calls a chat turn makes: ensure_thread, the agent run, append_turn, record_turn.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from aircoach.llm.offline import OfflineChatModel
from aircoach.services import build_stores
from aircoach.settings import ROOT, Settings
from aircoach.tools.registry import ToolContext
from aircoach.turn.agent import build_agent
from aircoach.turn.memory import Memory
from aircoach.turn.ports import ChatStore
from aircoach.turn.records import Turn
from aircoach.turn.turn import new_turn_id

SYSTEM = "\n\n".join(p.read_text("utf-8") for p in sorted((ROOT / "prompt_docs").glob("*.md")))


def rss_mib() -> float:
    gc.collect()
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def saver_bytes(saver: InMemorySaver) -> int:
    blobs = sum(len(data) for _kind, data in saver.blobs.values())
    checkpoints = sum(
        len(c[1]) + len(m[1])
        for thread in saver.storage.values()
        for namespace in thread.values()
        for c, m, _parent in namespace.values()
    )
    writes = sum(len(w[2][1]) for ws in saver.writes.values() for w in ws.values())
    return blobs + checkpoints + writes


class _CountingChats:
    """The store, counting the reads of recent turns: one per thread rebuilt from it."""

    def __init__(self, inner: ChatStore):
        self.inner = inner
        self.reseeds = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def recent_turns(self, user_id: str, limit: int) -> Any:
        self.reseeds += 1
        return await self.inner.recent_turns(user_id, limit)


class Bench:
    def __init__(self, settings: Settings, memory: Memory, chats: ChatStore):
        self.memory = memory
        self.chats = _CountingChats(chats)
        self.agent = build_agent(
            model=OfflineChatModel(),
            tools=[],
            ctx=ToolContext(user_id="-"),  # no tools here
            system_prompt=SYSTEM,
            checkpointer=memory.checkpointer,
            history_limit=settings.history_limit,
        )
        self.check_s: list[float] = []

    async def turn(self, user: str, query: str) -> None:
        thread = f"{user}:vbench"
        start = time.perf_counter()
        await self.memory.ensure_thread(self.agent, thread, user, self.chats)
        self.check_s.append(time.perf_counter() - start)
        result = await self.agent.ainvoke(
            {"messages": [HumanMessage(query)]}, self.memory.config(thread)
        )
        turn_id = new_turn_id()
        await self.chats.append_turn(
            Turn(
                userId=user,
                human=query,
                system=result["messages"][-1].text,
                timestamp=datetime.now(UTC).isoformat(),
                prompt_version="bench",
                model="offline",
                thread_id=thread,
                turn_id=turn_id,
            )
        )
        self.memory.record_turn(thread, turn_id)


async def warm_path(settings: Settings, label: str) -> None:
    chats = build_stores(settings)[0]
    bench = Bench(settings, Memory(max_threads=100, reseed_turns=settings.history_limit), chats)
    await bench.turn("warm", "Cos'è la portanza?")  # cold: creates the thread
    bench.check_s.clear()
    # history_limit is large here so that no turn of the 200 is a length-triggered reseed.
    for i in range(200):
        await bench.turn("warm", f"domanda {i} sul volo")
    assert bench.chats.reseeds == 0
    checks = sorted(bench.check_s)
    print(
        f"  {label:<8} freshness check on the warm path, 200 turns: median "
        f"{statistics.median(checks) * 1000:.3f} ms, p90 {checks[179] * 1000:.3f} ms"
    )
    # The same read without the memory around it: what the check costs in the store.
    reads = []
    for _ in range(200):
        start = time.perf_counter()
        await chats.latest_turn_ids("warm")
        reads.append(time.perf_counter() - start)
    print(f"  {label:<8} latest_turn_ids alone: median {statistics.median(reads) * 1000:.3f} ms")


async def many_users(settings: Settings, users: int, max_threads: int) -> None:
    chats = build_stores(settings)[0]
    memory = Memory(max_threads=max_threads, reseed_turns=settings.history_limit)
    bench = Bench(settings, memory, chats)
    await bench.turn("warmup", "ciao")  # imports and first-use allocations out of the figure
    before = rss_mib()
    start = time.perf_counter()
    for n in range(users):
        await bench.turn(f"user-{n}", "Che cos'è lo stallo?")
    elapsed = time.perf_counter() - start
    after = rss_mib()
    print(
        f"  {users} users, MEMORY_MAX_THREADS={max_threads}: {memory.checkpointed_threads()} "
        f"threads held, checkpointer {saver_bytes(memory.checkpointer) / 2**20:.2f} MiB, "
        f"RSS {before:.1f} -> {after:.1f} MiB (+{after - before:.1f}), "
        f"{elapsed / users * 1000:.2f} ms/turn"
    )


async def long_conversation(settings: Settings, turns: int) -> None:
    for label, prune in (("pruned (kept: latest)", True), ("all checkpoints kept", False)):
        memory = Memory(max_threads=10, reseed_turns=turns)  # no length-triggered reseed
        if not prune:
            memory.checkpointer.prune = lambda thread_ids, **kwargs: None  # type: ignore[method-assign]
        bench = Bench(settings, memory, build_stores(settings)[0])
        sizes = []
        for i in range(turns):
            await bench.turn(f"long-{prune}", f"domanda numero {i}")
            sizes.append(saver_bytes(memory.checkpointer))
        assert bench.chats.reseeds == 0
        print(
            f"  {turns} warm turns, {label}: checkpointer {sizes[turns // 2 - 1] / 1024:.0f} KiB "
            f"after {turns // 2}, {sizes[-1] / 1024:.0f} KiB after {turns}"
        )


async def main() -> None:
    from tests.mongo_server import MongoServer

    with tempfile.TemporaryDirectory() as tmp:
        base = Settings(_env_file=None, data_dir=Path(tmp) / "data", history_limit=200)
        server = MongoServer(Path(tmp) / "nx")
        server.start()
        try:
            print("Warm-path freshness check")
            await warm_path(base, "sqlite")
            mongo = base.model_copy(update={"mongodb_uri": server.uri, "mongodb_db": "bench"})
            await warm_path(mongo, "mongodb")
        finally:
            server.stop()

        bounded: dict[str, Any] = {"history_limit": 10}
        print("Memory, 5,000 users through one process (SQLite store)")
        small = base.model_copy(update={**bounded, "data_dir": Path(tmp) / "a"})
        await many_users(small, 5000, 100)
        large = base.model_copy(update={**bounded, "data_dir": Path(tmp) / "b"})
        await many_users(large, 5000, 1_000_000)

        print("One long warm conversation")
        await long_conversation(base.model_copy(update={"data_dir": Path(tmp) / "c"}), 200)


if __name__ == "__main__":
    asyncio.run(main())

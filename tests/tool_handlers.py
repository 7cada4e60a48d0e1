"""Tool handlers used by tests (referenced by dotted path from test ToolSpecs)."""

import asyncio

from aircoach.tools.registry import ToolContext, ToolOutput


async def echo(ctx: ToolContext, word: str) -> ToolOutput:
    return ToolOutput(text=f"echo: {word}", data={"echo": word})


async def broken(ctx: ToolContext, word: str) -> ToolOutput:
    raise ValueError(f"cannot repeat {word!r}")


async def hangs(ctx: ToolContext, word: str) -> ToolOutput:
    await asyncio.Event().wait()  # a backend that never answers
    raise AssertionError("unreachable")

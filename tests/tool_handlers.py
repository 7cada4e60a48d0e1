"""Tool handlers used by tests (referenced by dotted path from test ToolSpecs)."""

from aircoach.tools.registry import ToolContext, ToolOutput


async def echo(ctx: ToolContext, word: str) -> ToolOutput:
    return ToolOutput(text=f"echo: {word}", data={"echo": word})


async def broken(ctx: ToolContext, word: str) -> ToolOutput:
    raise ValueError(f"cannot repeat {word!r}")

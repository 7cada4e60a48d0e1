"""Tool handlers used by tests (referenced by dotted path from test ToolSpecs)."""

from aircoach.tools.registry import ToolContext, ToolOutput


async def echo(ctx: ToolContext, word: str) -> ToolOutput:
    return ToolOutput(text=f"echo: {word}", data={"echo": word})

"""A module no test imports: a `python:` handler naming it must be refused before it is
imported (importing runs a module's code)."""

from aircoach.tools.registry import ToolContext, ToolOutput

IMPORTED = True


async def handler(ctx: ToolContext) -> ToolOutput:
    return ToolOutput(text="", data={})

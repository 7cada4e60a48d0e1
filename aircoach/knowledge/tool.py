"""`kb_search` on board: the embedded backend `tools.json` declares beside the HTTP one, used
while `KB_SEARCH_URL` is unset (see `aircoach.tools.embedded`)."""

from __future__ import annotations

from typing import Any

from aircoach.knowledge.index import MAX_TOP_K
from aircoach.knowledge.library import CourseSearch
from aircoach.tools.registry import ToolContext

MAX_QUERY_CHARS = 1000


async def kb_search(
    ctx: ToolContext, query: str, top_k: int = 5, materia: str | None = None, **_: Any
) -> list[dict[str, Any]]:
    """The manual's sections that best answer `query` (the explanations of the quiz questions
    count for the section that teaches their subject), best first; `materia` narrows to the
    chapters whose title contains it."""
    knowledge = ctx.need(CourseSearch)
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query: must be a non-empty text")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"query: at most {MAX_QUERY_CHARS} characters")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k: must be between 1 and {MAX_TOP_K}")
    return await knowledge.search(query, top_k=top_k, materia=materia or None)

"""The optional web check of unverified citations (`GROUNDING_WEB_CHECK`, off by default).

When it is on (it needs the `web_search` tool's service, `SEARXNG_URL`: the settings refuse
it without), each unverified citation (at most `MAX_SEARCHES`) is searched on the official
domains only (`OFFICIAL_DOMAINS`: EUR-Lex, Normattiva, EASA, ENAC). A result counts when its address is on
one of those domains; it `confirms` the citation when its title or snippet cites the same
key. The result is a `source` of the citation in the grounding event, for the student and the
instructor to open: never trusted blindly, it does not make the citation verified.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from aircoach.grounding.citations import extract
from aircoach.grounding.models import CitationCheck, GroundingResult, WebSource
from aircoach.tls import shared_tls_context

OFFICIAL_DOMAINS = ("eur-lex.europa.eu", "normattiva.it", "easa.europa.eu", "enac.gov.it")
MAX_SEARCHES = 3
MAX_RESPONSE_BYTES = 1_000_000
MAX_TITLE_CHARS = 160


def official(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith(f".{d}") for d in OFFICIAL_DOMAINS)


def _source(check: CitationCheck, body: Any) -> WebSource | None:
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list):
        return None
    found: WebSource | None = None
    for item in results:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        if not official(item["url"]):
            continue
        title = str(item.get("title") or "")[:MAX_TITLE_CHARS]
        said = f"{title} {str(item.get('content') or '')[:2000]}"
        confirms = any(c.key == check.key for c in extract(said))
        source = WebSource(url=item["url"][:500], title=title, confirms=confirms)
        if confirms:
            return source
        found = found or source
    return found


async def _search(client: httpx.AsyncClient, url: str, check: CitationCheck) -> WebSource | None:
    sites = " OR ".join(f"site:{d}" for d in OFFICIAL_DOMAINS)
    response = await client.get(
        url, params={"q": f'"{check.text}" {sites}', "format": "json", "language": "it"}
    )
    if response.status_code != 200 or len(response.content) > MAX_RESPONSE_BYTES:
        return None
    try:
        return _source(check, response.json())
    except ValueError:
        return None


async def with_web_sources(
    result: GroundingResult, search_url: str, *, timeout_s: float = 5.0
) -> GroundingResult:
    """`result` with a `source` on each unverified citation the official sites answer for.
    A failing search leaves the citation as it was."""
    unverified = [c for c in result.citations if not c.verified][:MAX_SEARCHES]
    if not unverified:
        return result
    found: dict[str, WebSource] = {}
    async with httpx.AsyncClient(
        timeout=timeout_s, verify=await shared_tls_context(), follow_redirects=False
    ) as client:

        async def one(check: CitationCheck) -> None:
            try:
                source = await _search(client, search_url, check)
            except httpx.HTTPError:
                return
            if source is not None:
                found[check.key] = source

        with anyio.move_on_after(timeout_s):
            async with anyio.create_task_group() as group:
                for check in unverified:
                    group.start_soon(one, check)
    citations: Sequence[CitationCheck] = [
        c.model_copy(update={"source": found[c.key]}) if c.key in found else c
        for c in result.citations
    ]
    return result.model_copy(update={"citations": list(citations)})

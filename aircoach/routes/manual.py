"""The course manual over HTTP: one section as the answers cite it (`Fonte: § 3.7 ...`), so a
client can open the citation; the sections that match a text; the table of contents."""

from __future__ import annotations

import functools
from typing import Annotated

import anyio
from fastapi import APIRouter, Path, Query
from pydantic import Field

from aircoach.deps import CurrentUser, ServicesDep
from aircoach.errors import NotFound
from aircoach.knowledge.index import MAX_TOP_K, Passage
from aircoach.knowledge.library import NO_MANUAL
from aircoach.knowledge.manual import SECTION_ID, canonical_id
from aircoach.models import ErrorBody
from aircoach.response_model import ResponseModel
from aircoach.routes.responses import UNAUTHORIZED, unavailable

router = APIRouter(prefix="/api", tags=["manual"])

# `3.7`: chapter and section, as the manual's headings number them (`## 3.7 ...`).
REFERENCE_PATTERN = f"^{SECTION_ID}$"
Reference = Annotated[
    str,
    Path(
        max_length=5,
        pattern=REFERENCE_PATTERN,
        description="The section's id as cited, e.g. `3.7` (without the `§`); a leading "
        "zero names the same section (`03.7`).",
        examples=["3.2"],
    ),
]


MAX_CHAPTER = 99


class ManualSection(ResponseModel):
    """A section of the manual: its id, heading and full text, and its chapter."""

    riferimento: str
    titolo: str
    testo: str
    capitolo: int
    materia: str  # the chapter's title


def _section(passage: Passage) -> ManualSection:
    return ManualSection(
        riferimento=passage.riferimento,
        titolo=passage.titolo,
        testo=passage.testo,
        capitolo=passage.capitolo,
        materia=passage.materia,
    )


@router.get(
    "/manual/sections/{riferimento}",
    responses={
        **UNAUTHORIZED,
        404: {"model": ErrorBody, "description": "The manual has no such section (`not_found`)."},
        **unavailable("auth_unavailable", "prompt_unavailable"),
    },
)
async def section(
    riferimento: Reference, user: CurrentUser, services: ServicesDep
) -> ManualSection:
    """The section `riferimento` of the manual the server holds now (the docs' `manual/`
    area): what a citation such as `(Fonte: § 3.7 ...)` points to. `03.7` and `3.07` are
    `3.7` too, answered with its id as cited (`3.7`)."""
    snapshot = await services.prompts.current()
    index = await services.knowledge.index_for(snapshot.contents)
    wanted = canonical_id(riferimento)
    for passage in index.passages:
        if passage.kind == "manuale" and passage.riferimento == wanted:
            return _section(passage)
    raise NotFound(fields={"riferimento": riferimento})


class ManualSections(ResponseModel):
    items: list[ManualSection]


@router.get(
    "/manual/sections",
    responses={**UNAUTHORIZED, **unavailable("auth_unavailable", "prompt_unavailable")},
)
async def sections(
    user: CurrentUser,
    services: ServicesDep,
    testo: Annotated[
        str,
        Query(
            min_length=3,
            max_length=600,
            pattern=r"\S",  # not blank (it found nothing, as a 200)
            description="What to find: a question, or a quiz question with its explanation.",
        ),
    ],
    capitolo: Annotated[int | None, Query(ge=1, le=MAX_CHAPTER)] = None,
    limit: Annotated[int, Query(ge=1, le=5)] = 3,
) -> ManualSections:
    """The sections of the manual (of chapter `capitolo` when given) that best match `testo`,
    best first, whole; the course search `kb_search` runs on the same index. A client opens
    with it the section that teaches a graded quiz question."""
    snapshot = await services.prompts.current()
    index = await services.knowledge.index_for(snapshot.contents)
    # The chapter narrows the search itself: a chapter's sections may rank below the others'
    # best. Search wide, then keep the sections (a quiz explanation of a chapter without
    # sections is a result of its own).
    found = await anyio.to_thread.run_sync(
        functools.partial(index.search, testo, top_k=MAX_TOP_K, capitolo=capitolo)
    )
    wanted = [str(hit["riferimento"]) for hit in found if hit.get("tipo") == "manuale"][:limit]
    by_reference = {p.riferimento: p for p in index.passages if p.kind == "manuale"}
    return ManualSections(items=[_section(by_reference[ref]) for ref in wanted])


class ManualSectionHeading(ResponseModel):
    """A section as a table of contents lists it: its id and heading."""

    riferimento: str
    titolo: str


class ManualChapter(ResponseModel):
    """A chapter of the manual and its sections, in the manual's order."""

    capitolo: int
    materia: str  # the chapter's title
    sezioni: list[ManualSectionHeading]


class ManualChapters(ResponseModel):
    items: list[ManualChapter] = Field(
        description="The manual's chapters by number; at most 99, each with at most 100 "
        "sections (a section id is two numbers of one or two digits)."
    )
    manual_version: str | None = Field(
        description="The version of the manual listed (as `POST /api/update_docs` reports "
        "it); null when the docs have no manual."
    )


@router.get(
    "/manual/chapters",
    responses={**UNAUTHORIZED, **unavailable("auth_unavailable", "prompt_unavailable")},
)
async def chapters(user: CurrentUser, services: ServicesDep) -> ManualChapters:
    """The table of contents of the manual the server holds now: each chapter with its title
    and its sections' ids and headings, in the manual's order (`3.9` before `3.10`). Open a
    section with `GET /api/manual/sections/{riferimento}`."""
    snapshot = await services.prompts.current()
    index = await services.knowledge.index_for(snapshot.contents)
    by_chapter: dict[int, ManualChapter] = {}
    for passage in index.passages:
        if passage.kind != "manuale":
            continue
        chapter = by_chapter.get(passage.capitolo)
        if chapter is None:  # a chapter's title is the one of its first section's file
            chapter = ManualChapter(capitolo=passage.capitolo, materia=passage.materia, sezioni=[])
            by_chapter[passage.capitolo] = chapter
        chapter.sezioni.append(
            ManualSectionHeading(riferimento=passage.riferimento, titolo=passage.titolo)
        )
    return ManualChapters(
        items=[by_chapter[number] for number in sorted(by_chapter)],
        manual_version=None if index.version == NO_MANUAL else index.version,
    )

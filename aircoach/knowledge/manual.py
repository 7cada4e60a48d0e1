"""The course manual: Markdown under the docs' `manual/` area, one file per chapter, read into
short sections with stable ids.

A chapter file starts with `# Capitolo N — Titolo`; each section is a `## N.M Titolo` heading
followed by its text. The manual is versioned on its own (`manual_version`): editing it never
changes the chat's `prompt_version`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from aircoach.errors import ConfigError
from aircoach.prompts.keys import MANUAL_AREA, PROMPT_SUFFIX, docs_under, docs_version

# A section's id as answers cite it and `GET /api/manual/sections/{id}` serves it: `3.7`.
SECTION_ID = r"[0-9]{1,2}\.[0-9]{1,2}"
_CHAPTER = re.compile(r"^#\s+Capitolo\s+(\d+)\s*[—–:-]+\s*(.+?)\s*$", re.MULTILINE)
_SECTION = re.compile(r"^##\s+(\d+\.\d+)\s+(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Section:
    """One section of the manual: `id` is its stable reference (`3.2`)."""

    id: str
    title: str
    capitolo: int
    materia: str  # the chapter's title
    text: str
    doc: str  # the key of its file inside the manual area


def canonical_id(reference: str) -> str:
    """The id a section is cited by: `01.1`, `1.01` and `1.1` name the same section, `1.1`
    (a client may pad the chapter as the manual's files do, `01_aerodinamica.md`)."""
    chapter, _, number = reference.partition(".")
    return f"{int(chapter)}.{int(number)}"


def manual_docs(contents: Mapping[str, str]) -> dict[str, str]:
    """The manual's Markdown files of a docs snapshot, keyed by their path inside `manual/`."""
    docs = docs_under(contents, MANUAL_AREA)
    return {key: text for key, text in docs.items() if key.endswith(PROMPT_SUFFIX)}


def manual_version(contents: Mapping[str, str]) -> str | None:
    """The version of the manual in a docs snapshot; None when it has no manual."""
    docs = manual_docs(contents)
    return docs_version(docs) if docs else None


def parse_chapter(doc: str, text: str) -> list[Section]:
    """The sections of one chapter file; a file without a `# Capitolo N — ...` heading has
    none (a README in the folder is not a chapter)."""
    chapter = _CHAPTER.search(text)
    if chapter is None:
        return []
    capitolo, materia = int(chapter.group(1)), chapter.group(2)
    headings = list(_SECTION.finditer(text))
    sections = []
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        body = " ".join(text[heading.end() : end].split())
        if body:
            sections.append(
                Section(heading.group(1), heading.group(2), capitolo, materia, body, doc)
            )
    return sections


def parse_manual(contents: Mapping[str, str]) -> list[Section]:
    """Every section of the manual in a docs snapshot, in file and heading order."""
    docs = manual_docs(contents)
    return [section for key in sorted(docs) for section in parse_chapter(key, docs[key])]


def check_manual(contents: Mapping[str, str]) -> None:
    """The prompt store's check: a manual whose citations would be ambiguous is never served.
    Every section id is unique, of its file's chapter, servable (`SECTION_ID`) and written
    without a leading zero (`canonical_id`): an answer citing `§ 3.10` and the section a
    client opens for it must be the same."""
    problems = []
    seen: dict[str, str] = {}
    for section in parse_manual(contents):
        where = f"{MANUAL_AREA}/{section.doc}"
        if not re.fullmatch(SECTION_ID, section.id):
            problems.append(
                f"section {section.id!r} ({where}): an id is two numbers of one or two digits"
            )
        elif section.id.split(".")[0] != str(section.capitolo):
            problems.append(f"section {section.id!r} is in chapter {section.capitolo} ({where})")
        elif section.id != canonical_id(section.id):
            problems.append(
                f"section {section.id!r} ({where}): write it {canonical_id(section.id)!r}, "
                "without a leading zero (the route serves both as one section)"
            )
        if section.id in seen:
            problems.append(f"section {section.id!r} appears twice ({seen[section.id]}, {where})")
        seen.setdefault(section.id, where)
    if problems:
        raise ConfigError(f"{MANUAL_AREA}: " + "; ".join(problems))

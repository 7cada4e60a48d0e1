"""Which prompt-doc keys belong to what: the one rule every reader of the docs shares.

Keys are paths relative to the docs root (`00_ruolo.md`, `tasks/email_triage/prompt.md`).

- **Top-level docs are the chat's.** Their `.md` files build the system prompt, and they (the
  Markdown docs and `tools.json`) are what `prompt_version` covers.
- **A sub-folder is an area of its own**, named by its top folder: `tasks/...` holds the
  structured tasks, `manual/...` the course manual (`MANUAL_AREA`). An area's docs never reach the
  system prompt and never change `prompt_version`; whoever reads an area versions its docs
  with `docs_version` (a task hashes its own folder).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

CHAT_AREA = ""
MANUAL_AREA = "manual"
PROMPT_SUFFIX = ".md"


def doc_area(key: str) -> str:
    """The area a doc belongs to: `CHAT_AREA` ("") for a top-level doc, else its top folder
    (`tasks/email_triage/prompt.md` -> "tasks")."""
    head, sep, _ = key.partition("/")
    return head if sep else CHAT_AREA


def is_chat_doc(key: str) -> bool:
    """A top-level doc: counts in `prompt_version`."""
    return doc_area(key) == CHAT_AREA


def is_system_prompt_doc(key: str) -> bool:
    """A top-level Markdown doc: part of the chat's system prompt."""
    return is_chat_doc(key) and key.endswith(PROMPT_SUFFIX)


def docs_under(contents: Mapping[str, str], folder: str) -> dict[str, str]:
    """The docs inside `folder` (e.g. "tasks/email_triage"), keyed by their path inside it."""
    prefix = folder.strip("/") + "/"
    return {key[len(prefix) :]: text for key, text in contents.items() if key.startswith(prefix)}


def folders_in(contents: Mapping[str, str], area: str) -> list[str]:
    """The folders directly inside an area, sorted (`folders_in(docs, "tasks")` lists the
    tasks); a doc lying loose in the area belongs to no folder."""
    names = set()
    for key in docs_under(contents, area):
        head, sep, _ = key.partition("/")
        if sep:
            names.add(head)
    return sorted(names)


def docs_version(contents: Mapping[str, str]) -> str:
    """A short sha256 of keys and contents, independent of order: equal docs, equal versions,
    on every instance."""
    digest = hashlib.sha256()
    for key in sorted(contents):
        digest.update(key.encode() + b"\0" + contents[key].encode() + b"\0")
    return digest.hexdigest()[:12]


def folder_versions(contents: Mapping[str, str], area: str) -> dict[str, str]:
    """Each folder of an area and its version: a hash of its own files (valid or not).
    `folder_versions(docs, "tasks")` gives each task's version (`docs status`)."""
    return {
        name: docs_version(docs_under(contents, f"{area}/{name}"))
        for name in folders_in(contents, area)
    }

"""The course index of the current docs: built once per manual version, off the event loop,
shared by every request of the process.

The two latest indexes are kept (bounded memory: a few hundred passages each): while a docs
update reaches the instances, a request may still carry the previous docs (its prompt store
was loaded before), and with one index kept each such request rebuilt the old index and the
next the new one. The build runs in a worker thread under a lock, so concurrent requests after
a docs update build it once, whatever event loop they run on (a serverless invocation may
bring a new one).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from aircoach.knowledge.index import CourseIndex, passages_of
from aircoach.knowledge.manual import manual_version, parse_manual
from aircoach.quiz.bank import DEMO_QUESTIONS

log = logging.getLogger(__name__)

# The version of the index of docs without a manual (it still holds the quiz explanations).
NO_MANUAL = "none"
# Indexes kept per process: the current docs' and the previous ones', during an update.
KEPT_INDEXES = 2


@functools.lru_cache(maxsize=4)
def course_bank(path: Path = DEMO_QUESTIONS) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The shipped questions and the chapter titles, read once per process (60 kB)."""
    bank = json.loads(path.read_text("utf-8"))
    chapters = {int(number): title for number, title in bank["chapters"].items()}
    return bank["questions"], chapters


def course_chapter_titles() -> Mapping[int, str]:
    """The title of each chapter of the course, by number (the process's one copy: read it)."""
    # Read once (the index build has usually read it already, in its worker thread).
    return course_bank(DEMO_QUESTIONS)[1]


def course_chapters() -> list[str]:
    """The chapters of the course, as a student reads them: `3. Strumenti di volo`."""
    return [f"{number}. {title}" for number, title in sorted(course_chapter_titles().items())]


class CourseKnowledge:
    """The index of the manual (`manual/` docs) and of the quiz explanations (`questions`:
    the shipped bank), rebuilt when the manual's version changes."""

    def __init__(self, questions: Path = DEMO_QUESTIONS):
        self.questions = questions
        self._lock = threading.Lock()
        # By manual version, the newest build last; changed under the lock only (a read on
        # the event loop never waits for a build).
        self._indexes: OrderedDict[str, CourseIndex] = OrderedDict()
        self.builds = 0

    async def index_for(self, contents: Mapping[str, str]) -> CourseIndex:
        """The index of these docs' manual; built (in a worker thread) if it is not held."""
        version = manual_version(contents) or NO_MANUAL
        held = self._indexes.get(version)
        if held is not None:
            return held
        return await anyio.to_thread.run_sync(self._build, contents, version)

    def _build(self, contents: Mapping[str, str], version: str) -> CourseIndex:
        with self._lock:
            held = self._indexes.get(version)
            if held is not None:
                return held  # another request built it while this one waited
            started = time.perf_counter()
            questions, chapters = course_bank(self.questions)
            sections = parse_manual(contents)
            index = CourseIndex(passages_of(sections, questions, chapters), version)
            self._indexes[version] = index
            while len(self._indexes) > KEPT_INDEXES:
                self._indexes.popitem(last=False)
            self.builds += 1
            log.info(
                "course index %s built: %d sections, %d passages (%d ms)",
                version,
                len(sections),
                len(index.passages),
                round((time.perf_counter() - started) * 1000),
            )
            return index

    def search_in(self, contents: Mapping[str, str]) -> CourseSearch:
        """The search of one docs snapshot, for one request's tools."""
        return CourseSearch(self, contents)


class CourseSearch:
    """`kb_search` over one docs snapshot: the index is built on the first search only, so a
    turn that never searches never builds it."""

    def __init__(self, knowledge: CourseKnowledge, contents: Mapping[str, str]):
        self._knowledge = knowledge
        self._contents = contents

    async def search(
        self, query: str, *, top_k: int = 5, materia: str | None = None
    ) -> list[dict[str, Any]]:
        index = await self._knowledge.index_for(self._contents)
        return await anyio.to_thread.run_sync(
            functools.partial(index.search, query, top_k=top_k, materia=materia)
        )

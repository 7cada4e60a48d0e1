"""A turn's grounding: the context the guard checks an answer against, the thread's topic,
and the instructions the model gets (cite only the context; be concise on a follow-up;
correct an answer that cited what the context does not say).

The context is the prompt docs (the top-level Markdown docs), the course manual (the docs of
the snapshot's `manual/` area, see `aircoach.prompts.keys`), the text every tool of this
turn gave the model, and the tool texts of the earlier turns the model was shown. The docs'
part is indexed once per docs version (a small cache, off the event loop), and only when an
answer cites something.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from aircoach.grounding.citations import extract
from aircoach.grounding.followups import concise_prefix, is_followup, topic_keywords
from aircoach.grounding.guard import ContextIndex, Source, check, correction, withheld
from aircoach.grounding.models import GroundingPolicy, GroundingResult
from aircoach.grounding.style import Stile, covered_points, covered_section, style_section
from aircoach.grounding.web import with_web_sources
from aircoach.prompts.keys import docs_under, docs_version, is_system_prompt_doc
from aircoach.threads import Threads
from aircoach.turn.records import ToolCall, turn_of_question

MANUAL_AREA = "manual"
_DOCS_CACHE_SIZE = 2  # the current docs and the ones being replaced
_docs_cache: OrderedDict[str, ContextIndex] = OrderedDict()
_docs_lock = threading.Lock()
# The checks run here, off the loop (CPU-bound, so more threads than cores would not help).
_threads = Threads("grounding", limit=2)
# An answer up to this long is looked at for citations on the loop (about 60 us), which
# costs less than the hop to a thread and back; most answers cite nothing and end there.
INLINE_EXTRACT_CHARS = 1000

CITE_ONLY_CONTEXT = (
    "## Citazioni\n"
    "Cita regolamenti, leggi, articoli, paragrafi e documenti (per esempio SERA.5005, "
    "FCL.210.A, Reg. (UE) n. 923/2012, ICAO Annesso 2) solo se compaiono nel tuo contesto: "
    "questi documenti, il manuale del corso o i risultati degli strumenti di questa "
    'conversazione. Se non trovi il riferimento esatto non inventarlo: scrivi "secondo la '
    "normativa vigente\" e suggerisci di verificare con l'istruttore."
)


def with_citation_rule(prompt: str) -> str:
    """The system prompt with the rule to cite only what the context contains (seed A4)."""
    return f"{prompt}\n\n{CITE_ONLY_CONTEXT}"


def docs_sources(contents: Mapping[str, str]) -> list[Source]:
    """The prompt docs and the course manual as the guard's sources."""
    sources = [
        Source("docs", key, text)
        for key, text in sorted(contents.items())
        if is_system_prompt_doc(key)
    ]
    manual = docs_under(contents, MANUAL_AREA)
    sources += [
        Source("manual", f"{MANUAL_AREA}/{key}", text) for key, text in sorted(manual.items())
    ]
    return sources


def _docs_index(contents: Mapping[str, str]) -> ContextIndex:
    """The docs' part of the context, built once per docs version (CPU-bound: a worker
    thread calls it, and only for an answer that cites something)."""
    relevant = {
        key: text
        for key, text in contents.items()
        if is_system_prompt_doc(key) or key.startswith(f"{MANUAL_AREA}/")
    }
    version = docs_version(relevant)
    with _docs_lock:
        if (cached := _docs_cache.get(version)) is not None:
            _docs_cache.move_to_end(version)
            return cached
    index = ContextIndex.of(docs_sources(relevant))
    with _docs_lock:
        _docs_cache[version] = index
        while len(_docs_cache) > _DOCS_CACHE_SIZE:
            _docs_cache.popitem(last=False)
    return index


@dataclass(frozen=True)
class ThreadView:
    """What the model is shown of the earlier turns: their ids, the student's questions, the
    texts the tools gave the model and the model's answers (what was already covered)."""

    turn_ids: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    tool_texts: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, messages: Sequence[AnyMessage], history_limit: int) -> ThreadView:
        starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
        # The model sees the current turn and the last `history_limit` turns before it.
        shown = (
            messages[starts[-min(history_limit, len(starts))] :]
            if history_limit > 0 and starts
            else []
        )
        questions = [m for m in shown if isinstance(m, HumanMessage)]
        return cls(
            turn_ids=[t for m in questions if (t := turn_of_question(m.id)) is not None],
            questions=[m.text for m in questions],
            tool_texts=[
                m.text for m in shown if isinstance(m, ToolMessage) and m.status != "error"
            ],
            answers=[
                m.text for m in shown if isinstance(m, AIMessage) and not m.tool_calls and m.text
            ],
        )


@dataclass(frozen=True)
class TurnGrounding:
    """The grounding of one turn: the docs it may cite, the thread it continues, the follow-up
    verdict and the switches (`GROUNDING_CAVEAT`, `GROUNDING_POLICY`)."""

    docs: Mapping[str, str]  # the snapshot's contents: indexed only when an answer cites
    thread: ThreadView
    question: str
    caveat: bool = True
    policy: GroundingPolicy = "regenerate"
    history_limit: int = 0
    base_prompt: str = ""  # the turn's prompt, without the follow-up prefix
    style: Stile | None = None  # the request's `stile`, else the profile's
    web_search_url: str | None = None  # GROUNDING_WEB_CHECK: the web_search service's

    @property
    def prompt(self) -> str:
        """The system prompt the turn's agent runs with."""
        return self.system_prompt(self.base_prompt)

    @property
    def regenerate(self) -> bool:
        """A JSON answer with an unverified citation is written again once."""
        return self.policy == "regenerate"

    @property
    def withhold(self) -> bool:
        """A JSON answer keeps only what is verified and says what it left out."""
        return self.policy == "withhold"

    async def withheld(
        self, answer: str, result: GroundingResult, calls: Sequence[ToolCall]
    ) -> tuple[str, GroundingResult | None]:
        """The answer without its unverified sentences, and its verdict (off the loop)."""

        def run() -> tuple[str, GroundingResult | None]:
            kept, note = withheld(answer, result)
            # The verdict on what is kept (the note names what was left out: not a claim).
            verdict = check(kept, self.context(calls), self.question)
            left_out = [c.text for c in result.citations if not c.verified]
            sent = f"{kept}\n\n{note}" if kept else note
            if verdict is None:
                return sent, GroundingResult(citations=[], unverified=[], withheld=left_out)
            return sent, verdict.model_copy(update={"withheld": left_out})

        return await _threads.run(run, abandon_on_cancel=True)

    @property
    def topic(self) -> list[str]:
        return topic_keywords(self.thread.questions)

    @property
    def followup(self) -> bool:
        return is_followup(self.question, has_topic=bool(self.topic))

    @property
    def shaped(self) -> bool:
        """Whether the turn's prompt differs from the docs' one (a follow-up, or a style)."""
        return self.followup or self.style is not None

    def system_prompt(self, prompt: str) -> str:
        """The turn's system prompt (which holds the citation rule already), with the style
        asked for; on a follow-up, the concise prefix first and the points already covered."""
        sections = [prompt, style_section(self.style)]
        if not self.followup:
            return "\n\n".join(s for s in sections if s)
        sections.append(covered_section(covered_points(self.thread.answers)))
        return "\n\n".join([concise_prefix(self.topic), *(s for s in sections if s)])

    def context(self, calls: Sequence[ToolCall]) -> ContextIndex:
        """CPU-bound (the docs' part is cached per version): call it off the event loop."""
        tools = ContextIndex.of(
            [Source("tool", c.call_id, c.text) for c in calls if c.status == "success"]
        )
        history = ContextIndex.of(
            [Source("history_tool", f"h{i}", t) for i, t in enumerate(self.thread.tool_texts)]
        )
        return _docs_index(self.docs) + tools + history

    async def check(
        self, answer: str, calls: Sequence[ToolCall]
    ) -> tuple[GroundingResult | None, ContextIndex]:
        """The verdict on `answer` and the context it was checked against (off the loop,
        but for a short answer that cites nothing, which ends on it). Cancelling the wait (the
        turn's deadline) returns at once; the worker thread finishes its check and is dropped
        (the check is linear in the answer, whose length the model's `MODEL_MAX_OUTPUT_TOKENS`
        bounds)."""

        # Most answers cite nothing: then there is no context to build. A short answer is
        # looked at here, a long one in the thread; either way its citations are found once.
        found = extract(answer) if len(answer) <= INLINE_EXTRACT_CHARS else None
        if found == []:
            return None, ContextIndex()

        def run() -> tuple[GroundingResult | None, ContextIndex]:
            cited = extract(answer) if found is None else found
            if not cited:
                return None, ContextIndex()
            context = self.context(calls)
            return check(answer, context, self.question, found=cited), context

        result, context = await _threads.run(run, abandon_on_cancel=True)
        if result is not None and result.unverified and self.web_search_url:
            result = await with_web_sources(result, self.web_search_url)
        return result, context

    @staticmethod
    def correction(result: GroundingResult, context: ContextIndex) -> str:
        return correction(result, context)

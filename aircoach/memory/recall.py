"""What a turn leaves in the student's memory, and which items a question brings back.

Items are read by rules (`aircoach.memory.extract`), never by a model call: what the student
said about themselves (goal, exam, difficulty) and the topic of each question. The prompt
section ranks the items by the terms they share with the question (Snowball stems, as the
course search) and by recency; the student's goal and exam date are always relevant.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

from aircoach.memory.extract import MAX_MESSAGE_CHARS, asks_to_forget, carries_credential, facts
from aircoach.memory.ports import MAX_ITEM_CHARS, MemoryItem, NewItem
from aircoach.text import terms, words

SECTION_TITLE = "# Memoria dell'utente"
TOPIC_LABEL = "Ha chiesto"
MAX_TOPIC_CHARS = 120
# A fact about the student counts almost as much as one shared term (a topic that shares a
# term with the question comes first); recency only breaks ties.
_FACT_WEIGHT = 0.9
_RECENCY_WEIGHT = 0.05
# Words of a greeting or an acknowledgement: a message of these alone has no topic.
_SMALL_TALK = frozenset(
    [
        "ciao",
        "salve",
        "buongiorno",
        "buonasera",
        "grazie",
        "prego",
        "ok",
        "okay",
        "va",
        "bene",
        "perfetto",
        "capito",
        "si",
        "no",
        "certo",
        "allora",
        "dai",
    ]
)


def read_items(
    message: str, *, turn_id: str, conversation_id: str, created_at: str
) -> list[NewItem]:
    """The items a student's message leaves: their facts, then the question's topic (none
    for a request to forget or a message that carries a credential; no topic for a message
    without a content word)."""
    if asks_to_forget(message) or carries_credential(message):
        return []
    found: list[NewItem] = [
        NewItem(
            kind=fact.kind,
            text=fact.text[:MAX_ITEM_CHARS],
            conversation_id=conversation_id,
            turn_id=turn_id,
            created_at=created_at,
        )
        for fact in facts(message)
    ]
    question = " ".join(message[:MAX_MESSAGE_CHARS].split())
    if _has_topic(question):
        if len(question) > MAX_TOPIC_CHARS:
            question = question[: MAX_TOPIC_CHARS - 1].rstrip() + "…"
        found.append(
            NewItem(
                kind="topic",
                text=f"{TOPIC_LABEL}: {question}",
                conversation_id=conversation_id,
                turn_id=turn_id,
                created_at=created_at,
            )
        )
    return found


def _has_topic(message: str) -> bool:
    return any(len(w) >= 3 and w not in _SMALL_TALK for w in words(message))


@functools.lru_cache(maxsize=4096)
def _item_terms(text: str) -> frozenset[str]:
    """The terms of an item's text without its label (`Ha chiesto: `), so labels never
    match. Cached: a user's items are ranked again on every turn."""
    return frozenset(terms(text.split(": ", 1)[-1]))


def relevant(
    items: Sequence[MemoryItem],
    question: str,
    *,
    max_items: int,
    shown_turns: Collection[str] = (),
) -> list[MemoryItem]:
    """The items worth showing for `question`, best first: facts about the student, and
    topics that share a term with it. `items` come newest first; the topics of
    `shown_turns` (the ids of the turns the model sees in its history) are left out."""
    asked = set(terms(question))
    scored: list[tuple[float, int, MemoryItem]] = []
    for rank, item in enumerate(items):
        recency = _RECENCY_WEIGHT / (1 + rank)
        if item.kind == "topic":
            if item.turn_id in shown_turns:
                continue
            shared = len(asked & _item_terms(item.text))
            if not shared:
                continue
            score = shared + recency
        else:
            score = _FACT_WEIGHT + len(asked & _item_terms(item.text)) + recency
        scored.append((score, -rank, item))
    scored.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    return [item for _, _, item in scored[:max_items]]


def memory_section(items: Sequence[MemoryItem], *, max_chars: int) -> str:
    """The "Memoria dell'utente" section of the system prompt, at most `max_chars` long
    (whole lines only); "" without items."""
    lines = [
        SECTION_TITLE,
        "Cose che lo studente ha detto di sé o chiesto in conversazioni passate; usale solo "
        "se servono alla domanda.",
    ]
    size = sum(len(line) + 1 for line in lines)
    kept = 0
    for item in items:
        line = f"- {item.text}"
        if size + len(line) + 1 > max_chars:
            break
        lines.append(line)
        size += len(line) + 1
        kept += 1
    return "\n".join(lines) if kept else ""

"""The quiz tool `domanda_teoria`: pick a question by chapter, number, text or field."""

from __future__ import annotations

import random
from typing import Any

from aircoach.quiz.bank import CHAPTERS
from aircoach.store.base import QUESTION_FIELDS, Question
from aircoach.tools.registry import ToolContext, ToolOutput

MIN_TEXT = 3


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ValueError(f"{name} must be a whole number, got {value!r}")


def _validate(
    capitolo: Any, numero: Any, campo: Any, valore: Any, testo: Any
) -> tuple[int | None, int | None, str | None, str | None, str | None]:
    chapter = None if capitolo is None else _as_int("capitolo", capitolo)
    if chapter is not None and chapter not in CHAPTERS:
        raise ValueError(f"capitolo must be between 1 and 10, got {chapter}")
    number = None if numero is None else _as_int("numero", numero)
    if number is not None and number < 1:
        raise ValueError(f"numero must be 1 or more, got {number}")
    if number is not None and chapter is None:
        raise ValueError("numero needs capitolo: a question is identified by chapter and number")
    if (campo is None) != (valore is None):
        raise ValueError("campo and valore go together: give both or neither")
    if campo is not None:
        campo = str(campo).strip().lower()
        if campo not in QUESTION_FIELDS:
            raise ValueError(f"campo {campo!r} is not searchable; valid: {list(QUESTION_FIELDS)}")
        valore = str(valore).strip()
        if not valore:
            raise ValueError("valore must not be empty")
    if testo is not None:
        testo = str(testo).strip()
        if len(testo) < MIN_TEXT:
            raise ValueError(f"testo must be at least {MIN_TEXT} characters, got {testo!r}")
    return chapter, number, campo, valore, testo


def format_question(q: Question) -> str:
    answers = "\n".join(
        f"{letter}) {text}" for letter, text in sorted(q.get("risposte", {}).items())
    )
    return f"Capitolo {q['capitolo']}, domanda {q['numero']}: {q['testo']}\n{answers}"


async def domanda_teoria(
    ctx: ToolContext,
    capitolo: Any = None,
    numero: Any = None,
    campo: Any = None,
    valore: Any = None,
    testo: Any = None,
) -> ToolOutput:
    """Pick a quiz question. Priority: capitolo+numero, then testo, then campo/valore,
    then capitolo, then any question. Bad arguments become a tool error for the model."""
    try:
        chapter, number, field, value, text = _validate(capitolo, numero, campo, valore, testo)
    except ValueError as exc:
        return ToolOutput(
            text=f"[Tool domanda_teoria failed: {exc}]", data={"error": str(exc)}, ok=False
        )

    query: dict[str, Any]
    question: Question | None
    if chapter is not None and number is not None:
        query = {"mode": "capitolo_numero", "capitolo": chapter, "numero": number}
        question = await ctx.quiz.by_chapter_and_number(chapter, number)
    elif text is not None:
        query = {"mode": "testo", "testo": text}
        matches = await ctx.quiz.search_text(text, limit=20)
        question = random.choice(matches) if matches else None
        query["matches"] = len(matches)
    elif field is not None:
        query = {"mode": "campo", "campo": field, "valore": value}
        question = await ctx.quiz.random_by_field(field, value)
    elif chapter is not None:
        query = {"mode": "capitolo", "capitolo": chapter}
        question = await ctx.quiz.random_by_field("capitolo", chapter)
    else:
        query = {"mode": "random"}
        question = await ctx.quiz.random_question()

    if question is None:
        message = "Nessuna domanda trovata per questa richiesta."
        return ToolOutput(text=message, data={"question": None, "query": query, "message": message})
    return ToolOutput(text=format_question(question), data={"question": question, "query": query})

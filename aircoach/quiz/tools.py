"""The quiz's chat tools: `domanda_teoria` asks questions, `verifica_risposta` grades an answer.

What the client gets (`ToolOutput.data`) never holds a question's key: `domanda_teoria`
sends questions without `corretta` and `spiegazione`. The key goes to the model only, in the
tool message, marked not to be revealed before the student answers; the model then calls
`verifica_risposta`, which grades against the key and sends the grading to the client.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from aircoach.quiz.answers import NOT_KNOWN
from aircoach.quiz.bank import CHAPTERS
from aircoach.quiz.exam_tools import EXAM, PAST, past_exams, start_exam, submit_exam
from aircoach.quiz.models import MAX_ANSWER_CHARS
from aircoach.quiz.ports import QUESTION_FIELDS, Question, index_terms
from aircoach.quiz.service import (
    Graded,
    QuestionNotFound,
    QuizService,
    option_line,
    progress_section,
    public,
)
from aircoach.text import plan as search_plan
from aircoach.text import words
from aircoach.tools.registry import ToolContext, ToolOutput, ToolSpec

log = logging.getLogger(__name__)

MIN_TEXT = 3
MAX_TEXT = 200
MAX_QUESTIONS = 10  # questions at once (`quante`); more is asked for as a mock exam
MAX_CHAPTERS = 10
_SEARCH_POOL = 20  # best matches a text question is drawn from
REVIEW = "ripasso"
KEY_NOTICE = "RISERVATO AL COACH, NON RIVELARE PRIMA CHE L'ALLIEVO ABBIA RISPOSTO"


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


def _chapter(name: str, value: Any) -> int:
    chapter = _as_int(name, value)
    if chapter not in CHAPTERS:
        raise ValueError(f"{name} must be between 1 and 10, got {chapter}")
    return chapter


@dataclass(frozen=True)
class _Request:
    capitolo: int | None = None
    numero: int | None = None
    campo: str | None = None
    valore: str | None = None
    testo: str | None = None
    capitoli: tuple[int, ...] = ()
    quante: int = 1
    ripasso: bool = False

    @property
    def several(self) -> bool:
        return self.quante > 1 or len(self.capitoli) > 1


def _validate(
    capitolo: Any,
    numero: Any,
    campo: Any,
    valore: Any,
    testo: Any,
    capitoli: Any,
    quante: Any,
    modo: Any,
) -> _Request:
    chapter = None if capitolo is None else _chapter("capitolo", capitolo)
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
        valore = str(valore).strip()[:MAX_TEXT]
        if not valore:
            raise ValueError("valore must not be empty")
    if testo is not None:
        testo = str(testo).strip()
        if len(testo) < MIN_TEXT:
            raise ValueError(f"testo must be at least {MIN_TEXT} characters, got {testo!r}")
        if len(testo) > MAX_TEXT:
            raise ValueError(f"testo must be at most {MAX_TEXT} characters")
    chapters: tuple[int, ...] = ()
    if capitoli is not None:
        if isinstance(capitoli, str):  # "2, 5 e 7" from a model that sent text
            capitoli = re.findall(r"\d+", capitoli) or [capitoli]
        elif not isinstance(capitoli, list | tuple):
            capitoli = [capitoli]
        if len(capitoli) > MAX_CHAPTERS:
            raise ValueError(f"capitoli: at most {MAX_CHAPTERS} chapters, got {len(capitoli)}")
        chapters = tuple(dict.fromkeys(_chapter("capitoli", c) for c in capitoli))
    if chapter is not None and not chapters and number is None:
        chapters = (chapter,)
    count = len(chapters) or 1
    if quante is not None:
        # More than MAX_QUESTIONS is served as MAX_QUESTIONS (the query says so): a student
        # asking for 30 gets 10 and the offer of a mock exam, never an error.
        count = min(_as_int("quante", quante), MAX_QUESTIONS)
        if count < 1:
            raise ValueError(f"quante must be between 1 and {MAX_QUESTIONS}, got {count}")
    if modo is not None and str(modo).strip().lower() not in ("", REVIEW):
        raise ValueError(f"modo {modo!r} is not a mode; valid: [{REVIEW!r}, {EXAM!r}, {PAST!r}]")
    return _Request(
        capitolo=chapter,
        numero=number,
        campo=campo,
        valore=valore,
        testo=testo,
        capitoli=chapters,
        quante=count,
        ripasso=modo is not None and str(modo).strip().lower() == REVIEW,
    )


def format_question(q: Question, *, with_key: bool = True) -> str:
    """A question as the model reads it: text, options and, marked as not to be revealed,
    the key (so it can grade and explain after the student answers)."""
    answers = "\n".join(
        f"{letter}) {text}" for letter, text in sorted(q.get("risposte", {}).items())
    )
    text = f"Capitolo {q['capitolo']}, domanda {q['numero']}: {q['testo']}\n{answers}"
    if not with_key:
        return text
    key = str(q.get("corretta", "")).strip().lower()
    return (
        f"{text}\n[{KEY_NOTICE}: risposta corretta {option_line(q, key)}. "
        f"Spiegazione: {q.get('spiegazione', '')}]"
    )


def _failure(exc: Exception, tool: str) -> ToolOutput:
    return ToolOutput(text=f"[Tool {tool} failed: {exc}]", data={"error": str(exc)}, ok=False)


async def domanda_teoria(
    ctx: ToolContext,
    capitolo: Any = None,
    numero: Any = None,
    campo: Any = None,
    valore: Any = None,
    testo: Any = None,
    capitoli: Any = None,
    quante: Any = None,
    modo: Any = None,
) -> ToolOutput:
    """Pick quiz questions. `modo="ripasso"` draws from what the student got wrong (or their
    weak chapters); otherwise, for one question, the priority is capitolo+numero, then
    testo, then campo/valore, then capitolo, then any question; `capitoli` and `quante` ask
    for several at once (sub-queries run concurrently). Bad arguments become a tool error
    for the model; nothing found lets the model answer (with the chapters to choose from).
    `modo="esame"` starts a mock exam instead, `modo="esiti"` tells the student's past ones
    (`quiz.exam_tools`)."""
    mode = str(modo).strip().lower() if modo is not None else ""
    if mode == EXAM:
        return await start_exam(ctx, domande=quante, capitoli=capitoli or capitolo)
    if mode == PAST:
        return await past_exams(ctx)
    try:
        request = _validate(capitolo, numero, campo, valore, testo, capitoli, quante, modo)
    except ValueError as exc:
        return _failure(exc, "domanda_teoria")

    quiz = ctx.need(QuizService)
    if request.ripasso:
        found, query = await _review(quiz, ctx.user_id, request)
    elif request.numero is not None:
        assert request.capitolo is not None
        query = {"mode": "capitolo_numero", "capitolo": request.capitolo, "numero": request.numero}
        one = await quiz.questions.by_chapter_and_number(request.capitolo, request.numero)
        found = [one] if one else []
    elif request.several:
        found, query = await _several(quiz, ctx.user_id, request)
    else:
        found, query = await _one(quiz, ctx.user_id, request)
    if query.get("mode") in ("capitolo_numero", "multi", REVIEW):
        await quiz.asked(ctx.user_id, found)  # draws remember theirs
    if quante is not None and _as_int("quante", quante) > MAX_QUESTIONS:
        query["limitate_a"] = MAX_QUESTIONS

    if not found:
        return await _nothing_found(quiz, query, several=request.several)
    if request.several or len(found) > 1:
        text = "\n\n".join(format_question(q) for q in found)
        return ToolOutput(
            text=f"{len(found)} domande:\n\n{text}",
            data={"questions": [public(q) for q in found], "query": query},
        )
    return ToolOutput(
        text=format_question(found[0]), data={"question": public(found[0]), "query": query}
    )


async def _one(
    quiz: QuizService, user_id: str, request: _Request
) -> tuple[list[Question], dict[str, Any]]:
    if request.testo is not None:
        matches = await quiz.find(testo=request.testo, limit=_SEARCH_POOL)
        query = {"mode": "testo", "testo": request.testo, "matches": len(matches)}
        # Asked again ("un'altra sull'altimetro"), the best matches not asked yet come first.
        return await quiz.draw_from(user_id, _best(matches, request.testo), 1), query
    if request.campo is not None:
        chapter = request.capitoli[0] if request.capitoli else None
        drawn = await quiz.draw(
            user_id, 1, capitolo=chapter, campo=request.campo, valore=request.valore
        )
        return drawn, {"mode": "campo", "campo": request.campo, "valore": request.valore}
    if request.capitoli:
        query = {"mode": "capitolo", "capitolo": request.capitoli[0]}
        return await quiz.draw(user_id, 1, capitolo=request.capitoli[0]), query
    return await quiz.draw(user_id, 1), {"mode": "random"}


def _best(matches: list[Question], testo: str) -> list[Question]:
    """The best-scoring matches; among them, those that have the most of the words asked as
    written: "carburatore" and "carburante" share a stem, and "quiz sul carburatore" drew
    the fuel reserve's question."""
    if not matches:
        return []
    plan = search_plan(testo)
    asked = set(words(testo))

    def score(question: Question) -> tuple[int, int]:
        written = set(words(f"{question.get('testo', '')} {question.get('argomento') or ''}"))
        return plan.score(index_terms(question)), len(asked & written)

    scores = [score(q) for q in matches]
    best = max(scores)
    return [q for q, s in zip(matches, scores, strict=True) if s == best]


async def _several(
    quiz: QuizService, user_id: str, request: _Request
) -> tuple[list[Question], dict[str, Any]]:
    """Up to `quante` distinct questions: one sub-query per chapter (run concurrently), the
    questions spread over the chapters in turn; by text, the best matches."""
    chapters = request.capitoli or (None,)
    shares = [request.quante // len(chapters)] * len(chapters)
    for i in range(request.quante % len(chapters)):
        shares[i] += 1
    results: list[list[Question]] = [[] for _ in chapters]

    async def sub_query(i: int, chapter: int | None, size: int) -> None:
        if request.testo is not None:
            results[i] = await quiz.find(capitolo=chapter, testo=request.testo, limit=size)
        else:
            results[i] = await quiz.draw(
                user_id, size, capitolo=chapter, campo=request.campo, valore=request.valore
            )

    async with anyio.create_task_group() as tg:
        for i, (chapter, size) in enumerate(zip(chapters, shares, strict=True)):
            if size:
                tg.start_soon(sub_query, i, chapter, size)
    found = _distinct(q for batch in results for q in batch)[: request.quante]
    query: dict[str, Any] = {"mode": "multi", "quante": request.quante}
    if request.capitoli:
        query["capitoli"] = list(request.capitoli)
    if request.testo is not None:
        query["testo"] = request.testo
    return found, query


async def _review(
    quiz: QuizService, user_id: str, request: _Request
) -> tuple[list[Question], dict[str, Any]]:
    """The questions the review schedule gives (`QuizService.review_items`: those due, most
    overdue first, then new ones from the weakest chapters), as `GET /api/quiz/review`."""
    chapter = request.capitoli[0] if len(request.capitoli) == 1 else None
    items = await quiz.review_items(user_id, request.quante, capitolo=chapter)
    query: dict[str, Any] = {"mode": REVIEW, "quante": request.quante}
    query["fonte"] = "in_scadenza" if any(i.scadenza for i in items) else "nuove"
    return await quiz.questions.by_keys([(i.capitolo, i.numero) for i in items]), query


def _distinct(questions: Iterable[Question]) -> list[Question]:
    seen: dict[tuple[int, int], Question] = {}
    for q in questions:
        seen.setdefault((q["capitolo"], q["numero"]), q)
    return list(seen.values())


async def _nothing_found(quiz: QuizService, query: dict[str, Any], *, several: bool) -> ToolOutput:
    chapters = await quiz.chapters()
    listed = "; ".join(f"{c.capitolo} {c.titolo}" for c in chapters if c.domande)
    message = "Nessuna domanda trovata per questa richiesta."
    data: dict[str, Any] = {
        "query": query,
        "messaggio": message,
        "message": message,  # deprecated: the name before `messaggio`, kept for older clients
        "capitoli": [{"capitolo": c.capitolo, "titolo": c.titolo} for c in chapters if c.domande],
    }
    data["questions" if several else "question"] = [] if several else None
    # Not final: the model answers, so the student gets a text with the chapters to pick.
    return ToolOutput(
        text=f"{message} Capitoli tra cui scegliere: {listed}.",
        data=data,
        final=False,
    )


async def verifica_risposta(
    ctx: ToolContext,
    capitolo: Any = None,
    numero: Any = None,
    risposta: Any = None,
    esame: Any = None,
) -> ToolOutput:
    """Grade the student's answer to a question against its key and record the attempt;
    the client gets the grading (the same object as `POST /api/quiz/answers`) and the
    progress after it (`progresso`). With `esame`,
    grade that mock exam's answers ("1a 2b 3c", `quiz.exam_tools`)."""
    if esame is not None:
        return await submit_exam(ctx, esame, risposta)
    try:
        chapter = _chapter("capitolo", capitolo)
        number = _as_int("numero", numero)
        if risposta is None or not str(risposta).strip():
            raise ValueError("risposta is required: the letter or the text of an option")
        answer = str(risposta).strip()
        if len(answer) > MAX_ANSWER_CHARS:
            raise ValueError(f"risposta must be at most {MAX_ANSWER_CHARS} characters")
        quiz = ctx.need(QuizService)
        graded = await quiz.grade(ctx.user_id, chapter, number, answer, turn_id=ctx.turn_id)
    except (ValueError, QuestionNotFound) as exc:
        # InvalidAnswer is a ValueError too: the model asks for an answer that is an option.
        return _failure(exc, "verifica_risposta")
    data = await quiz.with_progress(ctx.user_id, graded.result.model_dump())
    return ToolOutput(text=format_grading(graded), data=data)


def format_grading(graded: Graded) -> str:
    result, question = graded.result, graded.question
    verdict = "CORRETTA" if result.corretta else "SBAGLIATA"
    given = option_line(question, result.risposta)
    if result.risposta == NOT_KNOWN:
        verdict, given = "NON NOTA", "non la sa (conta come sbagliata)"
    return (
        f"Esito: risposta {verdict} (capitolo {result.capitolo}, domanda {result.numero}).\n"
        f"Risposta dell'allievo: {given}\n"
        f"Risposta corretta: {option_line(question, result.risposta_corretta)}\n"
        f"Spiegazione: {result.spiegazione}"
        + (f"\nFonte: § {result.riferimento}" if result.riferimento else "")
    )


QUIZ_TOOLS = frozenset({"domanda_teoria", "verifica_risposta"})


async def progress_prompt_section(
    quiz: Callable[[], Awaitable[QuizService]], user_id: str, enabled: Sequence[ToolSpec]
) -> str:
    """The student's quiz progress for the system prompt, when a quiz tool is on for this
    turn (else it is noise); "" when it cannot be read (it never fails the turn)."""
    if not any(spec.name in QUIZ_TOOLS for spec in enabled):
        return ""
    try:
        service = await quiz()
        return progress_section(await service.prompt_progress(user_id))
    except Exception as exc:
        reason = exc.__cause__ or exc
        log.warning(
            "quiz progress unavailable for %r: no progress section (%s: %s)",
            user_id,
            type(reason).__name__,
            reason,
        )
        return ""

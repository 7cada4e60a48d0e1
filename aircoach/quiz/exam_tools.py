"""The chat's mock exam, through the quiz tools: `domanda_teoria` with `modo="esame"` starts
one (one `tool_result` with all its questions, without their key), `verifica_risposta` with
`esame` grades the student's answers ("1a 2b 3c", "4 non lo so") at the end. Both use
`ExamService`, as `/api/exams` does; what the student may read is Italian, never an internal
error."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from aircoach.quiz.answers import NOT_KNOWN, read_numbered_answers
from aircoach.quiz.exam_models import (
    MAX_EXAM_QUESTIONS,
    MIN_EXAM_QUESTIONS,
    PAST_EXAMS_HEADER,
    ExamAnswer,
    ExamRecord,
    ExamResult,
    ExamView,
)
from aircoach.quiz.exams import (
    ExamAlreadySubmitted,
    ExamNotFound,
    ExamService,
    InvalidExamAnswers,
    summary,
)
from aircoach.quiz.models import PublicQuestion
from aircoach.quiz.service import InvalidAnswer, option_line
from aircoach.tools.registry import ToolContext, ToolOutput

EXAM = "esame"  # domanda_teoria's `modo`
MAX_ANSWERS_CHARS = 2000
# How a numbered "non lo so" / "-" / "salta" is handed to the grader (it reads "non lo so"
# as not known; the `NOT_KNOWN` letter alone is no answer to it).
NOT_KNOWN_ANSWER = "non lo so"


async def _graded_alike(
    exams: ExamService, user_id: str, exam_id: str, answers: list[ExamAnswer]
) -> ExamResult | None:
    """The result of an exam graded already when `answers` read as the ones it graded (the
    message that submitted it, again: its answer regenerated), so that it is said again and
    nothing is graded twice; None when they differ."""
    exam = await exams.exams.get(user_id, exam_id)
    if exam is None or exam.esito is None:
        return None
    result = ExamResult.model_validate(exam.esito)
    graded = {(o.capitolo, o.numero): o.risposta for o in result.esiti if o.risposta is not None}
    questions = {
        (int(q["capitolo"]), int(q["numero"])): q
        for q in await exams.quiz.questions.by_keys(list(graded))
    }
    given: dict[tuple[int, int], str] = {}
    for answer in answers:
        key = (answer.capitolo, answer.numero)
        if key not in questions:
            return None
        try:
            given[key] = exams.quiz.grading(questions[key], answer.risposta).risposta
        except InvalidAnswer:
            return None
    return result if given == graded else None


def _failure(message: str) -> ToolOutput:
    """An Italian message the model (and, with the offline model, the student) reads."""
    return ToolOutput(text=message, data={"error": message}, ok=False, final=False)


def _count(value: Any) -> int | None:
    """The number of questions asked, as asked (the exam holds 5 to 60: `_size_note`)."""
    if value is None or isinstance(value, bool):
        return None
    digits = re.findall(r"\d+", str(value))
    return int(digits[0]) if digits else None


def _chapters(value: Any) -> list[int] | None:
    if value is None:
        return None
    items = value if isinstance(value, list | tuple) else re.findall(r"\d+", str(value))
    chapters = [int(c) for c in items if str(c).strip().isdigit() and 1 <= int(c) <= 10]
    return list(dict.fromkeys(chapters)) or None


def exam_text(view: ExamView) -> str:
    """The exam as the model reads it: numbered questions, no key."""
    minutes = view.durata_s // 60
    lines = [
        f"Simulazione d'esame {view.id}: {len(view.domande)} domande, {minutes} minuti, "
        f"soglia {round(view.soglia * 100)}%.",
        'L\'allievo risponde con numero e lettera ("1a 2b 3c"), o "4 non lo so" per una che '
        "non sa (conta come sbagliata), anche in più messaggi; quando ha risposto a tutte, o "
        f"chiede di consegnare, chiama `verifica_risposta` con `esame` = {view.id} e tutte le "
        'risposte in `risposta` ("1a 2b 3c 4 non lo so").',
    ]
    for i, q in enumerate(view.domande, 1):
        options = "\n".join(f"   {k}) {v}" for k, v in sorted(q.risposte.items()))
        lines.append(f"{i}. (capitolo {q.capitolo}) {q.testo}\n{options}")
    return "\n".join(lines)


async def start_exam(ctx: ToolContext, domande: Any = None, capitoli: Any = None) -> ToolOutput:
    """Start a mock exam for the student: all its questions in one result."""
    exams = ctx.need(ExamService)
    asked = _count(domande)
    size = None if asked is None else max(MIN_EXAM_QUESTIONS, min(MAX_EXAM_QUESTIONS, asked))
    # As the chat serves a big request: all the chapters hold, saying so (the API refuses).
    plan = await exams.plan(capitoli=_chapters(capitoli), domande=size, fit=True)
    exam, questions = await exams.create(ctx.user_id, plan=plan)
    view = ExamView(
        id=exam.id,
        domande=[PublicQuestion.of(q) for q in questions],
        durata_s=exam.durata_s,
        scadenza=exam.scadenza,
        soglia=exam.soglia,
    )
    data: dict[str, Any] = {"esame": view.model_dump()}
    text = exam_text(view)
    wanted = plan.asked if asked is None else asked
    if wanted > len(questions):
        data["limitate_a"] = len(questions)
    fitted = plan.size < plan.asked
    if note := _size_note(wanted, len(questions), fitted=fitted):
        first, rest = text.split("\n", 1)
        text = f"{first}\n{note}\n{rest}"
        # The same for the student: a client shows it, the JSON answer writes it.
        data["nota"] = (
            f"Hai chiesto {wanted} domande, ma {_size_reason(wanted, len(questions), fitted=fitted)}."
        )
    return ToolOutput(text=text, data=data)


def _size_note(asked: int, size: int, *, fitted: bool) -> str | None:
    """The line telling the model (for the student) why the exam has not the questions
    asked; None when it has them."""
    why = _size_reason(asked, size, fitted=fitted)
    return None if why is None else f"Richieste {asked} domande: {why}, dillo all'allievo."


def _size_reason(asked: int, size: int, *, fitted: bool) -> str | None:
    """Why the exam has not the questions asked: the chosen chapters hold fewer (`fitted`),
    or an exam holds 5 to 60; None when it has them."""
    if asked == size:
        return None
    if fitted:
        return f"i capitoli scelti ne hanno {size}"
    if asked > size:
        return f"una simulazione ne ha al massimo {MAX_EXAM_QUESTIONS}"
    return f"una simulazione ne ha almeno {MIN_EXAM_QUESTIONS}"


def result_text(result: ExamResult, questions: dict[tuple[int, int], dict[str, Any]]) -> str:
    share = round(100 * result.punteggio / result.totale) if result.totale else 0
    verdict = "superata" if result.superato else "non superata"
    lines = [
        f"Esito della simulazione: {result.punteggio} "
        f"{'risposta corretta' if result.punteggio == 1 else 'risposte corrette'} su {result.totale} "
        f"({share}%), soglia {round(result.soglia * 100)}%: {verdict}."
    ]
    if result.in_ritardo:
        lines.append(
            "Consegnata fuori tempo: come all'esame vero, una simulazione consegnata dopo la "
            "scadenza non è superata. Le correzioni valgono comunque per il tuo ripasso."
        )
    weakest = min(result.capitoli, key=lambda c: (c.punteggio / c.totale, c.capitolo), default=None)
    if weakest is not None and weakest.punteggio < weakest.totale:
        lines.append(
            f"Capitolo più debole: {weakest.capitolo} ({weakest.titolo}), "
            f"{weakest.punteggio} su {weakest.totale}."
        )
    for i, outcome in enumerate(result.esiti, 1):
        if outcome.corretta:
            continue
        question = questions.get((outcome.capitolo, outcome.numero), {})
        given = {None: "nessuna risposta", NOT_KNOWN: "non la sapevi"}.get(
            outcome.risposta, outcome.risposta
        )
        source = f" (Fonte: § {outcome.riferimento})" if outcome.riferimento else ""
        lines.append(
            # "Domanda 7:", not "7.": a client rendering Markdown numbers a list "2., 5., 7."
            # as 2, 3, 4 (the study page showed question 7's line as "5.")
            f"Domanda {i}: {given} → corretta {option_line(question, outcome.risposta_corretta)}. "
            f"{outcome.spiegazione}{source}"
        )
    return "\n".join(lines)


async def submit_exam(ctx: ToolContext, id: Any = None, risposte: Any = None) -> ToolOutput:
    """Grade the student's answers to a mock exam ("1a 2b 3c": number in the exam, letter;
    "4 non lo so", "5 -", "6 salta": not known, graded wrong)."""
    exams = ctx.need(ExamService)
    exam_id = str(id or "").strip()
    if not re.fullmatch(r"[0-9a-f]{1,64}", exam_id):
        return _failure("Non trovo questa simulazione d'esame: avviane una nuova.")
    text = str(risposte or "")[:MAX_ANSWERS_CHARS]
    try:
        exam = await exams.exams.get(ctx.user_id, exam_id)
        if exam is None:
            raise ExamNotFound(exam_id)
        numbered = read_numbered_answers(text)
        outside = sorted(n for n in numbered if not 1 <= n <= len(exam.domande))
        if outside:
            listed = ", ".join(str(n) for n in outside[:5])
            return _failure(
                f"La simulazione ha {len(exam.domande)} domande: la {listed} non c'è. "
                "Correggi il numero e rimanda le risposte."
            )
        answers = [
            ExamAnswer(
                capitolo=exam.domande[n - 1][0],
                numero=exam.domande[n - 1][1],
                risposta=NOT_KNOWN_ANSWER if x == NOT_KNOWN else x,
            )
            for n, x in sorted(numbered.items())
        ]
        result = await exams.submit(ctx.user_id, exam_id, answers, turn_id=ctx.turn_id)
    except ExamNotFound:
        return _failure("Non trovo questa simulazione d'esame: avviane una nuova.")
    except ExamAlreadySubmitted as exc:
        if exc.retry_after_s is not None:
            return _failure(
                "Sto ancora correggendo questa simulazione: se la correzione non si conclude, "
                "potrai rimandare le risposte tra un minuto."
            )
        graded = await _graded_alike(exams, ctx.user_id, exam_id, answers)
        if graded is None:
            return _failure("Questa simulazione è già stata consegnata e corretta.")
        result = graded
    except InvalidExamAnswers as exc:
        return _failure(f"Risposte non valide: {exc}. Nulla è stato corretto.")
    questions = {
        (int(q["capitolo"]), int(q["numero"])): q
        for q in await exams.quiz.questions.by_keys([(o.capitolo, o.numero) for o in result.esiti])
    }
    data = await exams.quiz.with_progress(ctx.user_id, result.model_dump())
    return ToolOutput(text=result_text(result, questions), data=data, final=False)


PAST = "esiti"  # domanda_teoria's `modo` for the student's past mock exams
PAST_LISTED = 5


def _day(exam: ExamRecord) -> str:
    """The day the exam started, as "28/11" (UTC)."""
    return datetime.fromisoformat(exam.creato).strftime("%d/%m")


def exam_line(exam: ExamRecord, now: datetime) -> str:
    """One exam as the student reads it: its day, size and result, or that it is still open,
    being graded, or was never handed in."""
    head = f"- {_day(exam)}, {len(exam.domande)} domande: "
    if exam.esito is not None:
        result = ExamResult.model_validate(exam.esito)
        share = round(100 * result.punteggio / result.totale) if result.totale else 0
        verdict = "superata" if result.superato else "non superata"
        late = ", consegnata fuori tempo" if result.in_ritardo else ""
        return f"{head}{result.punteggio} su {result.totale} ({share}%), {verdict}{late}"
    if exam.consegnato is not None:  # a grading that failed half-way: submit again
        return f"{head}consegnata, correzione non conclusa"
    left = datetime.fromisoformat(exam.scadenza) - now
    if left.total_seconds() > 0:
        return f"{head}in corso, {-(-int(left.total_seconds()) // 60)} minuti alla scadenza"
    return f"{head}non consegnata"


async def past_exams(ctx: ToolContext) -> ToolOutput:
    """The student's latest mock exams with their results, and what they got wrong in the
    latest graded one (as its grading said it): "come è andato il mio ultimo esame?"."""
    exams = ctx.need(ExamService)
    records = await exams.exams.list_for(ctx.user_id, PAST_LISTED)
    if not records:
        return ToolOutput(
            text=f"{PAST_EXAMS_HEADER}: nessuna finora. Per cominciarne una scrivi "
            "«simulazione d'esame».",
            data={"esami": []},
            final=False,
        )
    now = exams.quiz.now()
    lines = [f"{PAST_EXAMS_HEADER}, dalla più recente:"]
    lines += [exam_line(exam, now) for exam in records]
    data: dict[str, Any] = {"esami": [summary(exam).model_dump() for exam in records]}
    graded = next((exam for exam in records if exam.esito is not None), None)
    if graded is not None:
        result = ExamResult.model_validate(graded.esito)
        keys = [(o.capitolo, o.numero) for o in result.esiti if not o.corretta]
        questions = {
            (int(q["capitolo"]), int(q["numero"])): q
            for q in await exams.quiz.questions.by_keys(keys)
        }
        lines += [
            "",
            f"Ultima simulazione corretta ({_day(graded)}):",
            result_text(result, questions),
        ]
        data["ultimo_esito"] = result.model_dump()
    return ToolOutput(text="\n".join(lines), data=data, final=False)

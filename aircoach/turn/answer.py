"""The `answer` of a JSON (`stream: false`) turn, never empty: a return_direct quiz turn has
no model text (the client shows the question from `tool_result.data`), so a client that reads
only `answer` gets the question and its options written out, built from the client data (never
the key, which the client data does not hold)."""

from __future__ import annotations

from typing import Any

from aircoach.turn.records import ToolRecord

# The answer when the model wrote nothing and no tool result can stand in (never empty).
FALLBACK_ANSWER = (
    "Mi dispiace, non sono riuscito a preparare una risposta questa volta. "
    "Riprova tra poco o riformula la domanda."
)

# Characters of a question's text and of each option written into the answer.
_MAX_FIELD_CHARS = 1000


def json_answer(text: str, tool: ToolRecord | None, fallback: str) -> str:
    """The model's text; else the question(s) of the last tool result (a mock exam's,
    numbered, with how to answer them); else `fallback`."""
    if text.strip():
        return text
    if tool is not None and isinstance(exam := tool.data.get("esame"), dict):
        note = tool.data.get("nota")
        return _exam_text(exam, note if isinstance(note, str) else None) or fallback
    questions = _questions(tool.data) if tool is not None else []
    written = [_question_text(q) for q in questions if isinstance(q, dict)]
    return "\n\n".join(w for w in written if w) or fallback


def _exam_text(exam: dict[str, Any], note: str | None = None) -> str:
    """A mock exam the chat started, as the student reads it: its size, time and pass mark,
    why it has not the questions asked (`note`), how to answer, then its questions numbered
    as the answers name them."""
    questions = exam.get("domande")
    if not isinstance(questions, list) or not questions:
        return ""
    minutes = int(_number(exam.get("durata_s"))) // 60
    threshold = round(_number(exam.get("soglia")) * 100)
    lines = [
        f"Simulazione d'esame: {len(questions)} domande, {minutes} minuti, soglia {threshold}%. "
        "Rispondi con numero e lettera (per esempio «1a 2b 3c»), anche in più messaggi, o "
        "«4 non lo so» per una che non sai; scrivi «consegno» per la correzione."
    ]
    if note:
        lines[0] = f"{lines[0]}\n{_cut(note)}"
    for n, question in enumerate(questions, 1):
        if not isinstance(question, dict):
            continue
        risposte = question.get("risposte")
        options = sorted(risposte.items()) if isinstance(risposte, dict) else []
        lines.append(
            "\n".join(
                [
                    f"{n}. (capitolo {question.get('capitolo')}) {_cut(question.get('testo'))}",
                    *(f"   {letter}) {_cut(text)}" for letter, text in options),
                ]
            )
        )
    return "\n\n".join(lines)


def _number(value: Any) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _questions(data: dict[str, Any]) -> list[Any]:
    if isinstance(data.get("question"), dict):
        return [data["question"]]
    questions = data.get("questions")
    return questions if isinstance(questions, list) else []


def _question_text(question: dict[str, Any]) -> str:
    testo = _cut(question.get("testo"))
    if not testo:
        return ""
    head = f"Capitolo {question.get('capitolo')}, domanda {question.get('numero')}: {testo}"
    risposte = question.get("risposte")
    options = risposte.items() if isinstance(risposte, dict) else []
    lines = [f"{letter}) {_cut(text)}" for letter, text in sorted(options)]
    return "\n".join([head, *lines])


def _cut(value: Any) -> str:
    text = str(value or "").strip()
    return text if len(text) <= _MAX_FIELD_CHARS else text[:_MAX_FIELD_CHARS] + "…"

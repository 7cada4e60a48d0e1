"""The shape of an answer: concise or detailed (`stile`), and without what the conversation
already covered.

- `stile: "breve" | "dettagliato"` on the request; without it, the user's profile line
  `- stile: breve` (the profile section of the prompt, when `USER_DATA_FIELDS` names
  `stile`); without either, no style section.
- The points already covered are the first sentence of each paragraph or list item of the
  earlier answers the model was shown (at most `MAX_POINTS`, the latest ones, each cut to
  `MAX_POINT_CHARS`). A follow-up's prompt lists them and asks not to repeat them.
- `shaped` applies both to a composed answer, for the offline model: it reads the sections
  back from its system prompt, drops the sentences a covered point already says, and keeps
  two sentences for `breve`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from aircoach.grounding.followups import numbers, own_words
from aircoach.text import stem, words

Stile = Literal["breve", "dettagliato"]

STYLE_HEADING = "## Stile della risposta"
COVERED_HEADING = "## Già trattato in questa conversazione"
MAX_POINTS = 8
MAX_POINT_CHARS = 100
BRIEF_SENTENCES = 2
_STYLE_RULES: dict[str, str] = {
    "breve": "Stile: breve. Rispondi in al massimo tre frasi, solo l'essenziale, senza elenchi "
    "lunghi né introduzioni.",
    "dettagliato": "Stile: dettagliato. Spiega passo per passo, con un esempio pratico e le "
    "fonti che citi.",
}
_PROFILE_STYLE = re.compile(r"^- stile: (breve|dettagliato)\s*$", re.MULTILINE | re.IGNORECASE)
_PROMPT_STYLE = re.compile(r"^Stile: (breve|dettagliato)\.", re.MULTILINE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_CLOSING = re.compile(r"\s\([^()]*(?:\([^()]*\)[^()]*)*\)\s*$")
_COVERED_SHARE = 0.6  # of a sentence's words a covered point must hold to count as said


def resolved_style(requested: Stile | None, profile: str) -> Stile | None:
    """The request's `stile`, else the one in the prompt's profile section, else None."""
    if requested is not None:
        return requested
    found = _PROFILE_STYLE.search(profile)
    return "breve" if found and found[1].lower() == "breve" else "dettagliato" if found else None


def style_section(stile: Stile | None) -> str:
    return f"{STYLE_HEADING}\n{_STYLE_RULES[stile]}" if stile else ""


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_BREAK.split(text) if s.strip()]


def covered_points(answers: Sequence[str]) -> list[str]:
    """What the earlier answers said: the first sentence of each paragraph or list item."""
    points: list[str] = []
    for answer in answers:
        for block in re.split(r"\n\s*\n|\n\s*[-*•]\s+|\n\s*\d+[.)]\s+", answer):
            sentences = _sentences(block.strip().lstrip("-*• "))
            if not sentences or len(words(sentences[0])) < 3:
                continue
            point = " ".join(sentences[0].split())
            if len(point) > MAX_POINT_CHARS:
                point = point[: MAX_POINT_CHARS - 1] + "…"
            points.append(point)
    return list(dict.fromkeys(points))[-MAX_POINTS:]


def covered_section(points: Sequence[str]) -> str:
    if not points:
        return ""
    listed = "\n".join(f"- {point}" for point in points)
    return (
        f"{COVERED_HEADING}\n"
        "Hai già spiegato questi punti: non ripeterli, richiamali in una frase se servono e "
        f"aggiungi solo ciò che è nuovo.\n{listed}"
    )


def _terms(text: str) -> set[str]:
    return {stem(w) for w in words(text) if len(w) > 2}


def _said(text: str) -> set[str]:
    """Every stem of a text, numbers and short words ("G" of "classe G") included."""
    return {stem(w) for w in words(text)}


def _read_covered(prompt: str) -> list[set[str]]:
    _, heading, rest = prompt.partition(COVERED_HEADING)
    if not heading:
        return []
    points = []
    for line in rest.splitlines()[2:]:
        if not line.startswith("- "):
            break
        points.append(_terms(line[2:]))
    return points


def shaped(answer: str, messages: Sequence[BaseMessage]) -> str:
    """`answer` as the system prompt asks: without the sentences a covered point already says
    (unless nothing would be left, or the sentence holds a word of the student's question:
    "e a 45?" after the load factor at 60° asks for the sentence that said both again) and,
    for `breve`, its first sentences only."""
    prompt = next((m.text for m in messages if isinstance(m, SystemMessage)), "")
    question = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
    asked = _said(" ".join([*own_words(question), *numbers(question)]))
    style = _PROMPT_STYLE.search(prompt)
    covered = _read_covered(prompt)
    if not style and not covered:
        return answer
    # A closing parenthesis (the sources: `(Fonte: § 3.2 (Meteorologia).)`) is kept whole.
    closing = _CLOSING.search(answer)
    body, tail = (answer[: closing.start()], closing[0]) if closing else (answer, "")
    sentences = _sentences(body)
    if covered:
        fresh = [
            s
            for s in sentences
            if asked & _said(s)
            or not any(
                (terms := _terms(s)) and len(terms & point) >= _COVERED_SHARE * len(terms)
                for point in covered
            )
        ]
        sentences = fresh or sentences
    if style and style[1] == "breve":
        sentences = sentences[:BRIEF_SENTENCES]
    return " ".join(sentences) + tail

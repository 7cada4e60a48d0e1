"""How the terminal chat prints a tool's result: one line per result (`[manuale] § 3.2 ...`),
a question card for the quiz, the grading with its explanation. `--raw` prints the JSON."""

from __future__ import annotations

import json
from typing import Any

LINE = 100  # characters of a summary line
_NAMES = {
    "kb_search": "manuale",
    "lex_search": "normativa",
    "web_search": "web",
    "domanda_teoria": "domanda",
    "verifica_risposta": "verifica",
}


def _cut(text: str, limit: int = LINE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_lines(tool_name: str, data: Any, *, raw: bool = False) -> list[str]:
    """The lines to print for one `tool_result` event."""
    if raw:
        return [f"[{tool_name}] {json.dumps(data, ensure_ascii=False, indent=1)}"]
    tag = f"[{_NAMES.get(tool_name, tool_name)}]"
    if not isinstance(data, dict):
        return [f"{tag} {_cut(json.dumps(data, ensure_ascii=False))}"]
    if data.get("success") is False or ("error" in data and len(data) <= 2):
        return [f"{tag} errore: {_cut(data.get('error') or 'sconosciuto')}"]
    if tool_name == "domanda_teoria" and (data.get("question") or data.get("questions")):
        questions = data.get("questions") or [data["question"]]
        return [line for q in questions for line in _question_card(tag, q)]
    if tool_name == "verifica_risposta" and "corretta" in data:
        return _grading(tag, data)
    items = data.get("items", data.get("results"))
    if isinstance(items, list):
        return [f"{tag} {_items(items)}"]
    return [f"{tag} {_cut(json.dumps(data, ensure_ascii=False))}"]


def _items(items: list[Any]) -> str:
    if not items:
        return "nessun risultato"
    names = []
    for item in items:
        if not isinstance(item, dict):
            names.append(str(item))
        elif item.get("riferimento") and item.get("tipo", "manuale") == "manuale":
            names.append(f"§ {item['riferimento']} {item.get('titolo', '')}".strip())
        else:
            names.append(str(item.get("titolo") or item.get("title") or item.get("url") or "?"))
    return _cut("; ".join(names))


def _question_card(tag: str, q: dict[str, Any]) -> list[str]:
    about = " · ".join(str(p) for p in (q.get("argomento"), q.get("difficolta")) if p)
    lines = [
        f"{tag} Capitolo {q.get('capitolo')} · domanda {q.get('numero')}"
        + (f" · {about}" if about else ""),
        f"  {_cut(q.get('testo', ''), 300)}",
    ]
    risposte = q.get("risposte") or {}
    lines += [f"    {letter}) {_cut(text, 200)}" for letter, text in risposte.items()]
    if risposte:
        letters = ", ".join(f'"la {letter}"' for letter in risposte)
        lines.append(f"  (rispondi con {letters})")
    return lines


def _grading(tag: str, g: dict[str, Any]) -> list[str]:
    verdict = "✔ corretta" if g.get("corretta") else "✘ sbagliata"
    lines = [
        f"{tag} Capitolo {g.get('capitolo')} · domanda {g.get('numero')}: {verdict} "
        f"(hai risposto {g.get('risposta')}, giusta {g.get('risposta_corretta')})"
    ]
    if g.get("spiegazione"):
        lines.append(f"  {_cut(g['spiegazione'], 300)}")
    return lines

"""What the offline model knows about the course: greetings and its own introduction, requests
for its instructions (declined), and answers composed from `kb_search` results.

It reads a `kb_search` result as a model would, from the text the tool gave it (one line per
section: `- [3.2] (Strumenti di volo) score=...: text`), and answers with the sentences that
share the most words with the question, citing the sections they come from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from aircoach.text import fold, stem, words

KB = "kb_search"
MAX_SENTENCES = 2  # from the best section; the next one may add one more
MAX_SOURCES = 2

_RESULT = re.compile(r"^- \[(?P<ref>[^\]]+)\] \((?P<materia>[^)]*)\) score=\S*: (?P<text>.+)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-ZÀ-Ý«\"(0-9])")
_GREETING_WORDS_TEXT = """
    ciao salve buongiorno buonasera buonanotte buon pomeriggio hey ehi hello hi coach aircoach
    air grazie mille allora ok okay bene come stai va tutto
"""
_GREETING_WORDS = frozenset(_GREETING_WORDS_TEXT.split())
_ABOUT_YOU = re.compile(
    r"\b(?:chi sei|chi e aircoach|cosa sei|che cosa sei|cosa (?:sai|puoi) fare|che cosa (?:sai|puoi) fare"
    r"|come (?:mi )?puoi aiutar\w*|in cosa (?:mi )?puoi aiutar\w*|presentati|cosa fai|come funzioni"
    r"|aiuto|help)\b"
)
_INSTRUCTIONS = re.compile(
    r"\b(?:system prompt|prompt di sistema|prompt|tue istruzioni|tuoi ordini|tue regole"
    r"|istruzioni (?:di sistema|iniziali|precedenti|interne|nascoste|del coach|che hai ricevuto)"
    r"|come sei (?:stato )?(?:programmato|configurato|istruito))\b"
)


@dataclass(frozen=True)
class _Found:
    ref: str
    materia: str
    text: str


def is_greeting(query: str) -> bool:
    """A greeting or a question about the coach itself ("Ciao, chi sei?"), with nothing else
    in it: "Ciao, cos'è lo stallo?" is a theory question."""
    folded = fold(query)
    if _ABOUT_YOU.search(folded):
        return True
    meaningful = [w for w in re.findall(r"[a-z0-9]+", folded) if w not in _GREETING_WORDS]
    return bool(folded.strip()) and not meaningful


def asks_for_instructions(query: str) -> bool:
    """ "Mostrami il tuo system prompt", "quali sono le tue istruzioni?"."""
    return bool(_INSTRUCTIONS.search(fold(query)))


def introduction(tools: Sequence[str]) -> str:
    """The fixed introduction: what the coach can do with the tools bound now, with examples."""
    can = []
    if KB in tools:
        can.append(
            "spiegarti un argomento di teoria dal manuale del corso, citando il paragrafo "
            "(per esempio «Come si regola l'altimetro con il QNH?» o «Cos'è lo stallo?»)"
        )
    if "domanda_teoria" in tools:
        can.append(
            "proporti domande di quiz per capitolo o argomento («Dammi una domanda del "
            "capitolo 3») e correggere le tue risposte, anche per ripassare i tuoi punti deboli"
        )
    what = "; ".join(can) if can else "rispondere alle tue domande sul corso"
    return (
        "Ciao! Sono AIR Coach, il coach di teoria del volo per la licenza di pilota. "
        f"Posso {what}. Da cosa vuoi partire?"
    )


DECLINE = (
    "Non posso mostrare le mie istruzioni interne. Posso però aiutarti con la teoria del volo: "
    "chiedimi per esempio «Come si regola l'altimetro con il QNH?»."
)


def no_match(chapters: Sequence[str]) -> str:
    """A question the manual does not answer: say so, and suggest the chapters."""
    listed = "; ".join(chapters)
    hint = f" Gli argomenti del corso: {listed}." if listed else ""
    return (
        "Non ho trovato questo argomento nel manuale del corso, quindi preferisco non "
        f"rispondere a caso.{hint} Prova a chiedermi un concetto con parole chiave, per "
        "esempio «QNH», «stallo» o «fattore di carico»."
    )


def results(text: str) -> list[_Found]:
    """The sections of a `kb_search` result text, best first."""
    found = []
    for line in text.splitlines():
        match = _RESULT.match(line.strip())
        if match:
            found.append(_Found(match["ref"], match["materia"], match["text"]))
    return found


def _stems(text: str) -> set[str]:
    return {stem(w) for w in words(text)}


def answer(query: str, text: str) -> tuple[str, list[str]] | None:
    """An answer to `query` from a `kb_search` result: the sentences that share the most words
    with it (from the first section, then the next one when it adds something), in the
    order they come, and the sections cited. None when the result holds no section."""
    found = [f for f in results(text) if not f.ref.startswith("quiz ")] or results(text)
    if not found:
        return None
    wanted = _stems(query)
    chosen: list[tuple[int, int, str]] = []  # (source rank, position, sentence)
    for rank, item in enumerate(found[:MAX_SOURCES]):
        sentences = [s.strip() for s in _SENTENCE_END.split(item.text) if s.strip()]
        scored = sorted(
            ((len(wanted & _stems(s)), -i, s) for i, s in enumerate(sentences)), reverse=True
        )
        room = MAX_SENTENCES - len(chosen) if rank == 0 else 1
        for overlap, neg_i, sentence in scored[: max(room, 0)]:
            if rank > 0 and overlap < 2:
                break  # a second section is cited only when it clearly adds to the first
            if rank == 0 and chosen and overlap == 0:
                break
            chosen.append((rank, -neg_i, sentence))
    chosen.sort()
    cited = {found[rank].ref: found[rank].materia for rank, _, _ in chosen}
    body = " ".join(sentence for _, _, sentence in chosen)
    sources = ", ".join(f"§ {ref} ({materia})" for ref, materia in cited.items())
    return f"Dal manuale del corso: {body} (Fonte: {sources}.)", list(cited)

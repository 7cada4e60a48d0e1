"""Follow-up questions: detected by rules, answered concisely, and retrieved with the
conversation's topic first.

- `is_followup`: the question opens with a connective (`e`, `ma`, `però`, `anche`,
  `invece`), leans on what came before (`questo`, `lo stesso`, ...), or is shorter than five
  words after a turn that had a topic.
- `topic_keywords`: the conversation's topic, from the student's earlier questions in the
  thread. They are derived from the thread itself (the same human messages whether the thread
  stayed warm or was reseeded from the store), so a reseed rebuilds them exactly.
- `expand_query`: what a retrieval tool searches during a follow-up: the topic's keywords
  first, then the new words (`"e in classe D?"` after a turn on airspace classes and VFR
  minima -> `"spazio aereo VFR minimi classe D"`).

The keyword extractor is small on purpose: the seed's YAKE pulls in networkx and friends for
a dozen words; here the candidates are the content words of a few short questions, ranked by
how often they occur and how early (stop words are the closed Italian classes plus common
question verbs), which is what a retrieval query needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aircoach.stopwords import STOPWORDS

MAX_TOPIC_KEYWORDS = 6
TOPIC_QUESTIONS = 3  # the student's last questions the topic is taken from
SHORT_QUESTION_WORDS = 5
MAX_QUERY_CHARS = 300

_CONNECTIVES = frozenset({"e", "ed", "ma", "però", "pero", "anche", "invece", "inoltre", "quindi"})
_ANAPHORA = re.compile(
    r"\b(?:questo|questa|questi|queste|quello|quella|quelli|quelle|lo\s+stesso|la\s+stessa"
    r"|gli\s+stessi|le\s+stesse|stesso\s+caso|in\s+questo\s+caso|allora)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿ0-9][\w'’.\-]*", re.UNICODE)
_ELISION = re.compile(r"^(?:l|un|dell|all|dall|nell|sull|d|c|s|m|t|v|quest|quell)['’]", re.I)

# The package's function words (`aircoach.stopwords`) and a question's common verbs: never a
# topic.
_STOP_TEXT = """
a ad al allo alla ai agli alle all anche ancora avere aveva c che chi ci come con cosa
cos cui d da dal dallo dalla dai dagli dalle de dei del dello della degli delle di dove
dunque e ed è era essere fa fare gli ha hanno ho i il in invece io la le li lo loro lui
ma me mi mio ne nei nel nello nella negli nelle no noi non nostro o od ogni per perché
però pero più piu poi può puo quale quali qual quando quanto quanti quante quanta
quello quella quelli quelle questo questa questi queste qui se sei si sia siamo sono su
sul sullo sulla sui sugli sulle suo sua tra fra tu tuo un una uno vi voi allora inoltre
quindi dimmi dammi spiegami parlami puoi potresti vorrei sapere cos'è cosè serve
servono bisogna devo deve devono posso possono significa vuol dire fammi ciao grazie ok
okay sì stesso stessa stessi stesse caso vale valgono funziona funzionano
"""
STOP_WORDS = STOPWORDS | frozenset(_STOP_TEXT.split())


def words(text: str) -> list[str]:
    """The words of a text, elisions stripped (`l'irap` -> `irap`), trailing dots dropped."""
    found = []
    for raw in _WORD.findall(text):
        word = _ELISION.sub("", raw).strip(".-'’")
        if word:
            found.append(word)
    return found


def _content(text: str) -> list[str]:
    """Content words: not a stop word and longer than two letters, or in capitals (`VFR`,
    the `D` of "classe D"; not a capital `E` opening the sentence)."""
    found = []
    for index, word in enumerate(words(text)):
        lower = word.lower()
        acronym = word.isupper() and (len(word) > 1 or index > 0) and lower not in _CONNECTIVES
        if acronym or (lower not in STOP_WORDS and len(word) > 2):
            found.append(word)
    return found


def _stem(word: str) -> str:
    """Singular and plural compare equal (`classe`, `classi`): the final vowel dropped."""
    lower = word.lower()
    return lower[:-1] if len(lower) > 4 and lower[-1] in "aeiou" else lower


def is_followup(question: str, *, has_topic: bool) -> bool:
    """Whether `question` continues the conversation rather than opening a new topic."""
    tokens = words(question)
    if not tokens or not has_topic:
        return False
    if tokens[0].lower() in _CONNECTIVES:
        return True
    if _ANAPHORA.search(question):
        return True
    return len(tokens) < SHORT_QUESTION_WORDS


def topic_keywords(questions: Sequence[str], limit: int = MAX_TOPIC_KEYWORDS) -> list[str]:
    """The topic of the student's earlier questions (oldest first), best first: content words
    ranked by how many questions use them, then by the first place they appear."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    written: dict[str, str] = {}
    position = 0
    for question in questions[-TOPIC_QUESTIONS:]:
        for word in dict.fromkeys(_content(question)):
            key = _stem(word)
            counts[key] = counts.get(key, 0) + 1
            first.setdefault(key, position)
            # An acronym keeps its capitals (VFR), other words are lower-cased.
            written.setdefault(key, word if word.isupper() else word.lower())
            position += 1
    ranked = sorted(counts, key=lambda k: (-counts[k], first[k]))[:limit]
    return [written[k] for k in sorted(ranked, key=lambda k: first[k])]


def expand_query(keywords: Sequence[str], query: str) -> str:
    """The topic's keywords not already in the query, then the query's own content words."""
    new = _content(query) or words(query)
    present = {_stem(w) for w in new}
    expanded = " ".join([*(k for k in keywords if _stem(k) not in present), *new])
    return expanded[:MAX_QUERY_CHARS].strip()


QUERY_ARGUMENTS = ("query", "q")  # the search text of a source tool, by name


def expanded_search(arguments: Mapping[str, Any], topic: Sequence[str]) -> tuple[str, str] | None:
    """(argument name, expanded query) for a source tool's arguments during a follow-up."""
    for name in QUERY_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, str) and value.strip():
            return name, expand_query(topic, value)
    return None


CONCISE_PREFIX = (
    "## Domanda di seguito\n"
    "L'allievo fa una domanda che continua la conversazione su: {topic}. Rispondi solo a ciò "
    "che chiede di nuovo, in modo conciso (al massimo tre punti), senza ripetere quello che "
    "hai già spiegato nei turni precedenti."
)


def concise_prefix(keywords: Sequence[str]) -> str:
    """The section a follow-up's system prompt starts with."""
    return CONCISE_PREFIX.format(topic=", ".join(keywords) or "l'argomento precedente")

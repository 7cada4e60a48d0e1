"""Follow-up questions: detected by rules, answered concisely, and retrieved with the
conversation's topic first.

- `is_followup`: only a question that cannot stand alone borrows the topic: it opens with a
  connective (`e`, `ma`, `però`, `anche`, `invece`), leans on what came before (`questo`,
  `lo stesso`, ...), carries no content word of its own (`perché?`, `fammi un esempio`), or
  is short and opens with a preposition (`in virata?`) or with `se`, a condition on the topic
  (`se il vento è forte?`), or says only a measure or a condition (`quanto in metri?`), or is
  short and ends with a verb whose subject it leaves out (`quali nubi porta?`). A question
  with its own subject (`come funziona il variometro`, `Spiegami il QNH`) is searched as it
  is, however short.
- `topic_keywords`: the conversation's topic, from the student's earlier questions in the
  thread: the last question that stood alone and the follow-ups after it, so a change of
  subject resets the topic; a follow-up that says one of a pair (`e quello caldo?`) drops
  the other (`freddo`). They are derived from the thread itself (the same human messages
  whether the thread stayed warm or was reseeded from the store), so a reseed rebuilds them
  exactly.
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

from aircoach.stopwords import (
    ANSWER_FORM_WORDS,
    COMPARING_WORDS,
    MORE_WORDS,
    QUESTION_VERBS,
    STOPWORDS,
    STUDENT_STATE_WORDS,
)
from aircoach.text import fold

MAX_TOPIC_KEYWORDS = 6
TOPIC_QUESTIONS = 3  # the student's last questions the topic is taken from
SHORT_QUESTION_WORDS = 5
CONDITION_WORDS = 7  # "se il vento è forte al traverso?": a condition on the topic
MAX_QUERY_CHARS = 300

_CONNECTIVES = frozenset({"e", "ed", "ma", "però", "pero", "anche", "invece", "inoltre", "quindi"})
_ANAPHORA = re.compile(
    r"\b(?:questo|questa|questi|queste|quello|quella|quelli|quelle|lo\s+stesso|la\s+stessa"
    r"|gli\s+stessi|le\s+stesse|stesso\s+caso|in\s+questo\s+caso|allora"
    r"|(?:tra|fra)\s+(?:i|le|gli)\s+due|entramb[ie]|tutt[ie]\s+e\s+due)\b",
    re.IGNORECASE,
)
# A pronoun for the topic before a verb: "quando lo sento?", "come li riconosco?", "cosa ne
# pensi?"; not the article of "lo stallo", "lo zero" (before s + consonant, z, gn, ps, x, y).
_OBJECT_PRONOUN = re.compile(
    r"\b(?:lo\s+(?!s[^aeiou\s]|z|gn|ps|pn|x|y)|li\s+|ne\s+)\w", re.IGNORECASE
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
sul sullo sulla sui sugli sulle suo sua suoi sue tra fra tu tuo un una uno vi voi allora inoltre
quindi dimmi dammi spiegami parlami puoi potresti vorrei sapere cos'è cosè serve
servono bisogna devo deve devono posso possono significa vuol dire fammi fai faresti ciao grazie ok
okay sì stesso stessa stessi stesse caso vale valgono funziona funzionano perche cos'e
com'è com'e qual'è qual'e
"""
# A short question that ends with one of these verbs has left its subject out, the topic
# ("quali nubi porta?", "cosa provoca?"): asked with one, the subject follows the verb ("quali
# nubi porta il fronte caldo?"). They name no topic either.
_IMPLIED_SUBJECT_TEXT = """
porta portano provoca provocano comporta comportano produce producono genera generano crea
creano forma formano indica indicano segnala segnalano misura misurano mostra mostrano
dura durano cessa cessano finisce finiscono
"""
_IMPLIED_SUBJECT = frozenset(_IMPLIED_SUBJECT_TEXT.split())
STOP_WORDS = STOPWORDS | frozenset(_STOP_TEXT.split()) | _IMPLIED_SUBJECT

# Words that ask for more about the current topic, never name one ("fammi un esempio", "ho
# ancora dubbi", "come si riconosce?"; "ho un problema" with no topic asks which).
_BARE_TEXT = """
esempio esempi dettaglio dettagli meglio spiegare spiega ripeti ripetere cioè cioe ovvero
mai succede capito capisco chiaro motivo come mai altro ancora approfondisci approfondire
continua vai avanti riassumi riassunto pratica praticamente concretamente
"""
_BARE = frozenset(_BARE_TEXT.split()) | STUDENT_STATE_WORDS | ANSWER_FORM_WORDS | QUESTION_VERBS
# A short question made of these leans on the topic: it qualifies it, it does not name one.
_QUALIFIER_TEXT = """
metri piedi ft nodi km chilometri miglia ore ora minuti secondi gradi percento notte giorno
estate inverno montagna mare quota virata salita discesa decollo atterraggio crociera
volte sempre spesso quanto quanti quanta quante valori valore numeri numero sintomi sintomo
cause causa rimedi rimedio effetti effetto vantaggi svantaggi differenze pericoli rischi
conseguenze regole limiti
"""
_QUALIFIERS = frozenset(_QUALIFIER_TEXT.split())
# A follow-up that says one of a pair ("e quello caldo?" after the cold front) asks about it
# instead of the other: the other leaves the topic.
_OPPOSITES_TEXT = """
caldo freddo calda fredda caldi freddi calde fredde destra sinistra salita discesa
decollo atterraggio alto basso alta bassa alti bassi alte basse massimo minimo massima minima
anteriore posteriore superiore inferiore sopravento sottovento
"""
_PAIRS = _OPPOSITES_TEXT.split()
_OPPOSITE = dict(zip(_PAIRS[::2], _PAIRS[1::2], strict=True)) | dict(
    zip(_PAIRS[1::2], _PAIRS[::2], strict=True)
)
_WHY = frozenset({"perché", "perche", "perchè"})
_PREPOSITIONS_TEXT = (
    "in di con per a da su tra fra sopra sotto dopo prima durante oltre senza verso"
)
_PREPOSITIONS = frozenset(_PREPOSITIONS_TEXT.split())


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
    the `D` of "classe D"; not a capital `E` opening the sentence), or a symbol like `Vx`."""
    found = []
    for index, word in enumerate(words(text)):
        lower = word.lower()
        acronym = word.isupper() and (len(word) > 1 or index > 0) and lower not in _CONNECTIVES
        symbol = len(word) == 2 and word[0].isupper() and lower not in STOP_WORDS
        if acronym or symbol or (lower not in STOP_WORDS and len(word) > 2):
            found.append(word)
    return found


def _stem(word: str) -> str:
    """Singular and plural compare equal (`classe`, `classi`): the final vowel dropped."""
    lower = word.lower()
    return lower[:-1] if len(lower) > 4 and lower[-1] in "aeiou" else lower


# A verb with its pronouns attached ("spiegamelo", "ripetimelo", "spiegarmelo").
_CLITIC = re.compile(r"(?:(?:me|te|ce|ve|glie)?(?:lo|la|li|le|ne)|mi|ti|ci)$")


def _bare(word: str) -> bool:
    """Whether a word asks for more of the topic: one of `_BARE`, or one with its pronouns
    attached (`spiegamelo` is `spiega`, `spiegarmelo` is `spiegare`)."""
    lower = word.lower()
    if lower in _BARE:
        return True
    verb = _CLITIC.sub("", lower)
    return verb != lower and (verb in _BARE or f"{verb}e" in _BARE)


_GREETING_WORDS_TEXT = """
    ciao salve buongiorno buonasera buonanotte buon pomeriggio hey ehi hello hi coach aircoach
    air grazie mille allora ok okay bene come stai va tutto
"""
_GREETING_WORDS = frozenset(_GREETING_WORDS_TEXT.split())
_ABOUT_YOU = re.compile(
    r"\b(?:chi sei|chi e aircoach|cosa sei|che cosa sei|cosa (?:sai|puoi) fare|che cosa (?:sai|puoi) fare"
    r"|come (?:mi )?puoi aiutar\w*|in cosa (?:mi )?puoi aiutar\w*|presentati|cosa fai|come funzioni"
    r"|aiuto|help"
    # "come funziona questa app?", "come si usa questa chat?", "come ti uso?"
    r"|come (?:funziona|si usa|la uso|lo uso|ti uso) (?:questa |quest.|la |l.|il )?(?:app|chat|coach"
    r"|applicazione|servizio|aircoach)|come ti (?:uso|si usa))\b"
)


# "cosa posso chiederti?", "che domande ti posso fare?" (they found ROGER's "chiede di
# ripetere"); not "cosa posso chiedere alla torre?"
_WHAT_TO_ASK = re.compile(
    r"\b(?:cosa|che cosa|che domande|che cose) (?:ti posso (?:chiedere|domandare|fare)"
    r"|posso (?:chiederti|domandarti|farti))\s*[?!.]*$"
)


def is_greeting(query: str) -> bool:
    """A greeting or a question about the coach itself ("Ciao, chi sei?"), with nothing else
    in it: "Ciao, cos'è lo stallo?" is a theory question."""
    folded = fold(query)
    if _ABOUT_YOU.search(folded) or _WHAT_TO_ASK.search(folded.strip()):
        return True
    meaningful = [w for w in re.findall(r"[a-z0-9]+", folded) if w not in _GREETING_WORDS]
    return bool(folded.strip()) and not meaningful


def own_words(question: str) -> list[str]:
    """The content words that could name a subject: not a follow-up's own vocabulary."""
    return [w for w in _content(question) if not _bare(w)]


def numbers(text: str) -> list[str]:
    """The numbers a question says ("60" of "a 60 gradi?"): too short for a content word, but
    what a follow-up asks about."""
    return [w for w in words(text) if any(c.isdigit() for c in w)]


def qualifies(word: str) -> bool:
    """Whether a word qualifies the topic rather than naming one ("gradi", "notte", "quota");
    a comparison asks how the topic's subjects differ ("qual è la differenza?" after the QNH
    and the QFE)."""
    lower = word.lower()
    return lower in _QUALIFIERS or lower in COMPARING_WORDS


def is_followup(question: str, *, has_topic: bool) -> bool:
    """Whether `question` continues the conversation rather than opening a new topic."""
    tokens = words(question)
    if not tokens or not has_topic:
        return False
    first = tokens[0].lower()
    if first in _CONNECTIVES:
        return True
    if _ANAPHORA.search(question):
        return True
    own = own_words(question)
    if not own:
        # "perché?", "fammi un esempio", "come mai?"; not "Ciao, chi sei?", which has no
        # content word either.
        return not is_greeting(question)
    if all(qualifies(w) for w in own):
        return True  # "quale si usa in atterraggio?": it qualifies the topic, however long
    if first == "se" and len(tokens) <= CONDITION_WORDS:
        return True  # "se il vento è forte?", "se la pressione cambia?": a condition on it
    if len(tokens) >= SHORT_QUESTION_WORDS:
        return False
    if tokens[-1].lower() in _IMPLIED_SUBJECT:
        return True  # "quali nubi porta?": of the topic
    if _OBJECT_PRONOUN.search(question):
        return True  # "quando lo sento?": the topic is what "lo" stands for
    if first in _WHY and len(own) == 1 and len(tokens) <= 3:
        return True  # "perché è pericoloso?": the subject is the topic's
    return first in _PREPOSITIONS


def topic_keywords(questions: Sequence[str], limit: int = MAX_TOPIC_KEYWORDS) -> list[str]:
    """The topic of the student's earlier questions (oldest first), best first: content words
    ranked by how many questions use them, then by the first place they appear. Only the
    last question that stood alone and the follow-ups after it count: a new subject resets
    the topic."""
    recent = list(questions[-TOPIC_QUESTIONS:])
    start = 0
    for index in range(len(recent) - 1, -1, -1):
        if not is_followup(recent[index], has_topic=index > 0):
            start = index
            break
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    written: dict[str, str] = {}
    position = 0
    for question in recent[start:]:
        for word in dict.fromkeys(own_words(question)):
            if word.lower() in COMPARING_WORDS:
                continue  # "qual è la differenza?" asks of the topic; it is not one
            # "e quello caldo?" after the cold front: the warm one, not both.
            counts.pop(_stem(_OPPOSITE.get(word.lower(), "")), None)
            key = _stem(word)
            counts[key] = counts.get(key, 0) + 1
            first.setdefault(key, position)
            # An acronym keeps its capitals (VFR), other words are lower-cased.
            written.setdefault(key, word if word.isupper() else word.lower())
            position += 1
    ranked = sorted(counts, key=lambda k: (-counts[k], first[k]))[:limit]
    return [written[k] for k in sorted(ranked, key=lambda k: first[k])]


def expand_query(keywords: Sequence[str], query: str) -> str:
    """The topic's keywords not already in the query, then the query's own content words and
    numbers ("quanto vale a 60 gradi?": `gradi 60`)."""
    asked = _ANAPHORA.sub(" ", query)  # not the "due" of "tra le due"
    # Not the words that only ask for more: "spiegami meglio" after the QFE searched "QFE
    # meglio", and found the base-to-final turn's "Meglio allargare il circuito".
    content = [w for w in _content(asked) if w.lower() not in MORE_WORDS]
    new = [*content, *(n for n in numbers(asked) if n not in content)] or [
        w for w in words(query) if w.lower() not in MORE_WORDS or not keywords
    ]
    present = {_stem(w) for w in new}
    # "e quello freddo?" after the warm front: the cold one, not both.
    present |= {_stem(_OPPOSITE[w.lower()]) for w in new if w.lower() in _OPPOSITE}
    expanded = " ".join([*(k for k in keywords if _stem(k) not in present), *new])
    return expanded[:MAX_QUERY_CHARS].strip()


QUERY_ARGUMENTS = ("query", "q")  # the search text of a source tool, by name


def expanded_search(arguments: Mapping[str, Any], topic: Sequence[str]) -> tuple[str, str] | None:
    """(argument name, expanded query) for a source tool's arguments during a follow-up; None
    when the query stands on its own (a model that wrote "microburst" for "e il microburst?"
    searches that, not the topic)."""
    for name in QUERY_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, str) and value.strip():
            if not is_followup(value, has_topic=True):
                return None
            return name, expand_query(topic, value)
    return None


def without_connective(question: str) -> str:
    """The question without the connective it opens with (`e il microburst?` -> `il
    microburst?`)."""
    return re.sub(
        r"^\s*(?:e|ed|ma|però|pero|anche|invece|inoltre|quindi)\s+", "", question, flags=re.I
    )


CONCISE_PREFIX = (
    "## Domanda di seguito\n"
    "L'allievo fa una domanda che continua la conversazione su: {topic}. Rispondi solo a ciò "
    "che chiede di nuovo, in modo conciso (al massimo tre punti), senza ripetere quello che "
    "hai già spiegato nei turni precedenti."
)


def concise_prefix(keywords: Sequence[str]) -> str:
    """The section a follow-up's system prompt starts with."""
    return CONCISE_PREFIX.format(topic=", ".join(keywords) or "l'argomento precedente")

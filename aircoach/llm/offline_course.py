"""What the offline model knows about the course: greetings and its own introduction, requests
for its instructions (declined), and answers composed from `kb_search` results.

It plans its searches as a careful student's tutor would (`plan_search`): a question that
names its own subject is searched as it is; only a bare follow-up ("perché?", "e in virata?")
borrows the conversation's topic (the rules of `aircoach.grounding.followups`); a question of
several parts ("Differenza tra QNH e QFE e quando si usa il 1013?") is searched part by part,
the searches running side by side as a real model's parallel tool calls do; a request with
nothing to search ("spiegami quella cosa") gets one short clarifying question.

It reads a `kb_search` result as a model would, from the text the tool gave it (one line per
section: `- [3.2] (Strumenti di volo) score=...: text`), and answers each part with the
sentences of the best sections that answer it (`aircoach.llm.offline_answer`), citing every
section it used.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from aircoach.grounding import followups
from aircoach.llm import offline_answer
from aircoach.memory.extract import LABELS, FactKind, facts, without_facts
from aircoach.memory.recall import SECTION_TITLE as MEMORY_TITLE
from aircoach.text import fold

KB = "kb_search"
MAX_PARTS = 3  # the parts of one question searched on their own
# A search's longest query: what the manual's index reads of one (`kb_search` refuses more
# than 1000 characters, which a pasted question may have).
MAX_SEARCH_CHARS = 500

_RESULT = re.compile(r"^- \[(?P<ref>[^\]]+)\] \((?P<materia>[^)]*)\) score=\S*: (?P<text>.+)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-ZÀ-Ý«\"(0-9])")
# A greeting or a question about the coach: the follow-up rules know it too, so that it never
# borrows the conversation's topic (offline.py asks it here, not in grounding).
is_greeting = followups.is_greeting
_INSTRUCTIONS = re.compile(
    r"\b(?:system prompt|prompt di sistema|prompt|tue istruzioni|tuoi ordini|tue regole"
    r"|istruzioni (?:di sistema|iniziali|precedenti|interne|nascoste|del coach|che hai ricevuto)"
    r"|come sei (?:stato )?(?:programmato|configurato|istruito))\b"
)


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


# A message of nothing but thanks or an "ok": a short reply, not the introduction again.
_THANKS = frozenset({"grazie", "thanks"})
_ACKNOWLEDGED = _THANKS | {"ok", "okay", "perfetto", "capito", "chiaro", "ottimo", "bene"}
_AROUND_THANKS = frozenset(
    {"mille", "tante", "molte", "molto", "davvero", "va", "tutto", "ho", "ciao", "coach"}
    | {"aircoach", "allora", "e"}
)
# "basta così", "per oggi basta": the student is done for now (it searched "basta" in the
# manual and gave the VMC minima's "basta una visibilità di 5 km"). "ho finito" alone hands a
# mock exam in: "finito" is only said around them ("basta, ho finito").
_ENOUGH = frozenset({"basta", "stop"})
_AROUND_ENOUGH = frozenset(
    {"cosi", "per", "oggi", "ora", "adesso", "stasera", "dai", "finito", "finita", "abbiamo"}
)
# Every word of a message that only thanks, acknowledges or closes ("ok, grazie", "basta così
# per oggi"); the quiz's "basta quiz, grazie" asks nothing after it either.
CLOSING_WORDS = _ACKNOWLEDGED | _ENOUGH | _AROUND_THANKS | _AROUND_ENOUGH
NEXT_STEP = "Quando vuoi, chiedimi un altro argomento o «fammi una domanda»."


# The same in an emoji (their skin tones and joiners aside): "👍", "🙏🏻".
_THANKS_EMOJI = frozenset("🙏")
_ACKNOWLEDGED_EMOJI = _THANKS_EMOJI | frozenset("👍👌✅🆗👏💪😊🙂")


def thanks_reply(query: str) -> str | None:
    """ "grazie!", "ok, ho capito", "basta così", "👍": a short reply; None for any other
    message."""
    said = set(re.findall(r"[a-z]+", fold(query)))
    if not said:
        signs = {c for c in query if c.isalnum() or unicodedata.category(c) == "So"}
        if not signs or not signs <= _ACKNOWLEDGED_EMOJI:
            return None
        return f"{'Prego!' if signs & _THANKS_EMOJI else 'Bene!'} {NEXT_STEP}"
    if not said & (_ACKNOWLEDGED | _ENOUGH) or not said <= CLOSING_WORDS:
        return None
    if said & _THANKS:
        return f"Prego! {NEXT_STEP}"
    return f"{'Va bene!' if said & _ENOUGH else 'Bene!'} {NEXT_STEP}"


DECLINE = (
    "Non posso mostrare le mie istruzioni interne. Posso però aiutarti con la teoria del volo: "
    "chiedimi per esempio «Come si regola l'altimetro con il QNH?»."
)

# "Cosa ti ricordi di me?", "che cosa sai di me?", "ti ricordi di me?".
_ASKS_MEMORY = re.compile(
    r"\b(?:(?:che\s)?cosa\s(?:ti\s)?(?:ricordi|sai)|ti\sricordi)\s(?:su\s)?di\sme\b"
)
FORGET_HINT = "\n\nSe vuoi che lo dimentichi, scrivimi «dimentica quello che ti ho detto»."
NOTHING_REMEMBERED = (
    "Non ricordo ancora niente di te. Se mi dici per che licenza studi, quando hai l'esame o "
    "cosa trovi difficile, me lo ricordo nelle prossime conversazioni."
)


def asks_memory(query: str) -> bool:
    return bool(_ASKS_MEMORY.search(fold(query)))


def prompt_items(messages: Sequence[BaseMessage], heading: str) -> list[str] | None:
    """The items ("- " lines, without it) of the system prompt's section under `heading`;
    None when the prompt has no such section."""
    for message in messages:
        if isinstance(message, SystemMessage) and heading in message.text:
            section = message.text.split(heading, 1)[1].split("\n#", 1)[0]
            return [line[2:] for line in section.strip().splitlines() if line.startswith("- ")]
    return None


def memory_reply(messages: Sequence[BaseMessage]) -> str:
    """What the coach remembers of the student, as the system prompt shows it (its memory
    section: what they said of themselves, and the past questions that concern this one)."""
    if items := prompt_items(messages, MEMORY_TITLE):
        return "Di te ricordo:\n" + "\n".join(f"- {item}" for item in items) + FORGET_HINT
    return NOTHING_REMEMBERED


# "Quando ho l'esame?", "quanto manca al mio esame?": the real exam's date, which only the
# student's memory may hold.
_ASKS_EXAM_DATE = re.compile(
    r"\bquando\s(?:ho|e|sara|avro)\s(?:il\s|l'\s?)?(?:mio\s)?esame\b"
    r"|\bquanto\s(?:manca|tempo\s(?:manca|ho))\s(?:al|all'\s?|prima\sdel(?:l'\s?)?)\s?(?:mio\s)?esame\b"
    r"|\bdata\s(?:del\s|dell'\s?)(?:mio\s)?esame\b"
)
NO_EXAM_DATE = (
    "Non mi hai ancora detto quando hai l'esame: dimmelo (per esempio «ho l'esame a giugno») "
    "e me lo ricordo, anche nelle prossime conversazioni."
)


def exam_date_reply(messages: Sequence[BaseMessage], query: str) -> str | None:
    """For "quando ho l'esame?": what the student said of their exam, as the prompt's memory
    section shows it; None for any other message."""
    if not _ASKS_EXAM_DATE.search(fold(query)):
        return None
    prefix = f"{LABELS['exam']}: "
    items = prompt_items(messages, MEMORY_TITLE) or []
    said = [item.removeprefix(prefix) for item in items if item.startswith(prefix)]
    if not said:
        return NO_EXAM_DATE
    return f"Dell'esame mi hai detto: {said[0]}. Se è cambiato, dimmi la nuova data."


# "Ho una domanda", "posso farti una domanda?", "ti faccio una domanda sul QNH", "un'altra
# domanda: cos'è il QFE?": the student is about to ask, not asking for a quiz question.
_PREFACE = re.compile(
    r"^(?:(?:ciao|coach|scusa|senti)[\s,!]+)*"
    r"(?:(?:ho|avrei|avevo)\s|(?:posso|potrei)\s(?:farti|chiederti|porti)\s"
    r"|(?:ti\s)?(?:faccio|chiedo)\s)"
    r"(?:una|un'\s?altra|qualche|un\spaio\sdi)\s?(?:altra\s)?domand[ae]\b"
    r"|^(?:una|un'\s?altra|altra)\sdomanda\s*(?=[:,])"
)
_PREFACE_SUBJECT_CHARS = 60
ASK_AWAY = "Certo, chiedimi pure."


def rest_after(pattern: re.Pattern[str], query: str) -> str | None:
    """What `query` says after `pattern`, matched at its start on the folded text: as written,
    unless folding changed its length (a ligature); None when `pattern` does not match."""
    folded = fold(query).strip()
    found = pattern.match(folded)
    if found is None:
        return None
    text = query.strip()
    return (text if len(text) == len(folded) else folded)[found.end() :]


def preface(query: str) -> tuple[str | None, str]:
    """For a message that announces a question: (the reply, "") when it asks nothing yet
    ("posso farti una domanda?", "ho una domanda sul QNH": "Certo, dimmi pure la tua domanda
    sul QNH."), or (None, the question) when it goes on to ask it ("ho una domanda: cos'è il
    QNH?"). (None, query) for any other message."""
    rest = rest_after(_PREFACE, query)
    if rest is None:
        return None, query
    rest = rest.strip()
    said = rest.strip(" ?!.:,")
    if not said:
        return ASK_AWAY, ""
    if "?" in rest or rest[:1] in ":," or len(said) > _PREFACE_SUBJECT_CHARS:
        return None, said
    return f"Certo, dimmi pure la tua domanda {said}.", ""


# A question or a request in a message: it is answered, whatever else the message says.
_ASKS = re.compile(
    r"\?|\b(?:come|cosa|cos|che|perche|quale|quali|quanto|quanti|quando|dove|chi|spiega\w*"
    r"|dimmi|fammi|dammi|mostrami|parlami|descrivi|definisci|significa|differenza|aiutami)\b"
)


def note_reply(query: str) -> str | None:
    """A message that only says something of the student ("ho l'esame a marzo", "studio per
    il PPL"): what the coach takes note of (the memory keeps it), and what to ask next; None
    for a message with a question or a request in it, and for one that only says what the
    student finds hard ("non capisco il QNH" asks for the QNH to be explained)."""
    said = facts(query)
    if all(fact.kind == "difficulty" for fact in said) or _ASKS.search(fold(query)):
        return None
    hard = next((fact.value for fact in said if fact.kind == "difficulty"), None)
    ask = f"«fammi una domanda di {hard}»" if hard else "«fammi una domanda»"
    return (
        "Preso nota, me lo ricordo anche nelle prossime conversazioni:\n"
        + "\n".join(f"- {fact.text}" for fact in said)
        + f"\n\nQuando vuoi, chiedimi di spiegarti un argomento o {ask}."
    )


# "che capitoli ci sono?", "quali sono gli argomenti del corso?", "quanti capitoli ha il
# corso?", "l'indice del corso": the chapters (the first drew a quiz question, the others
# were searched in the manual). Not "quali capitoli devo ripassare?" (the progress), nor a
# chapter by its number ("che argomenti ci sono nel capitolo 5?": its sections).
_ASKS_CHAPTERS = re.compile(
    r"^(?:(?:ciao|scusa|senti|ok)[\s,!]+)?(?:(?:che|quali|quanti)\s(?:sono\s)?(?:i\s|gli\s|le\s)?"
    r"(?:capitoli|argomenti|materie)(?:\sci\ssono|\sha|\stratta|\scomprende|\scopre)?"
    r"|(?:mi\s)?(?:dai|dici|fai\svedere|mostri)\s(?:l.?\s?)?(?:indice|elenco\sdei\scapitoli)"
    r"|(?:l.?\s?)?indice|(?:il\s)?programma)"
    r"(?:\s(?:il|del|nel|di\squesto|dell.?|l.?)\s?(?:corso|manuale|quiz|esame|app))?\s*[?!.]*$"
)


def asks_chapters(query: str) -> bool:
    """ "che capitoli ci sono?", "quali sono gli argomenti del corso?": the course's
    chapters."""
    return bool(_ASKS_CHAPTERS.match(fold(query).strip()[:200]))


def chapters_reply(chapters: Sequence[str]) -> str:
    listed = "\n".join(chapters)
    return (
        f"Il corso ha {len(chapters)} capitoli:\n{listed}\nChiedimi un argomento di uno di "
        "questi, o «fammi una domanda del capitolo 3»."
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


PART_NOT_FOUND = "non ho trovato questa parte nel manuale del corso."
CLARIFY = (
    "Non ho capito a quale argomento ti riferisci. Mi dici il concetto che vuoi ripassare? "
    "Per esempio «QNH», «stallo» o «fattore di carico»."
)

# A new part of a question starts at "?" or ";", or at "e" followed by a question word.
_PART_END = re.compile(r"[?;]+")
_AND_ASKS = re.compile(
    r"\s+e\s+(?=(?:cos[a'’ ]|come\b|quando\b|qual[ie']?\b|perch|dove\b|quant[oaie]\b|chi\b))",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SearchPlan:
    """What the offline model searches for a question: one query per part, or, when there
    is nothing to search, the clarifying question to ask instead."""

    queries: tuple[str, ...] = ()
    clarify: str | None = None


def earlier_questions(messages: Sequence[BaseMessage]) -> list[str]:
    """The student's questions before the last message, oldest first."""
    asked = [m.text for m in messages[:-1] if isinstance(m, HumanMessage)]
    return [q for q in asked if q.strip()]


def searchable(query: str) -> str:
    """`query` as searched: its first `MAX_SEARCH_CHARS` characters, without a word cut in
    half."""
    query = query.strip()
    if len(query) <= MAX_SEARCH_CHARS:
        return query
    cut = query[:MAX_SEARCH_CHARS]
    if query[MAX_SEARCH_CHARS].isalnum():
        cut = re.sub(r"\w+$", "", cut)
    return cut.strip() or query[:MAX_SEARCH_CHARS]


def retry_query(messages: Sequence[BaseMessage], question: str) -> str:
    """What to search when a follow-up searched with its topic found nothing: the question
    as asked, or, when it has no word of its own ("fammi un esempio"), the topic alone (as
    asked, it found IMSAFE's "ad esempio")."""
    if followups.own_words(question):
        return question
    asked = [m.text for m in messages if isinstance(m, HumanMessage) and m.text.strip()]
    return " ".join(followups.topic_keywords(asked[:-1])) or question


def told(messages: Sequence[BaseMessage], question: str) -> str:
    """What the coach's answers before `question` said (the thread's window), when it is a
    follow-up, which should get what is new; "" for a question that stands alone (asked
    again, it is answered again)."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
    if not followups.is_followup(question, has_topic=last > 0):
        return ""
    return "\n".join(m.text for m in messages[:last] if isinstance(m, AIMessage))


def parts(question: str) -> list[str]:
    """The parts of a question that ask something of their own, at most MAX_PARTS; a part
    with no subject of its own ("cosa fare") stays with the part before it."""
    pieces = [
        piece.strip(" ,.:!")
        for chunk in _PART_END.split(question)
        for piece in _AND_ASKS.split(chunk)
    ]
    found: list[str] = []
    for piece in pieces:
        if not piece:
            continue
        if found and not followups.own_words(piece):
            found[-1] = f"{found[-1]} {piece}"
        else:
            found.append(piece)
    if len(found) > MAX_PARTS:
        found[MAX_PARTS - 1 :] = [" ".join(found[MAX_PARTS - 1 :])]
    return found


_PLANS: tuple[FactKind, ...] = ("goal", "exam")  # facts never what a message asks about


def _asked(question: str) -> str:
    question = question.strip()
    if any(fact.kind in _PLANS for fact in facts(question)):
        # "Ho l'esame a marzo, spiegami il QNH": the student's plans are no subject to search
        # for (they matched a law "del 25 marzo"); a difficulty often is ("non capisco il QNH").
        question = without_facts(question, _PLANS) or question
    return question


def plan_search(messages: Sequence[BaseMessage], question: str) -> SearchPlan:
    """The searches for `question`, the last message of `messages`: a bare follow-up borrows
    the topic of the questions before it; a question of several parts is searched by part."""
    question = _asked(question)
    topic = followups.topic_keywords(earlier_questions(messages))
    if followups.is_followup(question, has_topic=bool(topic)):
        alone = followups.without_connective(question)
        if followups.own_words(alone) and not followups.is_followup(alone, has_topic=True):
            return SearchPlan((alone,))  # "e il microburst?" asks about the microburst
        return SearchPlan((followups.expand_query(topic, question),))
    asked = parts(question)
    if not any(followups.own_words(part) for part in asked):
        return SearchPlan(clarify=CLARIFY)
    if len(asked) > 1:
        return SearchPlan(tuple(part_searches(question)))
    return SearchPlan((question,))


def part_searches(question: str) -> dict[str, str]:
    """What each part of a question of several parts is searched as, and the part as the
    student wrote it: itself, or, when it leaves its subject to the parts before it ("cosa
    sono i cumulonembi e perché sono pericolosi?"), their subject and its own words
    ("cumulonembi pericolosi", not the dangerous attitudes)."""
    asked = parts(_asked(question))
    searches: dict[str, str] = {}
    for index, part in enumerate(asked):
        written = query = _part_query(part)
        if index and followups.is_followup(query, has_topic=True):
            query = followups.expand_query(followups.topic_keywords(asked[:index]), query)
        searches.setdefault(query, written)
    return searches


def moved_to(messages: Sequence[BaseMessage], question: str) -> list[str]:
    """The subject a bare follow-up ("quando si usa?", no word of its own) is about when the
    question before it moved the topic ("e il QFE?" after the QNH: the QFE); none otherwise
    (the topic is the conversation's, as searched)."""
    # The student's messages, `question` the last (tool calls and results may follow it).
    asked = [m.text for m in messages if isinstance(m, HumanMessage) and m.text.strip()]
    if followups.own_words(question) or len(asked) < 3:
        return []
    last = asked[-2]
    if not followups.is_followup(last, has_topic=True):
        return []
    return [w for w in followups.own_words(last) if not followups.qualifies(w)]


def focus(question: str, searched: str) -> list[str]:
    """The words a follow-up adds to the topic it borrowed ("e il microburst?" searched as
    "wind shear microburst": `microburst`); none when the question was searched as asked, nor
    the words that only qualify the topic ("quanto vale a 60 gradi?": not `gradi`)."""
    if searched.strip() == question.strip():
        return []
    return [w for w in followups.own_words(question) if not followups.qualifies(w)]


# "una domanda su questo", "sull'argomento", "su quello che abbiamo visto": the subject the
# conversation was on.
_ABOUT_THIS = re.compile(
    r"\bsu(?:ll['’]\s?|\s)(?:questo|questa|quello|quella|cio|argomento|tema)\b"
    r"|\bsu\squest['’]\s?argomento\b"
)


def about_this(query: str) -> bool:
    return bool(_ABOUT_THIS.search(fold(query)))


def last_searched_chapter(messages: Sequence[BaseMessage]) -> int | None:
    """The chapter of the best manual section the last search of the course found."""
    for message in reversed(messages):
        if isinstance(message, ToolMessage) and message.name == KB:
            for found in offline_answer.results(message.text):
                chapter, _, _ = found.ref.partition(".")
                if chapter.isdigit():  # not an explanation ("quiz 3.12")
                    return int(chapter)
    return None


def continues_course(messages: Sequence[BaseMessage], question: str) -> bool:
    """A bare follow-up ("fammi un esempio", "perché?") right after a turn that searched the
    course: it asks for more of that topic, not for a quiz. A greeting or a question about the
    coach ("Ciao, chi sei?") has no content word either, and is no follow-up."""
    if (
        followups.own_words(question)
        or is_greeting(question)
        or asks_for_instructions(question)
        or thanks_reply(question) is not None  # "grazie, chiaro": "chiaro" asks no more
    ):
        return False
    last_calls = next(
        (
            m.tool_calls
            for m in reversed(messages[:-1])
            if isinstance(m, AIMessage) and m.tool_calls
        ),
        [],
    )
    return bool(last_calls) and all(call["name"] == KB for call in last_calls)


def _part_query(part: str) -> str:
    """A part as it is searched: a leading "e"/"ma" dropped ("e il microburst" asks about the
    microburst, not about the part before it)."""
    return re.sub(r"^(?:e|ed|ma|invece|anche)\s+", "", part, flags=re.IGNORECASE)

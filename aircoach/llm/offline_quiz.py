"""What the offline model knows about the quiz: the question still waiting for an answer in a
conversation, whether a message answers it, and a quiz request's arguments.

It reads the conversation as a model would, from the messages' text: the questions of the
last `domanda_teoria` result (`Capitolo N, domanda M: ...` and the `x) ...` options) and the
gradings of `verifica_risposta` after it (`... (capitolo N, domanda M)`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from aircoach.llm.offline_course import CLOSING_WORDS, prompt_items, rest_after
from aircoach.llm.offline_exam import (
    NO_MISTAKES,
    OUTCOME_ASKED,
    SAY_AGAIN,
    asks_mistakes,
    names_question,
    question_number,
)
from aircoach.quiz.answers import (
    NOT_KNOWN,
    dont_know,
    only_numbered_answers,
    read_letter,
    read_numbered_answers,
    read_option,
)
from aircoach.text import fold, stem, words

ASK = "domanda_teoria"
GRADE = "verifica_risposta"
MAX_ANSWER_CHARS = 200  # a longer message is a question or a remark, not an answer
_SAID_NOT_KNOWN = "non lo so"  # a "don't know" as `verifica_risposta` reads it

_QUESTION = re.compile(r"^Capitolo (\d+), domanda (\d+):", re.MULTILINE)
_OPTION = re.compile(r"^([a-z])\) (.+)$", re.MULTILINE)
_GRADED = re.compile(r"\(capitolo (\d+), domanda (\d+)\)")
_NUMBER_WORDS = {"una": 1, "un": 1, "due": 2, "tre": 3, "quattro": 4, "cinque": 5}
# The chapters' numbers as a student may write them: "capitolo tre", "capitoli 2 e sei".
_CHAPTER_NUMBERS = {
    **{"uno": 1, "due": 2, "tre": 3, "quattro": 4, "cinque": 5},
    **{"sei": 6, "sette": 7, "otto": 8, "nove": 9, "dieci": 10},
}
_CHAPTER_NUMBER = rf"(?:\d+|{'|'.join(_CHAPTER_NUMBERS)})\b"
_CHAPTERS = re.compile(rf"\bcapitol[io]\s+((?:{_CHAPTER_NUMBER}(?:\s*(?:,|\be\b|\bed\b)\s*)?)+)")
_HOW_MANY = re.compile(
    r"\b(\d+|una|un|due|tre|quattro|cinque)\s+(?:altre\s+|nuove\s+)?(?:domande|domanda|quiz|esercizi)"
)
_NUMBERED = re.compile(r"\bdomanda\s+(?:n\.?\s*|numero\s+)?(\d+)\b")
_REVIEW = re.compile(r"ripass|punti deboli|miei errori|ho sbagliato|sbagliat")


@dataclass(frozen=True)
class PendingQuestion:
    capitolo: int
    numero: int
    options: dict[str, str] = field(default_factory=dict)
    # As the student saw it: "Capitolo 6, domanda 32: ..." and its options; never the key the
    # result adds for the model after them.
    text: str = ""


def _questions(text: str) -> list[PendingQuestion]:
    starts = list(_QUESTION.finditer(text))
    found = []
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        block = text[match.start() : end]
        options = {m.group(1): m.group(2).strip() for m in _OPTION.finditer(block)}
        shown = "\n".join([block.split("\n", 1)[0], *(f"{k}) {v}" for k, v in options.items())])
        found.append(PendingQuestion(int(match.group(1)), int(match.group(2)), options, shown))
    return found


def waiting_by_number(messages: Sequence[BaseMessage]) -> dict[int, PendingQuestion]:
    """The questions of the last quiz result that no grading has answered since, by their
    place in that result (1 for the first asked), which a graded one leaves empty."""
    graded: set[tuple[int, int]] = set()
    for message in reversed(messages):
        if not isinstance(message, ToolMessage) or message.status == "error":
            continue
        if message.name == GRADE:
            graded |= {(int(c), int(n)) for c, n in _GRADED.findall(message.text)}
        elif message.name == ASK and (asked := _questions(message.text)):
            return {
                place: q for place, q in enumerate(asked, 1) if (q.capitolo, q.numero) not in graded
            }
    return {}


# "ripetimi la domanda", "puoi ripetere?", "qual era la domanda?", "non ho capito la
# domanda": the questions waiting, again (each was searched in the manual: ROGER's "una
# domanda che chiede sì o no", or drew a new question).
_REPEAT = re.compile(
    r"^(?:(?:ok|scusa|senti)[\s,!]+)?(?:(?:puoi|potresti|mi)\s)?(?:me\s|mi\s)?(?:la\s|le\s)?"
    rf"{SAY_AGAIN}(?:\s(?:la|le)\sdomand[ae])?"
    r"|^(?:qual|cos|com)\s?(?:era|e)\s(?:la\s)?domanda"
    r"|^non\s(?:ho\s)?capi(?:to|sco)\s(?:bene\s)?(?:la\s)?domanda"
)
_REPEAT_END = re.compile(r"\s*(?:per favore|grazie)?\s*[?!.]*$")


def repeat_reply(messages: Sequence[BaseMessage], query: str) -> str | None:
    """The questions waiting for an answer, again, when `query` asks for them ("ripetimi la
    domanda"); None for any other message, or when none waits."""
    text = fold(query).strip()[:MAX_ANSWER_CHARS]
    asked = _REPEAT.match(text)
    if asked is None or not _REPEAT_END.fullmatch(text[asked.end() :]):
        return None
    waiting = pending_questions(messages)
    if not waiting:
        return None
    said = "Te la ripeto:" if len(waiting) == 1 else "Te le ripeto:"
    return said + "\n\n" + "\n\n".join(q.text for q in waiting)


# "mi dai un suggerimento?", "un aiutino?", "un indizio": a hint on the question waiting (each
# was searched in the manual as asked: the oil's "lubrifica", AVGAS's "il colore aiuta").
_HINT = re.compile(
    r"^(?:(?:ok|scusa|senti|non so|non lo so)[\s,!]+)?"
    r"(?:(?:mi\s)?(?:dai|daresti|puoi\sdarmi|potresti\sdarmi|dammi)\s)?(?:un\s|qualche\s)?"
    r"(?:suggeriment[oi]|aiut(?:o|ino)|indizi[oi]|hint)(?:\s(?:piccol[oi]|per favore))?"
    r"\s*[?!.]*$"
)
_QUESTION_TEXT = re.compile(r"^Capitolo \d+, domanda \d+: (.+)$", re.MULTILINE)


def hint_search(messages: Sequence[BaseMessage], query: str) -> str | None:
    """What to search the manual for, for a hint on the question waiting: its text (not its
    options, which would find the wrong ones' sections too); None when `query` asks for no
    hint, or no question waits."""
    if not _HINT.match(fold(query).strip()[:MAX_ANSWER_CHARS]):
        return None
    waiting = pending_question(messages)
    asked = _QUESTION_TEXT.search(waiting.text) if waiting is not None else None
    return asked.group(1) if asked else None


def asks_hint(messages: Sequence[BaseMessage]) -> bool:
    """Whether the student's last message asked for a hint on the question waiting."""
    asked = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
    return hint_search(messages, asked) is not None


def hint_reply(found: Sequence[tuple[str, str]]) -> str:
    """A hint from the manual search for the question waiting (`asks_hint`): where the manual
    teaches it (`found`: its sections as `(riferimento, materia)`, best first; the search's
    result shows their text, as an open book would)."""
    sections = [(ref, materia) for ref, materia in found if not ref.startswith("quiz ")]
    if not sections:
        return (
            "Non ho un suggerimento per questa domanda: prova a rispondere con la lettera, o "
            "scrivi «non lo so» e te la spiego."
        )
    ref, materia = sections[0]
    return (
        f"Un aiuto: ne parla il manuale al § {ref} ({materia}). Rileggilo, poi rispondi con "
        "la lettera (o «non lo so»)."
    )


def pending_questions(messages: Sequence[BaseMessage]) -> list[PendingQuestion]:
    """The questions of the last quiz result that no grading has answered since, in order."""
    return list(waiting_by_number(messages).values())


def pending_question(messages: Sequence[BaseMessage]) -> PendingQuestion | None:
    """The first question of the last quiz result that no grading has answered since."""
    waiting = pending_questions(messages)
    return waiting[0] if waiting else None


def numbered_answers(query: str, waiting: Mapping[int, PendingQuestion]) -> list[dict[str, Any]]:
    """ "1a 2b 3c", "1 b 2 non lo so", "1 e 3: a", a lone "2b" to the questions still waiting
    (`waiting_by_number`: numbered in the order they were asked): one grading call each, a
    "don't know" graded as not known; [] when the message is not that, or names a question
    that does not wait."""
    text = fold(query)
    if len(text) > MAX_ANSWER_CHARS or not waiting:
        return []
    found = read_numbered_answers(text)  # as the mock exam reads them ("la 2 è b")
    # A lone number and letter in a longer message may be something else ("capitolo 3 a
    # caso"); alone ("2b", "la 2 è b"), or a lone "2 non lo so", it cannot.
    if not found or (
        len(found) == 1 and NOT_KNOWN not in found.values() and not only_numbered_answers(text)
    ):
        return []
    if any(n not in waiting for n in found):
        return []
    return [
        {
            "capitolo": waiting[n].capitolo,
            "numero": waiting[n].numero,
            "risposta": _SAID_NOT_KNOWN if x == NOT_KNOWN else x,
        }
        for n, x in sorted(found.items())
    ]


_TENTATIVE_MAX_CHARS = 40
_ASKS_ABOUT = re.compile(r"^(?:e|ma|perche|cosa|che)\b")
# "c o d?", "tra la b e la c": two options, one answer wanted
_TWO_LETTERS = re.compile(
    r"^(?:(?:sono\s)?(?:indecis[oa]\s)?(?:tra|fra)\s)?(?:la\s)?([a-d])"
    r"(?:\s*,|\so|\soppure|\se)\s(?:la\s)?([a-d])\s*[?!.]*$"
)


def two_options_reply(messages: Sequence[BaseMessage], query: str) -> str | None:
    """What to say to "c o d?" while a question waits: one answer, please; None otherwise."""
    said = _TWO_LETTERS.match(fold(query).strip()[:MAX_ANSWER_CHARS])
    if said is None or said.group(1) == said.group(2) or pending_question(messages) is None:
        return None
    first, second = said.groups()
    return (
        f"Una risposta sola: la {first} o la {second}? Scrivi la lettera che scegli (o «non lo "
        "so»)."
    )


def option_asked_reply(messages: Sequence[BaseMessage], query: str) -> str | None:
    """What to say to "e la c?", "cosa significa la d?", "la b cosa vuol dire?" while a
    question waits (each was searched in the manual with the conversation's subject): an
    option is explained after the student has answered, not before; None otherwise."""
    text = fold(query).strip()
    if len(text) > _EXPLAIN_MAX_CHARS or "?" not in text:
        return None
    said = _OPTION_NAMED.search(text)
    question = pending_question(messages)
    if said is None or question is None or said.group(1) not in question.options:
        return None
    return (
        "Prima rispondi tu: quale scegli? Scrivi la lettera (o «non lo so»); dopo la "
        f"correzione chiedimi «e la {said.group(1)}?» e ti spiego anche quella."
    )


def answers(query: str, question: PendingQuestion) -> bool:
    """Whether the message reads as an answer to the question: a letter ("c", "la b",
    "risposta: a"), or the text of one of its options; a question ("?") only when a short
    letter answer ("forse la c?"), never a request for another question or a chapter
    ("un'altra sul capitolo 8" is no answer "8")."""
    text = query.strip()
    if not text or len(text) > MAX_ANSWER_CHARS:
        return False
    if "?" in text:  # "forse la c?", "la c è giusta?": an answer, unsure; "e la c?" asks
        folded = fold(text)
        tentative = len(folded) <= _TENTATIVE_MAX_CHARS and not _ASKS_ABOUT.match(folded)
        return tentative and read_letter(text) in question.options
    if wants_another(text) or _CHAPTERS.search(fold(text)):
        return False
    if dont_know(text):  # "non lo so", "salta": graded as not known
        return True
    return read_letter(text) is not None or read_option(text, question.options) is not None


def grade_call(query: str, question: PendingQuestion) -> dict[str, Any]:
    return {"capitolo": question.capitolo, "numero": question.numero, "risposta": query.strip()}


def wants_review(query: str) -> bool:
    """ "Fammi ripassare i miei punti deboli", "ripassiamo gli errori"."""
    return bool(_REVIEW.search(fold(query)))


def quiz_arguments(query: str, base: dict[str, Any], chapters: Mapping[int, str]) -> dict[str, Any]:
    """`base` (what the schema-driven reader found: capitolo, numero, testo...) plus what it
    cannot read: several chapters, a chapter named by its subject (`chapters`: the course's
    titles by number), how many questions, and the review mode; never the exam mode."""
    folded = fold(query)
    args = dict(base)
    if args.get("modo") == "esame":
        # The schema's reader takes "esame" anywhere ("una domanda come all'esame") for the
        # mode; a mock exam is asked for in words that `offline_exam.wants_exam` reads first.
        del args["modo"]
    if named := _CHAPTERS.search(folded):
        numbers = [
            int(n) if n.isdigit() else _CHAPTER_NUMBERS[n]
            for n in re.findall(_CHAPTER_NUMBER, named.group(1))
        ]
        if len(numbers) > 1:
            args.pop("capitolo", None)
            args["capitoli"] = list(dict.fromkeys(numbers))
        elif numbers:
            args["capitolo"] = numbers[0]
            if "numero" not in args and (numbered := _NUMBERED.search(folded)):
                args["numero"] = int(numbered.group(1))  # "la domanda 4 del capitolo 7"
        # "sul capitolo 3": the words that name the chapter are no text to search for.
        if "testo" in args:
            rest = [w for w in words(args.pop("testo")) if not _CHAPTER_WORD.fullmatch(w)]
            if rest:
                args["testo"] = " ".join(rest)
    elif subject := _subject_chapter(folded, args.get("testo"), chapters):
        args["capitolo"] = subject
        args.pop("testo", None)
    if how_many := _HOW_MANY.search(folded):
        word = how_many.group(1)
        count = int(word) if word.isdigit() else _NUMBER_WORDS[word]
        if count > 1:
            args["quante"] = count
    if wants_review(query):
        args["modo"] = "ripasso"
        args.pop("testo", None)
    if level := _LEVEL.search(folded):  # "una domanda difficile"
        args["campo"], args["valore"] = "difficolta", level.group(1)
        args.pop("testo", None)
    return args


# The words that name chapters, and a chapter's number ("capitolo 3", "capitoli 2 e 5").
_CHAPTER_WORD = re.compile(rf"capitol[io]|{_CHAPTER_NUMBER}")
# A word of a chapter's title this long names the chapter ("meteorologia", "motore"); shorter
# ones ("volo", "aria") name too much else.
_SUBJECT_LETTERS = 5


def _subject_chapter(folded: str, testo: str | None, chapters: Mapping[int, str]) -> int | None:
    """The chapter a quiz request names by its subject ("una domanda di meteorologia", "sul
    motore"): the only one whose title has a word of the request, when the text to search
    for (if any) is nothing but words of that title ("sul fattore di carico" is a search,
    though "fattore" is in "Fattore umano e sicurezza")."""
    asked = [w for w in words(folded) if len(w) >= _SUBJECT_LETTERS]
    named = [
        number
        for number, title in chapters.items()
        if any(_names(w, [t for t in words(title) if len(t) >= _SUBJECT_LETTERS]) for w in asked)
    ]
    if len(named) != 1:
        return None
    (number,) = named
    if testo is not None and not all(_names(w, words(chapters[number])) for w in words(testo)):
        return None
    return number


def _names(word: str, title: Sequence[str]) -> bool:
    """Whether a request's word says a word of a chapter's title: the same stem, or the start
    of a longer word ("meteo", "meteorologia")."""
    return stem(word) in {stem(t) for t in title} or (
        len(word) >= _SUBJECT_LETTERS and any(fold(t).startswith(word) for t in title)
    )


_LEVEL = re.compile(r"\b(facile|media|difficile)\b")
# After an acknowledgement too: "ok, un'altra", "va bene, dammi un'altra".
_ACK = r"(?:(?:ok|okay|va bene|bene|perfetto|grazie|capito|ho capito|si|dai|giusto)[\s,.!]{1,3})"
_ANOTHER = re.compile(
    _ACK + r"{0,2}(?:dammi |fammi |dammene |fammene |ancora )?"
    r"(?:(?:un.?altra|ancora una)\b|altra domanda\b(?!\s*[:,]))"
)
_HOW_AM_I = re.compile(
    r"come (?:sto andando|vado|procedo)|su cosa (?:devo|dovrei) (?:esercitarmi|ripassare|lavorare)"
    r"|i miei progressi|a che punto sono|(?:quali|che) sono i miei punti deboli"
    # "quante ne ho sbagliate?", "quante risposte giuste ho dato?": a count, not a review
    r"|quant[ei]\s(?:ne\s|risposte\s|domande\s)?(?:ho\s)?(?:sbagliat|giust|corrett|indovinat)"
    # "qual è il mio capitolo più debole?", "quanto sono pronto per l'esame?"
    r"|capitol[oi]\s(?:\w+\s)?piu\sdebol|(?:quanto|se)\s(?:sono|saro)\spront"
    # "cosa devo studiare oggi?", "da dove comincio?", "mi fai un piano di studio?"
    r"|cosa\s(?:devo|dovrei)\s(?:studiare|ripassare)(?:\s(?:oggi|adesso|ora|domani))?\W*$"
    r"|da\sdove\s(?:comincio|inizio|parto)\W*$|piano\sdi\sstudio"
    # "quali capitoli devo ripassare?": which ones, not a question to practise on
    r"|(?:quali|quale|che)\s(?:capitol[oi]|argoment[oi]|materi[ae])\s(?:devo|dovrei)\s"
    r"(?:ripassare|studiare|rivedere)"
    # "in cosa vado male?", "quante domande ho fatto?", "come sono messo?" (each was searched
    # in the manual, which found nothing)
    r"|(?:cosa|dove|quali\sargomenti|quali\scapitoli)\s(?:vado|sono|sto\sandando)\s"
    r"(?:male|debole|peggio|meglio|bene)\b"
    r"|quant[ei]\s(?:domande|risposte|quiz)\s(?:ho\s)?(?:fatt|dat|risposto|svolt)"
    r"|come\s(?:sono|sto)\smess[oa]\b"
)
PROGRESS_HEADING = "# Progressi dell'allievo"


# What "un'altra sullo stesso argomento" searches for: the last question's subject, not text.
_SAME_SUBJECT = re.compile(r"\b(?:stess[oaie]|quest[oaie]|quell[oaie]|argomento|tema)\b")


def names_subject(testo: str | None) -> bool:
    """Whether the text a request for another question searches ("un'altra sul vento":
    `vento`) names a subject of its own, not the last question's ("sullo stesso argomento")."""
    return bool(testo) and not _SAME_SUBJECT.search(fold(testo or ""))


# "una domanda sul vento", "mi fai una domanda di navigazione?", "due domande a caso",
# "domanda a caso", "interrogami sulla meteo", "testami sul QNH": a request for quiz questions
# in words the tool's examples do not share. Not "ho una domanda sul QNH" nor "posso farti
# una domanda?" (the student asks), nor "una domanda: cos'è il QNH?".
_ASKS_QUESTION = re.compile(
    _ACK + r"{0,2}(?:(?:mi\s)?(?:fai|faresti|dai|daresti|fammi|dammi|voglio|vorrei)\s"
    r"|(?:puoi|potresti)\s(?:farmi|darmi)\s)?"
    r"(?:(?:una|qualche|un\s(?:paio\sdi\s)?|\d{1,2}|due|tre|quattro|cinque|dieci)\s?"
    r"(?:altr[ae]\s)?(?:domand[ae]|quiz)\b(?!\s*[:,])"
    r"|domand[ae]\s(?:a\scaso|random|casual[ei])\b)"
    r"|(?:interrogami|testami|mettimi\salla\sprova)\b"
    # "domanda sulla radio", "domande di meteo" (the first was searched in the manual)
    r"|(?:domand[ae]|quiz)\s(?:su|sul|sull\w*|sui|sugli|sulle|di|del|dell\w*|dei|degli|delle)\s"
)


# "basta quiz", "niente più domande, cos'è il QFE?": the student leaves the quiz, and what
# follows is asked as any question (the word "quiz" drew a question).
_STOP = re.compile(
    _ACK + r"{0,2}(?:basta|stop|niente(?:\spiu)?|smettiamo|finiamo|smettila)\s"
    r"(?:(?:con|di\sfare)\s(?:i\s|le\s|gli\s)?)?(?:quiz|domand[ae]|esercizi)\b"
)
STOPPED = (
    "Va bene, niente più domande per ora. Chiedimi pure un argomento del corso, o «fammi una "
    "domanda» quando vuoi riprendere."
)


def stops_quiz(query: str) -> tuple[str | None, str]:
    """For a message that ends the quiz: (the reply, "") when it says nothing else ("basta
    quiz"), (None, the rest) when it goes on to ask ("basta quiz, cos'è il QFE?"). (None,
    query) for any other message."""
    rest = rest_after(_STOP, query)
    if rest is None:
        return None, query
    rest = rest.strip(" ,.;:!-")
    # "basta quiz per oggi, grazie" asks nothing after it
    return (None, rest) if set(words(rest)) - CLOSING_WORDS else (STOPPED, "")


def asks_for_question(query: str) -> bool:
    """A message that asks for quiz questions ("una domanda sul vento", "interrogami")."""
    return bool(_ASKS_QUESTION.match(fold(query).strip()))


def wants_another(query: str) -> bool:
    """ "un'altra", "un'altra del capitolo 7", "ancora una", "ok, un'altra": another
    question."""
    return bool(_ANOTHER.match(fold(query).strip()))


def last_chapter(messages: Sequence[BaseMessage]) -> int | None:
    """The chapter of the last question asked in the conversation."""
    for message in reversed(messages):
        if isinstance(message, ToolMessage) and message.name == ASK:
            asked = _questions(message.text)
            if asked:
                return asked[-1].capitolo
    return None


def asks_progress(query: str) -> bool:
    return bool(_HOW_AM_I.search(fold(query)))


def progress_reply(messages: Sequence[BaseMessage]) -> str:
    """The student's progress as the system prompt shows it (its "Progressi" section)."""
    items = prompt_items(messages, PROGRESS_HEADING)
    if items is not None:
        lines = [item.split(". Proponi", 1)[0] for item in items]
        return "I tuoi progressi nei quiz:\n" + "\n".join(f"- {line}" for line in lines)
    return (
        "Non hai ancora risposto a domande di quiz: chiedimi «fammi una domanda» o "
        "«simulazione d'esame» per cominciare."
    )


_EXPLAIN = re.compile(
    r"^(?:ma\s+)?(?:perche\b|come mai\b|spiegamel\w*|spiegami\w*|spiega\w*|non ho capito\b"
    # "ma la c non va bene?", "la c non è giusta?", "non era la c?": the option the student
    # gave, or another, disputed (each was searched in the manual: ROGER's "non va mai")
    r"|(?:la\s)?[a-d]\snon\s(?:va\sbene|e\s(?:giusta|corretta|esatta))\b"
    r"|non\s(?:era|e)\s(?:la\s)?[a-d]\s*\??$"
    # "ho sbagliato?", "era giusta?", "quindi era la d?": how it went (the first asked the same
    # question again, as a review; the last was searched in the manual)
    rf"|{OUTCOME_ASKED}"
    # "cosa significa?", "in che senso?" (each was searched with the conversation's subject)
    r"|(?:cosa|che)\s(?:significa|vuol\sdire)\s*\??$|in\sche\ssenso\s*\??$)"
    # "e la b?", "e la d cosa vuol dire?", "la a perché no?": another option of the question
    # (each was searched in the manual: "e la b cosa fa?" found the clouds' § 10.14)
    # ("la b" alone is an answer given again, not a question: it stays one)
    r"|(?:(?:e|ma)\s(?:invece\s)?la\s[a-d]|la\s[a-d](?=\s*\?|\s(?:cosa|che|perche|come mai)\b))"
    r"(?:\s(?:invece|allora))?(?:\s(?:cosa|che|perche|come mai)\b[^?]*)?\s*\??$"
)
# The option a question about the grading names: "ma la b non va bene?", "e la d?", "quindi
# era la c?", "perché non la a?" (not "la prima", a question's place).
_OPTION_NAMED = re.compile(
    r"\bla\s([a-d])(?=\s*(?:$|[?!.,]|\s(?:non|cosa|che|perche|come|invece|allora|va|era|e)\b))"
)
_EXPLAIN_MAX_CHARS = 80
_GRADING_LINE = re.compile(
    r"^(Risposta dell'allievo|Risposta corretta|Spiegazione|Fonte): (.+)$", re.MULTILINE
)


def asks_why(query: str) -> bool:
    """ "perché?", "perché è sbagliata?", "spiegamelo meglio": a short request for the
    explanation of what was just graded."""
    text = fold(query).strip()
    return len(text) <= _EXPLAIN_MAX_CHARS and bool(_EXPLAIN.match(text))


_PAST_MISTAKES = "Per rivedere gli errori dei quiz passati chiedimi «ripassiamo i miei errori»."


def nothing_graded(messages: Sequence[BaseMessage]) -> str:
    """What to say to "ho sbagliato?" when no answer was graded right before."""
    if pending_questions(messages):
        return (
            "Non hai ancora risposto alla domanda: scrivi la lettera di un'opzione (o «non lo "
            f"so») e ti dico subito se è giusta. {_PAST_MISTAKES}"
        )
    return (
        "Non ho appena corretto una tua risposta: chiedimi «fammi una domanda» e rispondi con "
        f"la lettera di un'opzione. {_PAST_MISTAKES}"
    )


def _recent_gradings(messages: Sequence[BaseMessage], *, named: bool) -> list[str]:
    """The quiz answers graded right before the student's message (only the coach's reply in
    between), in the order the student numbered them; `named` (the message names a question
    or an option): questions about them may come in between ("spiegami la 2" after "quali ho
    sbagliato?", before "e la 3?"; "e la d?" after "e la b?")."""
    found: dict[str, str] = {}  # tool call id -> its grading
    gradings: list[str] = []
    for message in reversed(messages[:-1]):
        if isinstance(message, ToolMessage) and message.name == GRADE:
            if message.text.startswith("Esito: risposta"):
                found[message.tool_call_id] = message.text
        elif isinstance(message, AIMessage):
            if found and not gradings:  # the calls, in the order the student numbered them
                order = [call["id"] for call in message.tool_calls]
                gradings = [found[i] for i in order if i in found]
        elif isinstance(message, HumanMessage):
            text = message.text
            about = asks_why(text) or asks_mistakes(text) or names_question(text)
            if gradings or not named or not about:
                break  # the message they answered, or anything but "spiegami la 2" before
        else:
            break
    return gradings


# The study page's "Perché?" under a graded question: "Spiegami perché: <question> <right
# option>" (a letter alone would read as an answer).
_WHY_OF_QUESTION = re.compile(r"^spiegami perche\s*:\s*(.+)$", re.DOTALL)


def why_of_graded_question(messages: Sequence[BaseMessage], query: str) -> str | None:
    """The explanation of the answer just graded when `query` asks why, naming its right
    option ("Spiegami perché: Se la presa statica si ostruisce... <option>"); None for any
    other question. The manual's search answered it from the question's words, and gave the
    Pitot tube's blockage for the static port's."""
    asked = _WHY_OF_QUESTION.match(fold(query).strip())
    gradings = _recent_gradings(messages, named=False) if asked else []
    if not asked or not gradings:
        return None
    key = dict(_GRADING_LINE.findall(gradings[-1])).get("Risposta corretta", "")
    right = fold(key.partition(") ")[2]).strip(" .")
    return explanation(gradings[-1]) if right and right in asked.group(1) else None


def explain_reply(messages: Sequence[BaseMessage], query: str) -> str | None:
    """The explanation `query` asks for, of the answers graded right before it: the one it
    numbers as the student numbered them ("spiegami la 3" after "1a 2b 3c", also after
    another one was explained), else the last; which numbers there are, for a number that is
    none of several; None when no grading is that recent. An option it names ("e la b?") is
    what the explanation is about."""
    number = question_number(query)
    said = _OPTION_NAMED.search(fold(query))
    option = said.group(1) if said else None
    # "e la d?" after "e la b?": questions about the same gradings may come in between
    gradings = _recent_gradings(messages, named=number is not None or option is not None)
    if not gradings:
        return None
    if number is None and option is not None and len(gradings) > 1:
        number = _explained_last(messages)  # "e la c?" after "spiegami la 2": of the 2
        if number is None:
            return (
                f"Di quale domanda? Ho corretto {len(gradings)} risposte: scrivi prima "
                f"«spiegami» e il suo numero (per esempio «spiegami la 1»), poi «e la {option}?»."
            )
    if number is None or len(gradings) == 1:
        return explanation(gradings[-1], option, messages)
    if 1 <= number <= len(gradings):
        return explanation(gradings[number - 1], option, messages)
    named = ", ".join(f"«la {n}»" for n in range(1, len(gradings) + 1))
    return f"Ho corretto {len(gradings)} risposte: scrivi «spiegami» e {named}."


def _explained_last(messages: Sequence[BaseMessage]) -> int | None:
    """The number of the graded question the student asked about last, since the gradings
    ("spiegami la 2"), if any."""
    for message in reversed(messages[:-1]):
        if isinstance(message, ToolMessage):
            return None
        if isinstance(message, HumanMessage) and (number := question_number(message.text)):
            return number
    return None


_OUTCOME = re.compile(r"^Esito: risposta (\w+(?: \w+)?) \((capitolo \d+, domanda \d+)\)")


def mistakes_reply(messages: Sequence[BaseMessage], query: str) -> str | None:
    """ "quali ho sbagliato?" right after quiz answers were graded: the wrong ones, numbered
    as the student numbered them, with the right option; None for another message or when no
    grading is that recent."""
    if not asks_mistakes(query):
        return None
    gradings = _recent_gradings(messages, named=True)
    if not gradings:
        return None
    wrong: list[tuple[int, str]] = []
    for n, grading in enumerate(gradings, 1):
        outcome = _OUTCOME.match(grading)
        if outcome is None or outcome.group(1) == "CORRETTA":
            continue
        key = dict(_GRADING_LINE.findall(grading)).get("Risposta corretta", "").strip()
        wrong.append((n, f"{n}. ({outcome.group(2)}) corretta {key}"))
    if not wrong:
        return NO_MISTAKES
    listed = "\n".join(line for _, line in wrong)
    return (
        f"Le risposte sbagliate ({len(wrong)} su {len(gradings)}):\n{listed}\n"
        f"Scrivi «spiegami la {wrong[0][0]}» per la spiegazione."
    )


def explanation(
    grading: str, option: str | None = None, messages: Sequence[BaseMessage] = ()
) -> str:
    """The explanation of a grading, from its key, explanation and manual section; about
    `option` when the student named one ("e la b?"), whose text the question in `messages`
    gives."""
    lines = dict(_GRADING_LINE.findall(grading))
    key = lines.get("Risposta corretta", "").strip()
    text = f"La risposta corretta è {key}. "
    if option is not None and (shown := _option_shown(grading, option, messages)):
        if key.startswith(f"{option})"):
            text = f"Sì, la {key} è la risposta corretta. "
        else:
            yours = lines.get("Risposta dell'allievo", "").startswith(f"{option})")
            text = (
                f"La {shown}{', la tua risposta,' if yours else ''} non è corretta: "
                f"la risposta corretta è {key}. "
            )
    text += lines.get("Spiegazione", "").strip()
    if source := lines.get("Fonte"):
        text += f" (Fonte: {source.strip()} del manuale del corso)"
    return text


def _option_shown(grading: str, option: str, messages: Sequence[BaseMessage]) -> str | None:
    """`option` of the graded question as the student saw it ("b) si dimezza"), from the
    question asked earlier in `messages`; None when that question is not there or has no
    such option."""
    graded = _GRADED.search(grading)
    if graded is None:
        return None
    asked = (int(graded.group(1)), int(graded.group(2)))
    for message in reversed(messages):
        if isinstance(message, ToolMessage) and message.name == ASK:
            for question in _questions(message.text):
                if (question.capitolo, question.numero) == asked:
                    said = question.options.get(option)
                    return f"{option}) {said}" if said else None
    return None


_FAILED = re.compile(r"^\[Tool \w+ failed: (.*)\]$", re.DOTALL)
# The grader's refusals are written for the student, in Italian (`quiz.service.InvalidAnswer`,
# `QuestionNotFound`); the tools' other failures are for a model, in English.
_REFUSAL = re.compile(r"non è un'opzione|non riconosciuta|non trovata")


# The quiz tools' refusals of a request (`quiz.tools._validate`), in English for the model,
# and what the student may ask instead.
_WHAT_TO_ASK: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^capitol[oi] must be between 1 and (?P<top>\d+), got (?P<got>-?\d+)$"),
        "Il capitolo {got} non c'è: scegli un capitolo da 1 a {top}.",
    ),
    (
        re.compile(r"^capitoli: at most (?P<top>\d+) chapters"),
        "Posso proporti domande di {top} capitoli al massimo alla volta: scegline meno.",
    ),
    (
        re.compile(r"^quante must be between 1 and (?P<top>\d+)"),
        "Chiedimi da 1 a {top} domande alla volta.",
    ),
    (
        re.compile(r"^numero must be 1 or more"),
        "Le domande di ogni capitolo sono numerate da 1: scegli un numero da 1 in su.",
    ),
    (
        re.compile(r"^testo must be at least (?P<least>\d+) characters"),
        "Scrivi almeno {least} lettere dell'argomento da cercare.",
    ),
)


def result_reply(result: ToolMessage) -> str | None:
    """A quiz tool's result as the coach tells it to the student, without the tool's name: a
    grading as it is, a refused answer with the reason and the valid options, a refused
    request with what to ask instead; None for another tool's result, or a failure not
    written for the student."""
    if result.name not in (ASK, GRADE):
        return None
    if result.status != "error":
        return result.text
    failed = _FAILED.match(result.text)
    reason = failed.group(1).strip().rstrip(".") if failed else ""
    if result.name == GRADE and _REFUSAL.search(reason):
        return (
            f"Non ho registrato la risposta: {reason}. Rispondi con la lettera di un'opzione "
            "o con il suo testo."
        )
    for refusal, what_to_ask in _WHAT_TO_ASK:
        if said := refusal.match(reason):
            return what_to_ask.format(**said.groupdict())
    return None


_OPTION_LETTERS = frozenset("abcd")  # the bank's options


def no_question_waiting(messages: Sequence[BaseMessage], query: str) -> str | None:
    """What to say to a letter ("c", "la b") when no question waits for an answer: the
    grading of the last one stands (a double tap is graded once), or there is none to answer
    yet; None when the message is not a letter answer."""
    text = query.strip()
    if not text or "?" in text or len(text) > MAX_ANSWER_CHARS:
        return None
    if read_letter(text) not in _OPTION_LETTERS:  # "e quindi", "è giusto": words, not options
        return None
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            continue
        graded = _GRADED.search(message.text) if message.status != "error" else None
        if message.name == GRADE and graded:
            verdict = "giusta" if "risposta CORRETTA" in message.text else "sbagliata"
            return (
                f"Ho già registrato la tua risposta alla domanda {graded.group(2)} del "
                f"capitolo {graded.group(1)} ({verdict}): non la conto due volte. Per "
                "continuare chiedimi «un'altra»."
            )
        break  # only the conversation's last tool result tells
    return (
        "Non c'è una domanda in attesa di risposta: chiedimi «fammi una domanda» e poi "
        "rispondi con la lettera di un'opzione."
    )

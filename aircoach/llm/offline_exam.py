"""What the offline model knows about the chat's mock exam: a request to start one
(`domanda_teoria` with `modo="esame"`), the exam still open in the conversation (from that
result's first line) with the answers the student gave since ("1a 2b 3c", "4 non lo so", in
one message or several), and when to submit them (`verifica_risposta` with `esame`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from aircoach.quiz.answers import NOT_KNOWN, ORDINALS, read_numbered_answers
from aircoach.quiz.exam_models import PAST_EXAMS_HEADER
from aircoach.text import fold

ASK = "domanda_teoria"
GRADE = "verifica_risposta"
GRADED_HEADER = "Esito della simulazione"
MAX_MESSAGE_CHARS = 2000

_WANTS = re.compile(r"simulazion|esame di prova|esame simulato|prova d.esame")
# Everyday requests for a mock exam. The real exam is "l'esame" ("ho l'esame a marzo", "cosa
# serve per l'esame?"); a mock one is "un esame", asked for ("fammi un esame", "mi fai un
# esame?") or given a size or chapters ("un esame di 20 domande", "esame completo"). "devo
# fare un esame" is a fact, so a bare "fare" does not ask. Bounded repeats: linear in the text.
_AN_EXAM = r"\bun\s{1,3}(?:altro\s{1,3}|nuovo\s{1,3})?esame\b"
_ASKED = re.compile(
    r"\b(?:fammi|fai|farmi|facciamo|dammi|darmi|proviamo|provare|iniziamo|inizia|iniziare|"
    r"cominciamo|comincia|cominciare|avvia|avviamo|prepara|preparami|voglio|vorrei|posso|"
    r"possiamo|puoi)\b(?:\s{1,3}\w+){0,2}?\s{1,3}" + _AN_EXAM
)
# The definite one only right after an imperative: "fammi l'esame", "proviamo a fare l'esame"
# ("voglio fare l'esame a marzo", "preparami per l'esame" are not).
_TOLD = re.compile(
    r"\b(?:fammi|facciamo|proviamo|iniziamo|cominciamo|avvia|avviamo|dammi)\s{1,3}"
    r"(?:a\s{1,3})?(?:fare\s{1,3})?l['’]\s?esame\b"
)
# A size as a student writes it: "20", "venti" (an exam holds 5 to 60).
_NUMBER_WORDS = {
    "cinque": 5,
    "dieci": 10,
    "quindici": 15,
    "venticinque": 25,
    "venti": 20,
    "trenta": 30,
    "quaranta": 40,
    "cinquanta": 50,
    "sessanta": 60,
}
_COUNT = r"(\d{1,3}|" + "|".join(_NUMBER_WORDS) + r")\b"
_QUALIFIED = re.compile(
    r"(?:^|\bun\s{1,3}(?:altro\s{1,3}|nuovo\s{1,3})?|\bnuovo\s{1,3})esame\s{1,3}"
    r"(?:complet|inter|(?:di|da|con)\s{1,3}" + _COUNT + r"|(?:su|sul|sui|del|dei)\s{1,3}capitol)"
)
_QUESTION_WORD = re.compile(
    r"^(?:come|com['’]|cosa|cos['’]|che\b|quant|quando|qual|perche|dove|chi\b)"
)
_HEADER = re.compile(r"^Simulazione d'esame ([0-9a-f]+): (\d+) domande", re.MULTILINE)
_SUBMIT_WORDS = re.compile(r"\b(?:consegn\w*|ho finito|finito|correggi\w*)\b")
_HOW_MANY = re.compile(
    r"\b" + _COUNT + r"\s{1,3}domande\b|\besame\s{1,3}(?:di|da|con)\s{1,3}" + _COUNT
)
_CHAPTERS = re.compile(r"\bcapitol[io]\s+((?:\d+(?:\s{0,3}(?:,|\be\b)\s{0,3})?)+)")


# A question about the student's own mock exams, not a request for a new one nor about the
# real exam ("quanti errori si possono fare all'esame?"): "i miei esami", "com'è andata
# l'ultima simulazione?", "quante simulazioni ho fatto?", "che voto ho preso all'esame?".
# Bounded repeats: linear in the text.
_EXAMS = r"(?:\w+['’]\s?)?(?:esam[ei]|simulazion[ei])\b"  # "all'esame"
_PAST = re.compile(
    "|".join(
        (
            r"\b(?:miei|mie)\s{1,3}(?:\w+\s{1,3})?" + _EXAMS,  # "le mie ultime simulazioni"
            r"\bultim[oaie]\s{1,3}(?:\w+\s{1,3})?" + _EXAMS,  # "l'ultimo esame"
            r"\bquant[ei]\s{1,3}" + _EXAMS + r"\s{1,3}(?:ho|hai)\b",  # "quanti esami ho fatto"
            r"\b(?:esami|simulazioni)\s{1,3}(?:\w+\s{1,3}){0,2}?(?:fatt|svolt|consegnat)",
            r"\b(?:ho|hai)\s{1,3}(?:preso|fatto|avuto|sbagliato)\s{1,3}(?:\S+\s{1,3}){0,2}?"
            + _EXAMS,  # "che voto ho preso all'esame?", "cosa ho sbagliato nell'esame?"
            # "il risultato della simulazione", "gli errori della simulazione"
            r"\b(?:esit[oi]|risultat[oi]|punteggio|voto|errori|sbagli\w*)\s{1,3}"
            r"(?:\S+\s{1,3}){0,3}?(?:\w+['’]\s?)?simulazion",
            r"\bandat[oaie]\s{1,3}(?:\S+\s{1,3}){0,3}?" + _EXAMS,  # "com'è andata la simulazione"
        )
    )
)
# While an exam is open: how long it has left.
_TIME_LEFT = re.compile(
    r"\bquanto\s{1,3}(?:tempo|manca)|\btempo\s{1,3}(?:mi\s{1,3})?rest|\bscadenza\b"
)


def asks_past_exams(query: str, *, exam_open: bool = False) -> bool:
    """A question about the student's own mock exams ("com'è andato il mio ultimo esame?",
    "fammi vedere le mie simulazioni"), or, while one is open, about its time left: answered
    with `domanda_teoria` `modo="esiti"`, never by starting a new exam."""
    text = fold(query)[:MAX_MESSAGE_CHARS]
    return bool(_PAST.search(text)) or (exam_open and bool(_TIME_LEFT.search(text)))


@dataclass
class OpenExam:
    id: str
    size: int
    answers: dict[int, str] = field(default_factory=dict)
    text: str = ""  # the exam as its start's result wrote it: numbered questions and options

    @property
    def missing(self) -> list[int]:
        return [n for n in range(1, self.size + 1) if n not in self.answers]

    def outside(self, numbers: Iterable[int]) -> list[int]:
        """The numbers of questions this exam does not have, in order."""
        return sorted({n for n in numbers if not 1 <= n <= self.size})


def numbered(text: str) -> dict[int, str]:
    """As the exam tool reads them: "1a 2b" -> {1: "a", 2: "b"}, "3 non lo so" -> `NOT_KNOWN`."""
    return read_numbered_answers(text[:MAX_MESSAGE_CHARS])


def wants_exam(query: str) -> bool:
    """A request for a mock exam: "simulazione d'esame", "fammi un esame", "un esame sul
    capitolo 3", "esame completo"; never a question or a fact about the real exam."""
    text = fold(query).strip()
    if _WANTS.search(text):
        return True
    if _QUESTION_WORD.match(text):  # "quanto dura un esame completo?"
        return False
    if _ASKED.search(text) or _TOLD.search(text):
        return True
    return "?" not in text and bool(_QUALIFIED.search(text))


def wants_submit(query: str) -> bool:
    return bool(_SUBMIT_WORDS.search(fold(query)))


_HAND_IN_MAX_CHARS = 40  # "consegno", "ho finito!": longer, or a question, is something else
NOTHING_TO_SUBMIT = (
    "Non hai una simulazione d'esame aperta da consegnare. Per cominciarne una scrivi "
    "«simulazione d'esame» (anche con quante domande, per esempio «simulazione d'esame di 20 "
    "domande»); poi rispondi con numero e lettera e scrivi «consegno» per la correzione."
)


# After a grading: "quali ho sbagliato?", "cosa ho sbagliato", "i miei errori".
_MISTAKES = re.compile(
    r"\b(?:quali|quale|cosa|dove|in cosa)\s{1,3}(?:ho\s{1,3})?sbagliat\w*"
    r"|\b(?:miei|che|quali)\s{1,3}errori\b"
    # "ho sbagliato qualcosa?", "quante ne ho sbagliate?" (asked for a review question)
    r"|^(?:quindi\s|allora\s)?(?:quante\s(?:ne\s)?)?ho\s{1,3}sbagliat[oe](?:\s{1,3}qualcosa)?\s*\??$"
)
_PRACTISE = re.compile(r"\b(?:ripass|esercit|allen|rifa|rifamm|riprov)\w*")
_ORDINALS = {word: n for n, word in enumerate(ORDINALS, 1)}
# A question by its number: "la 2", "domanda 3", "la seconda", "la terza domanda".
_NUMBERED = (
    r"(?:(?:la|domanda|numero|n\.?)\s*)+(\d{1,2}|" + "|".join(_ORDINALS) + r")\b(?:\s+domanda)?"
)
_WHICH = re.compile(r"\b" + _NUMBERED)
# "spiegami la 2", "perché la 3?", "e la 4?", "non ho capito la seconda", "perché la prima è
# b?": a graded question asked about by its number.
_BY_NUMBER = re.compile(
    r"^(?:e\s+|ma\s+)?"
    r"(?:spiegami\w*|spiega\w*|perche|come mai|mi spieghi|non ho capito|non capisco)?\s*"
    + _NUMBERED
    + r"(?:\s+(?:non\s+)?(?:e|era|sarebbe)\s+(?:la\s+)?(?:[a-d]|giust\w*|sbagliat\w*|corrett\w*))?"
    r"\s*\??$"
)
_MISTAKE_LINE = re.compile(r"^Domanda (\d{1,3}): (.+)$", re.MULTILINE)
_TOTAL = re.compile(r"\bsu (\d{1,3}) \(")
_EXPLAIN_CHARS = 80  # "e la b cosa vuol dire?" and the like are short
NO_MISTAKES = "Nessun errore: hai risposto bene a tutte le domande."
ALREADY_GRADED = (
    "L'hai già consegnata: l'esito è qui sopra. Per un'altra scrivi «simulazione d'esame»."
)


def last_grading(messages: Sequence[BaseMessage]) -> str | None:
    """The mock exam graded last in the conversation, when nothing but the coach's replies
    and the student's questions about it ("quali ho sbagliato?", "spiegami la 2") came
    after it: its grading's text."""
    for message in reversed(messages[:-1]):
        if isinstance(message, ToolMessage):
            graded = message.name == GRADE and message.text.startswith(GRADED_HEADER)
            return message.text if graded else None
        if isinstance(message, HumanMessage) and not asks_about_grading(message.text):
            return None
    return None


def asks_mistakes(query: str) -> bool:
    """ "quali ho sbagliato?", "cosa ho sbagliato", "i miei errori"; not a request to practise
    them ("voglio ripassare i miei errori": a review question)."""
    text = fold(query)[:MAX_MESSAGE_CHARS]
    return bool(_MISTAKES.search(text)) and not _PRACTISE.search(text)


def names_question(query: str) -> bool:
    """ "spiegami la 2", "e la 4?", "la 3": a graded question asked about by its number."""
    return bool(_BY_NUMBER.match(fold(query).strip()[: _HAND_IN_MAX_CHARS * 2]))


def question_number(query: str) -> int | None:
    """The number of the question `query` names ("la 2", "domanda 3", "la seconda"), if
    any."""
    which = _WHICH.search(fold(query)[:MAX_MESSAGE_CHARS])
    return None if which is None else _number(which.group(1))


def _number(said: str) -> int:
    return int(said) if said.isdigit() else _ORDINALS[said]


def _outcome(also: str = "") -> str:
    """ "ho sbagliato?", "era giusta?", "quindi era ..." and `also` after "era"."""
    return (
        r"(?:quindi\s|allora\s)?(?:ho\s(?:sbagliato|indovinato|risposto\s(?:bene|male|giusto))"
        rf"|(?:era|e)\s(?:giusta|sbagliata|corretta{also}))\s*\??$"
    )


# Right after a quiz grading "quindi era la c?" too; here not: "e la c?" reads the same (the
# folded "è") and asks about an option.
OUTCOME_ASKED = _outcome(r"|(?:la\s)?[a-d]")
_OUTCOME = re.compile("^" + _outcome())
# "e la b?", "ma la c cosa vuol dire?": an option, of a question not named
_OPTION_ONLY = re.compile(r"^(?:e|ma)\s(?:invece\s)?la\s[a-d]\b[^0-9]*$")
WHICH_ONE = (
    "Di quale domanda? Scrivi il suo numero (per esempio «spiegami la 4» o «la 4 era "
    "giusta?»), o «quali ho sbagliato?» per l'elenco."
)


def asks_outcome(query: str) -> bool:
    """ "ho sbagliato?", "era giusta?": how an answer went."""
    return bool(_OUTCOME.match(fold(query).strip()[:MAX_MESSAGE_CHARS]))


def asks_about_grading(query: str) -> bool:
    """Whether `query` is one of the questions `grading_reply` answers."""
    text = fold(query).strip()[: _HAND_IN_MAX_CHARS * 2]
    about = _MISTAKES.search(text) or _BY_NUMBER.match(text) or _unnamed(text)
    return bool(about) or hands_in(text) or asks_to_hand_in(text)


_QUESTION_TEXT = re.compile(r"^\(capitolo \d+\) (.+)$", re.M)  # an exam question's first line


def graded_exam(messages: Sequence[BaseMessage]) -> OpenExam | None:
    """The exam the conversation's last grading graded, with the answers it was handed in
    with (the start's text holds its questions)."""
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, ToolMessage) and message.name == GRADE:
            graded = message.text.startswith(GRADED_HEADER)
            return open_exam(messages[:position]) if graded else None
    return None


def _asked(n: int, exam: OpenExam | None) -> tuple[str, str | None] | None:
    """Question `n` of the graded exam, when the exam's text holds it (the grading quotes
    none): its text, and the option the student gave (None for none or "non lo so")."""
    if exam is None:
        return None
    body = dict(_EXAM_QUESTION.findall(exam.text)).get(str(n), "")
    asked = _QUESTION_TEXT.match(body.strip())
    if asked is None:
        return None
    letter = exam.answers.get(n)
    option = re.search(rf"^\s*{re.escape(letter)}\) (.+)$", body, re.M) if letter else None
    return asked.group(1).strip(), f"{letter}) {option.group(1).strip()}" if option else None


def _quoted(n: int, exam: OpenExam | None) -> str:
    """ "«Il wind shear è:» ", question `n`'s text before its line of the grading."""
    asked = _asked(n, exam)
    return f"«{asked[0]}» " if asked else ""


def _about(n: int, grading_line: str | None, exam: OpenExam | None) -> str:
    """ "spiegami la 2": a mistake's line with the question it is about; for a question
    answered right, that it was, with the question and the answer."""
    if grading_line is not None:
        return f"Domanda {n}: {_quoted(n, exam)}{grading_line}"
    asked = _asked(n, exam)
    said = f"Alla domanda {n} hai risposto correttamente"
    if asked is None or asked[1] is None:
        return f"{said}."
    return (
        f"{said}: «{asked[0]}» {asked[1]}. Se vuoi ripassarne l'argomento, chiedimelo con "
        "parole tue: te lo spiego dal manuale."
    )


def grading_reply(grading: str, query: str, exam: OpenExam | None = None) -> str | None:
    """What the student asks of the exam just graded (`exam`, as handed in): the questions
    they got wrong, one of them by its number, or that it was handed in already; None for
    anything else."""
    text = fold(query).strip()
    wrong = {int(n): line for n, line in _MISTAKE_LINE.findall(grading)}
    if asks_mistakes(text):
        if not wrong:
            return NO_MISTAKES
        listed = "\n".join(
            f"Domanda {n}: {_quoted(n, exam)}{line}" for n, line in sorted(wrong.items())
        )
        return f"Le domande sbagliate ({len(wrong)}):\n{listed}"
    if number := _BY_NUMBER.match(text):
        n = _number(number.group(1))
        total = _TOTAL.search(grading)
        size = int(total.group(1)) if total else max(wrong, default=0)
        if n in wrong or 1 <= n <= size:
            return _about(n, wrong.get(n), exam)
        return f"La simulazione aveva {size} domande: scrivi per esempio «spiegami la 1»."
    if hands_in(text) or asks_to_hand_in(text):
        return ALREADY_GRADED
    if _unnamed(text):  # "era giusta?", "e la b?": which of them
        return WHICH_ONE
    return None


def _unnamed(text: str) -> bool:
    """ "era giusta?", "e la b?" (folded): about a question not named."""
    return bool(_OUTCOME.match(text) or _OPTION_ONLY.match(text[:_EXPLAIN_CHARS]))


# "non ho ancora finito", "aspetta, consegno dopo": not now
_NOT_YET = re.compile(r"\b(?:non|ancora|aspett\w*|attimo|momento|dopo|piu tardi)\b")
# "posso consegnare?", "la posso consegnare?", "consegno?": asked, not done
_MAY_HAND_IN = re.compile(
    r"\b(?:posso|possiamo|devo|si puo)\s(?:\w+\s){0,2}?(?:consegnar\w*|correggere)\b"
    r"|^(?:consegno|correggi\w*)\s*\?"
)
# "correggi la 3: è c", "cambia la risposta 2": an answer changed (the first handed the exam in)
_CHANGES = re.compile(
    r"\b(?:correggi|cambi|modific)\w*\s(?:(?:la|alla|della)\s)?(?:risposta\s|domanda\s)?"
    r"(?:(?:la|alla|della)\s)?\d"
)
MAY_HAND_IN = "Sì: scrivi «consegno» e la correggo subito."
NOT_YET = "Va bene, continua pure: la correggo quando scrivi «consegno»."


def hands_in(query: str, *, exam_open: bool = False) -> bool:
    """ "consegno", "ho finito": a short message that hands an exam in (of any length with an
    exam open: "ok, ho risposto a tutte e consegno la simulazione"), not a question about
    handing something in ("come si consegna il piano di volo?", "posso consegnare?") nor a
    "not yet" ("non ho ancora finito": it handed the exam in)."""
    text = fold(query).strip()
    if "?" in text or not wants_submit(text) or _NOT_YET.search(text) or _CHANGES.search(text):
        return False
    return exam_open or len(text) <= _HAND_IN_MAX_CHARS


def asks_to_hand_in(query: str) -> bool:
    """ "posso consegnare?": whether the exam may be handed in, without doing it."""
    return bool(_MAY_HAND_IN.search(fold(query).strip()[:MAX_MESSAGE_CHARS]))


def not_yet(query: str) -> bool:
    """ "non ho ancora finito", "consegno dopo": the exam is not to be handed in yet."""
    text = fold(query)[:MAX_MESSAGE_CHARS]
    return wants_submit(text) and bool(_NOT_YET.search(text))


def start_arguments(query: str) -> dict[str, Any]:
    folded = fold(query)
    args: dict[str, Any] = {}
    if how_many := _HOW_MANY.search(folded):
        count = how_many.group(1) or how_many.group(2)  # "20 domande", "esame da 20"
        args["domande"] = int(count) if count.isdigit() else _NUMBER_WORDS[count]
    if chapters := _CHAPTERS.search(folded):
        args["capitoli"] = [int(n) for n in re.findall(r"\d+", chapters.group(1))]
    return args


def open_exam(messages: Sequence[BaseMessage]) -> OpenExam | None:
    """The exam started last in the conversation and not yet graded, with the answers given
    since (a later answer to the same number wins)."""
    answers: dict[int, str] = {}
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            if message.name == GRADE and message.text.startswith(GRADED_HEADER):
                return None
            if message.name == ASK and message.status != "error":
                if message.text.startswith(PAST_EXAMS_HEADER):
                    continue  # "come sono andati i miei esami?" asked during the exam
                header = _HEADER.search(message.text)
                if header is None:
                    return None  # a question asked since: the exam is left
                size = int(header.group(2))
                kept = {n: x for n, x in answers.items() if 1 <= n <= size}
                return OpenExam(header.group(1), size, kept, message.text)
        elif isinstance(message, HumanMessage):
            for n, letter in numbered(message.text).items():
                answers.setdefault(n, letter)
    return None


def submit_call(exam: OpenExam) -> dict[str, Any]:
    given = " ".join(
        f"{n} non lo so" if x == NOT_KNOWN else f"{n}{x}" for n, x in sorted(exam.answers.items())
    )
    return {"esame": exam.id, "risposta": given or "-"}


PAST_CALL: dict[str, Any] = {"modo": "esiti"}  # the student's past mock exams


def start_call(query: str) -> dict[str, Any]:
    args: dict[str, Any] = {"modo": "esame"}
    start = start_arguments(query)
    if "domande" in start:
        args["quante"] = start["domande"]
    if "capitoli" in start:
        args["capitoli"] = start["capitoli"]
    return args


def is_exam_result(result: ToolMessage) -> bool:
    """A result written for the student (an exam started, graded, or refused in Italian)."""
    return bool(_HEADER.search(result.text)) or result.text.startswith(GRADED_HEADER)


_FOR_THE_MODEL = "L'allievo risponde"
_SIZE_NOTE = re.compile(r"^Richieste (\d+) domande: (.+), dillo all'allievo\.$")
HOW_TO_ANSWER = (
    'Rispondi con numero e lettera (per esempio "1a 2b 3c"), anche in più messaggi, o '
    '"4 non lo so" per una che non sai; scrivi «consegno» per la correzione.'
)


def for_the_student(result: str) -> str:
    """An exam result as the student reads it. A started exam's text is written for the
    model: its id, the line telling it how to submit, and the size note "dillo all'allievo"
    become the header without the id, how to answer, and the note said to the student."""
    if (header := _HEADER.search(result)) is None:
        return result  # a grading: written for the student
    lines = []
    for line in result.split("\n"):
        if line.startswith(_FOR_THE_MODEL):
            lines.append(HOW_TO_ANSWER)
        elif note := _SIZE_NOTE.match(line):
            lines.append(f"Hai chiesto {note.group(1)} domande, ma {note.group(2)}.")
        elif _HEADER.match(line):
            lines.append(line.replace(f" {header.group(1)}:", ":", 1))
        else:
            lines.append(line)
    return "\n".join(lines)


# With an exam open: "quali mi mancano?", "quante ne mancano?", "a che punto sono?", "a quali
# non ho risposto?": the answers noted so far (each was searched in the manual).
_MISSING = re.compile(
    r"^(?:e\s|ok\s|ok,\s)?(?:(?:quali|quante|che|cosa)\s(?:domande\s)?(?:ne\s)?(?:mi\s)?"
    r"(?:mancano|manca|restano|rimangono)|a che punto sono|dove sono arrivat\w"
    r"|(?:a\s)?(?:quali|quante|che)\s(?:domande\s)?(?:non\sho\s(?:ancora\s)?risposto"
    r"|devo\sancora\s(?:fare|rispondere)))(?:\sancora)?\s*[?!.]*$"
)
# "annulla l'esame", "mi ritiro", "voglio abbandonare", "lasciamo perdere": an open exam is
# not cancelled; it is handed in, or left to its deadline.
_CANCEL = re.compile(
    r"^(?:(?:ok|va bene|senti|scusa)[\s,!]+)?(?:(?:voglio|vorrei|posso|mi)\s)?"
    r"(?:annull\w*|abbandon\w*|ritir\w*|interromp\w*|lascia(?:mo)?\sperdere|lascio\sperdere)"
    r"(?:\s(?:l'?\s?esame|la\ssimulazione|il\stest|tutto))?\s*[!.]*$"
)
CANNOT_CANCEL = (
    "Una simulazione d'esame aperta non si annulla: scrivi «consegno» per la correzione (le "
    "domande senza risposta contano come sbagliate), oppure lasciala scadere: resterà tra le "
    "tue simulazioni come non consegnata."
)


# "ripetimi la 3", "qual era la domanda 2?", "rileggimi la seconda", "fammi rivedere le
# domande": the open exam's questions again (each was searched in the manual, or drew a quiz
# question, which left the exam).
# The verbs that ask for something said again ("ripetimi", "rileggimi", "rimandamela").
SAY_AGAIN = r"(?:ripet\w*|rilegg\w*|rimand\w*|riscriv\w*)"
_SHOW = (
    r"^(?:e\s|ok,?\s)?(?:(?:me\s|mi\s)?(?:la\s|le\s)?"
    rf"(?:{SAY_AGAIN}|mostrami|fammi\s(?:ri)?(?:vedere|leggere)"
    r"|(?:qual|cosa|com)\s(?:era|e|dice|diceva))\s)"
)
_SHOW_ONE = re.compile(_SHOW + _NUMBERED + r"\s*[?!.]*$")
_SHOW_ALL = re.compile(_SHOW + r"(?:tutte\s)?(?:le\s)?domande(?:\sdell'?\s?esame)?\s*[?!.]*$")
_EXAM_QUESTION = re.compile(
    r"^(\d{1,2})\. (\(capitolo \d+\) .*?)(?=^\d{1,2}\. \(capitolo|\Z)", re.M | re.S
)


def shown_questions(exam: OpenExam, query: str) -> str | None:
    """The open exam's question `query` asks to see again ("ripetimi la 3"), or all of them
    ("fammi rivedere le domande"); None for any other message."""
    text = fold(query).strip()[:MAX_MESSAGE_CHARS]
    questions = {int(n): body.strip() for n, body in _EXAM_QUESTION.findall(exam.text)}
    if one := _SHOW_ONE.match(text):
        n = _number(one.group(1))
        if n not in questions:
            return f"La simulazione ha {exam.size} domande, numerate da 1 a {exam.size}."
        return f"Domanda {n} {questions[n]}"
    if _SHOW_ALL.match(text) and questions:
        return "\n\n".join(f"{n}. {body}" for n, body in sorted(questions.items()))
    return None


def asks_missing(query: str) -> bool:
    """ "quali mi mancano?", "a che punto sono?": which answers of the open exam are noted."""
    return bool(_MISSING.match(fold(query).strip()[:MAX_MESSAGE_CHARS]))


def wants_cancel(query: str) -> bool:
    """ "annulla l'esame", "mi ritiro", "lasciamo perdere": the student would drop the open
    exam."""
    return bool(_CANCEL.match(fold(query).strip()[:MAX_MESSAGE_CHARS]))


# A judgement on numbered questions with no letter: "la 3 è giusta", "1 e 2 sono sbagliate?".
_JUDGING_TEXT = """
    che corretta corrette corretto corretti credo domanda domande e esatta esatte esatto
    giusta giuste giusto giusti il la le me numero penso per secondo sbagliata sbagliate
    sbagliato sono
"""
_JUDGING_WORDS = frozenset(_JUDGING_TEXT.split())
_JUDGEMENTS = frozenset({"corrett", "esatt", "giust", "sbagliat"})  # the stems of the above
_JUDGEMENT_MAX_CHARS = 60


def judged_without_letter(query: str) -> list[int]:
    """The questions a message calls right or wrong without naming a letter ("la 3 è
    giusta"), whether or not the exam has them: the student has to say which letter; [] for
    any other message."""
    if len(query) > _JUDGEMENT_MAX_CHARS:
        return []
    tokens = re.findall(r"[a-z0-9]+", fold(query))
    if not any(t[:-1] in _JUDGEMENTS for t in tokens):
        return []
    if not all(t.isdigit() or t in _JUDGING_WORDS for t in tokens):
        return []
    return sorted({int(t) for t in tokens if t.isdigit()})


def _said(letter: str) -> str:
    return "«non lo so»" if letter == NOT_KNOWN else letter


def _not_in_exam(numbers: list[int], exam: OpenExam) -> str:
    listed = " e ".join(str(n) for n in numbers)
    which = (
        f"la domanda {listed} non c'è" if len(numbers) == 1 else f"le domande {listed} non ci sono"
    )
    return f"La simulazione ha {exam.size} domande, numerate da 1 a {exam.size}: {which}."


def letter_needed(questions: list[int], exam: OpenExam) -> str:
    """What to say to "la 3 è giusta": how to answer question 3, or, when the exam has no
    question 3, how many it has and how to answer them."""
    if outside := exam.outside(questions):
        return f"{_not_in_exam(outside, exam)} {HOW_TO_ANSWER}"
    first = questions[0]
    which = "alla domanda" if len(questions) == 1 else "alle domande"
    listed = " e ".join(str(n) for n in questions)
    return (
        f"Per rispondere {which} {listed} scrivi il numero e la lettera che scegli (per esempio "
        f'"{first}a", o "{first} non lo so"). In una simulazione non correggo una domanda alla '
        "volta: lo vedrai alla correzione, quando scrivi «consegno»."
    )


def progress_note(
    exam: OpenExam,
    given: Iterable[int] = (),
    before: Mapping[int, str] | None = None,
    *,
    how: bool = True,
) -> str:
    """The answers noted and the questions missing, after the numbers just `given` that the
    exam does not have ("9b" in an exam of 5 is not noted), and those whose answer changed
    from `before` ("3a", then "3b"); then how to go on, unless not `how` (a reply that says
    it already)."""
    missing = exam.missing
    listed = ", ".join(str(n) for n in missing[:15])
    if len(missing) > 15:  # "3, 4, ..., 17 e altre 13"
        listed += f" e altre {len(missing) - 15}"
    outside = exam.outside(given)
    not_noted = f"{_not_in_exam(outside, exam)} " if outside else ""
    for n in sorted(set(given)):
        was, now = (before or {}).get(n), exam.answers.get(n)
        if was is not None and now is not None and was != now:
            not_noted += f"Domanda {n}: ora la tua risposta è {_said(now)} (era {_said(was)}). "
    noted = "1 risposta" if len(exam.answers) == 1 else f"{len(exam.answers)} risposte"
    lacking = f"Manca la domanda {listed}" if len(missing) == 1 else f"Mancano le domande {listed}"
    if not how:
        unanswered = "conta come sbagliata" if len(missing) == 1 else "contano come sbagliate"
        return (
            f"{not_noted}Ho preso nota di {noted} su {exam.size}. {lacking}: senza risposta "
            f"{unanswered}."
        )
    return not_noted + (
        f"Ho preso nota di {noted} su {exam.size}. {lacking}. Continua con numero e lettera "
        f'(per esempio "{missing[0]}a", o '
        f'"{missing[0]} non lo so" se non la sai), oppure scrivi «consegno» per la correzione: '
        "le domande senza risposta contano come sbagliate."
    )

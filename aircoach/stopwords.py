"""The package's one stop-word list: Italian and English function words, the words that match
everything and mean nothing on their own. Search (`aircoach.text`), the offline model, the
follow-up suggestions and the e-mail triage's language guess all read it from here; a feature
adds its own words on top (the follow-ups' question verbs), never a list of its own.

`language_of` guesses whether a text is Italian or English from which language's function
words it uses more: cheap, deterministic, and right for an e-mail of a few sentences.
"""

from __future__ import annotations

import re
from typing import Literal

Language = Literal["it", "en"]

_ITALIAN_TEXT = """
    a ad agli ai al all alla alle allo anche c che chi ci col come con cui d da dagli dai dal
    dall dalla dalle dallo de degli dei del dell della delle dello di e ed è e' fra gli i il
    in io l la le li lo ma me mi ne negli nei nel nell nella nelle nello noi non o od per
    piu più po quale quali quando quel quella quelle quelli quello questa queste questi
    questo se si sia sono su sugli sui sul sull sulla sulle sullo tra tu un un' una uno vi
    voi
"""
ITALIAN = frozenset(_ITALIAN_TEXT.split())

_ENGLISH_TEXT = """
    a about an and are as at be been but by can could did do does for from had has have
    how i if in into is it its me my no not of on or our please so than that the their them
    then there these they this those to was we were what when where which who will with
    would you your
"""
ENGLISH = frozenset(_ENGLISH_TEXT.split())

# Words of both lists that tell nothing about the language ("a", "in", "no", ...).
_SHARED = ITALIAN & ENGLISH
# Words that tell Italian from English: each side's own function words.
_ITALIAN_ONLY = ITALIAN - _SHARED
_ENGLISH_ONLY = ENGLISH - _SHARED

# The union: what search and the offline model drop.
STOPWORDS = ITALIAN | ENGLISH

# Words of a question that name no subject, though the course may use them: what the student
# says of themselves about it ("ho problemi con il QNH", "faccio fatica", "ho dei dubbi") and
# how the answer should be ("in tre frasi", "in parole semplici"). The course search weighs the
# first as a common word and drops the second; the follow-up rules read both as asking about
# the topic already under way.
STUDENT_STATE_WORDS = frozenset(
    [
        "problema",
        "problemi",
        "difficoltà",
        "difficolta",
        "difficile",
        "fatica",
        "faccio",
        "dubbio",
        "dubbi",
        "confuso",
        "confusa",
        "aiuto",
        "aiutami",
    ]
)
ANSWER_FORM_WORDS = frozenset(
    [
        "frase",
        "frasi",
        "parola",
        "parole",
        "sintesi",
        "breve",
        "brevemente",
        "semplice",
        "semplici",
        "semplicemente",
    ]
)

# Words that say how a student asks, not about what ("parliamo dell'ipossia", "xke serve il
# QNH?", "cosa si intende per VMC?"): the course search and the offline model's answer read
# neither as a question's subject.
_ASKING_WORDS_TEXT = """
    parliamo parlare parlarmi parlane parlaci xke xche perke xk intende intendono intendi
    importante importanti importanza
"""
ASKING_WORDS = frozenset(_ASKING_WORDS_TEXT.split())

# Words that ask how two subjects differ ("differenza tra VA e VNO"): the course search takes
# a section on either, and the offline answer gives a sentence on each.
COMPARING_WORDS = frozenset(
    {"differenza", "differenze", "differiscono", "distinguere", "confronto"}
)

# Words that ask to be told more of the topic under way ("spiegami meglio", "dimmi altro",
# "approfondisci"), in no sense a passage uses: the follow-up rules search the topic without
# them, and the offline answer gives what it has not said yet. "fammi un esempio" too: the
# topic searched with "esempio" found the passages that say "ad esempio" (IMSAFE's for the
# spin, hyperventilation's for hypoxia).
_MORE_WORDS_TEXT = """
    meglio ancora altro approfondisci approfondire continua spiega spiegami spiegamelo spiegalo
    spiegare ripeti ripetere esempio esempi
"""
MORE_WORDS = frozenset(_MORE_WORDS_TEXT.split())

# A question's common verbs, the action asked about rather than its subject ("quando si usa
# il QNH?", "come si riconosce lo stallo?", "come si evitano?"), and its modal and auxiliary
# ones ("quanto deve essere la visibilità?", "cosa si può fare in classe G?"), and where or
# how it is found or left ("dove si trova?", "come si esce?"), or whether it exists ("quali
# nubi esistono?" found nothing). The course search weighs them
# as common words (no section needs to hold one); the follow-up rules read a question of
# nothing else ("come si riconosce?") as asking about the topic under way.
_QUESTION_VERBS_TEXT = """
    usa usano usare uso utilizza utilizzano utilizzare impiega imposta impostare imposto mette
    mettere metto riconosce riconoscere riconosco evita evitare evito previene prevenire
    calcola calcolare calcolo controlla controllare controllo sceglie scegliere scelgo
    gestisce gestire gestisco recupera recuperare recupero sente sento sentire accorge
    accorgo accorgersi nota noto notare legge leggo leggere interpreta interpreto interpretare
    dipende dipendono deve devo devono dovrei essere può posso possono potrei impiegano
    impostano mettono riconoscono evitano prevengono calcolano controllano scelgono gestiscono
    recuperano sentono notano leggono interpretano usato usata usati usate scelto messo
    esce esco escono uscire trova trovo trovano esiste esistono agisce agiscono agire
"""
QUESTION_VERBS = frozenset(_QUESTION_VERBS_TEXT.split())

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def language_of(text: str, *, default: Language = "it") -> Language:
    """`en` when the text uses more English than Italian function words, else `it` (also
    when it uses none: the school's mail is Italian unless it shows otherwise)."""
    italian = english = 0
    for match in _WORD.finditer(text.casefold()):
        word = match.group()
        if word in _ITALIAN_ONLY:
            italian += 1
        elif word in _ENGLISH_ONLY:
            english += 1
    if english > italian:
        return "en"
    if italian > english:
        return "it"
    return default

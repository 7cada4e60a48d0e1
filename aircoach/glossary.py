"""The course's glossary: the words a student uses for what the manual says in other words
(`smagrire` for `impoverire`), and the abbreviations it spells out (`VDS`, `CAT`).

Stemming joins inflections (`impoverire`/`impoverisce`), not synonyms: a query word found here
also matches the stems of its entry's words in the index, as alternatives for the same word
(they never add a word the passage must also hold). Keys and words are folded Italian words;
every entry is tested (`tests/knowledge/test_glossary.py`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from aircoach.text import fold, stem, words

# A student's word, or phrase, -> the manual's words for the same thing. An abbreviation the
# manual uses itself (QNH, VDS, IAS) needs no entry; the phrase a student may use instead does.
GLOSSARY: dict[str, tuple[str, ...]] = {
    # synonyms
    "smagrire": ("impoverire", "povera"),
    "smagrisco": ("impoverire", "povera"),
    "smagrimento": ("impoverire", "povera"),
    "grassa": ("ricca", "arricchire"),
    "ingrassare": ("ricca", "arricchire"),
    "galleggiamento": ("galleggiare", "suolo"),
    "galleggia": ("galleggiare", "suolo"),
    "frontalmente": ("frontale",),
    "di fronte": ("frontale",),
    "contro": ("frontale",),
    "limpida": ("chiara",),
    "sereno": ("chiara",),
    # "mi perdo in volo", not "perde potenza" nor "perdo quota" (one stem)
    "perdo volo": ("incertezza", "posizione"),
    "perdo orientamento": ("incertezza", "posizione"),
    "perdo navigazione": ("incertezza", "posizione"),  # it found the GPS's "perdere il segnale"
    "perde potenza": ("cala",),  # "la potenza cala" (§ 4.4), not the wind shear's "perdita"
    "perso": ("incertezza", "posizione"),
    "esce": ("rimessa",),
    "esco": ("rimessa",),
    "uscire": ("rimessa",),
    "uscita": ("rimessa",),
    # "come si recupera lo stallo?": the manual's "per rimettere" (§ 1.4), "la rimessa" (§ 1.13)
    "recuperare": ("rimettere", "rimessa"),
    "squawk": ("transponder",),
    "licenza": ("attestato",),
    "bevuto": ("alcol",),
    "bere": ("alcol",),
    "ubriaco": ("alcol",),
    "pressione livello mare": ("qnh",),
    "contatto radio": ("avaria",),
    "sbandamento": ("sbandometro", "scivolata", "derapata"),
    # the ball of the slip indicator says which (§ 3.9); the spin "nasce da una derapata"
    # and the dihedral's wing "scivola" say the word in passing
    "derapata": ("sbandometro",),
    "scivolata": ("sbandometro",),
    "centro gravita": ("baricentro",),  # "come si calcola il centro di gravità?" found nothing
    "baricentro indietro": ("arretrato", "posteriore"),
    "baricentro avanti": ("avanzato", "anteriore"),
    "wake turbulence": ("turbolenza", "scia"),
    "wake": ("scia",),
    "go around": ("riattaccare",),
    "mancato avvicinamento": ("riattaccare",),
    "pressione aeroporto": ("qfe",),
    "pressione pista": ("qfe",),
    "spegne motore": ("ferma", "piantata"),
    "spento motore": ("ferma", "piantata"),
    "si pianta": ("ferma", "piantata"),
    # the manual's "avaria" is the radio's and the transponder's: "avaria del motore" found
    # nothing, no section holding both words
    "avaria motore": ("ferma", "piantata"),
    "guasto motore": ("ferma", "piantata"),
    "quota": ("altitudine",),
    "pressione standard": ("1013",),  # the manual gives the figure, 1013,25 hPa
    # "si atterra controvento": the manual's "vento contrario" (its "controventate" are wings
    # braced by struts, § 2.9, which the stemmer joins to "controvento")
    "controvento": ("vento", "contrario"),
    # "la velocità di miglior salita": the manual's "massimo rateo di salita" (Vy, § 9.5); it
    # found the fixed-pitch propeller's "rendimento migliore" and its climb
    "migliore salita": ("massimo",),
    "migliore planata": ("massima", "efficienza"),
    # the mountain and valley breezes (§ 5.9)
    "catabatico": ("brezza", "monte"),
    "catabatici": ("brezza", "monte"),
    "anabatico": ("brezza", "valle"),
    "anabatici": ("brezza", "valle"),
    # the wind of the pressure gradient and Coriolis, above the ground's friction (§ 5.8)
    "vento gradiente": ("coriolis",),
    # an emergency declared on the radio: the manual's MAYDAY and PAN PAN (§ 8.8), which says
    # no "radio"; "radio" found the transponder's "avaria radio" (§ 7.8) and "dichiaro" the
    # declared distances (§ 9.10)
    "radio emergenza": ("mayday", "pan"),
    "dichiarare emergenza": ("mayday", "pan"),
    "aereo vola": ("portanza",),
    "estate": ("caldo",),  # "d'estate le prestazioni peggiorano": "in una giornata calda"
    "estiva": ("caldo",),
    "ali": ("ala",),  # the stemmer keeps the plural apart ("ali", "ala")
    "ghiaccio ali": ("aeromobile",),  # § 5.10 "Il ghiaccio sull'aeromobile"
    "lati circuito": ("sottovento",),
    "fasi": ("stadi",),  # "le fasi di un temporale": its "tre stadi"
    "fase": ("stadio",),
    "velocita indicata": ("ias",),
    "velocita vera": ("tas",),
    "velocita suolo": ("gs",),
    "entra circuito": ("inserisce",),
    "entrare circuito": ("inserisce",),
    "entro circuito": ("inserisce",),
    "entrata circuito": ("inserisce",),
    "ingresso circuito": ("inserisce",),
    # "se entro in nube": the manual's "entro" is "within" ("entro 1000 ft"), its verb "entra"
    "entro": ("entra", "entrare"),
    "entrato": ("entra", "entrare"),
    "finisco nube": ("entra", "entrare"),
    # abbreviations the manual spells out
    "qne": ("1013",),
    "ulm": ("ultraleggero", "diporto"),
    "cat": ("turbolenza", "chiara"),
    "ws": ("wind", "shear"),
    "llws": ("wind", "shear"),
    "agl": ("altezza", "suolo"),
    "amsl": ("altitudine", "mare"),
    "msl": ("altitudine", "mare"),
    "cb": ("cumulonembo",),
    "cg": ("baricentro",),
    "mtow": ("massa", "decollo"),
}

# Abbreviations that are also Italian words the search drops as words of the question ("come
# va?"): read as the abbreviation only when written in capitals, as the manual writes it
# ("cos'è la VA?": "la velocità di manovra (VA)"), and searched as the manual's words for it.
CAPITALS: dict[str, tuple[str, ...]] = {
    "VA": ("manovra",),
}
_CAPITALS = re.compile(r"\b(?:" + "|".join(CAPITALS) + r")\b")

# Phrases with a one-letter word, which the search drops ("fattore P"): found in the folded
# query in either case, and searched as the manual's words for them.
LETTERED: dict[str, tuple[str, ...]] = {
    "fattore p": ("pala", "discendente"),  # § 4.10, "il fattore P (la pala discendente ...)"
    "effetto p": ("pala", "discendente"),
}
_LETTERED = re.compile(r"\b(?:" + "|".join(LETTERED) + r")\b")


def _stems(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in words(text))


@functools.lru_cache(maxsize=1)
def _entries() -> tuple[tuple[frozenset[str], frozenset[str]], ...]:
    """(the stems of a key, the stems it also means), every entry."""
    return tuple((_stems(key), _stems(" ".join(meant))) for key, meant in GLOSSARY.items())


def alternatives(terms: Iterable[str]) -> dict[str, frozenset[str]]:
    """For the stems of a query's words, the stems each also matches through the glossary:
    every word of an entry's key, when the query holds all of them, matches the entry's
    words too ("pressione al livello del mare" also finds "QNH")."""
    held = set(terms)
    found: dict[str, set[str]] = {}
    for key, meant in _entries():
        if key and key <= held:
            for term in key:
                found.setdefault(term, set()).update(meant)
    return {term: frozenset(stems) for term, stems in found.items()}


def spelled_out(query: str) -> list[str]:
    """The manual's words for the abbreviations of `CAPITALS` that `query` writes in
    capitals, and for the phrases of `LETTERED` it holds."""
    capitals = [word for found in _CAPITALS.findall(query) for word in CAPITALS[found]]
    lettered = [word for found in _LETTERED.findall(fold(query)) for word in LETTERED[found]]
    return capitals + lettered

"""The offline model's answer from `kb_search` results: the sentences of the best sections that
answer the question, never a sentence without its subject, every section used cited.

A question can ask for several things at once ("sintomi e cosa fare", "sintomi e a che
quota"): each such aspect (symptoms, remedy, a number, a cause) is looked for on its own, so
the answer holds a sentence for each when the section has one. A sentence that leans on the
one before it ("Riduce l'anidride carbonica...", "Questo...") comes with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aircoach.glossary import alternatives
from aircoach.stopwords import ASKING_WORDS, COMPARING_WORDS, MORE_WORDS
from aircoach.text import fold, stem, words

MAX_SENTENCES = 4  # from the best section, its subjects included; the next one adds one
MAX_SOURCES = 2
SAID_ABOVE = "lo dice la risposta qui sopra."

_RESULT = re.compile(r"^- \[(?P<ref>[^\]]+)\] \((?P<materia>[^)]*)\) score=\S*: (?P<text>.+)$")
# A sentence ends at . ! ? before a capital, never after an abbreviation ("n. 1178/2011").
_SENTENCE_END = re.compile(
    r"(?<!\bn\.)(?<!\bart\.)(?<!\bes\.)(?<!\bReg\.)(?<!\bcfr\.)(?<!\becc\.)(?<![A-Z]\.)"
    r"(?<=[.!?])\s+(?=[A-ZÀ-Ý«\"(])"
)
# Words of a question that only say what is asked, not about what.
_ASKING_TEXT = """
    cos cosa cose come quando perche quanto quanta quanti quante qual quale spiegami spiega
    dimmi parlami fammi fai faresti sai succede serve servono mi ti ci si e ho hai ha fa fare
    faccio devo
    differenza legge leggere indica indicano avere aver bisogna occorre
"""
_ASKING = frozenset(_ASKING_TEXT.split()) | ASKING_WORDS
_MORE = frozenset(stem(w) for w in MORE_WORDS)  # "spiegami meglio": more of the same

# Aspects a question may ask for, each with the folded words that ask for it (`asks`) and the
# stems, or digits, a sentence that gives it holds (`gives`).
_NUMBER = "#"


@dataclass(frozen=True)
class _Aspect:
    asks: re.Pattern[str]
    gives: frozenset[str]
    # Its sentence answers a follow-up without the topic's told before it ("come la evito?");
    # not a cause's: its words ("aumenta", "quindi") are any explanation's, and the topic's
    # own sentence often says why ("perché?" after the carburettor ice: the venturi cools).
    alone: bool = True


def _stems_of(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in text.split())


_ASPECTS = (
    _Aspect(  # symptoms
        re.compile(
            r"\b(?:sintom\w*|segn[io]"
            # "come lo riconosco?", "come si riconosce?" (it gave the stall's definition again)
            r"|come (?:mi |si |l[aoie] |l')?(?:accorg\w*|riconosc\w*|capisc\w*))\b"
        ),
        _stems_of("sintomo sintomi segno segni calo euforia irregolare accorge"),
    ),
    _Aspect(  # what to do
        re.compile(
            r"\b(?:cosa (?:si )?(?:fa|fare|faccio|devo fare)|che fare|rimedi\w*"
            # "come si evita?", "come la evito?", "come l'evito?", "come se ne esce?"
            r"|come (?:si |se ne |ne |l[aoie] |l')?"
            r"(?:corregge|correggo|evita|evito|esce|esco|rimedia|previene|previen[io])"
            r"|come (?:mi )?comporto)\b"
        ),
        _stems_of(
            "inserire inserendo occorre bisogna deve devono tirare applicare ridurre "
            "riscaldamento evitare aprire chiudere atterrare abbandonare correggere "
            "spegnere consigliabile prudente necessario conviene rimessa rimettere mantiene "
            "esegue eseguire tolta togliere"
        ),
    ),
    _Aspect(  # how long
        re.compile(
            r"\b(?:quanto (?:tempo )?dur\w*|per quanto tempo|quando (?:cessa|cessano|finisce"
            r"|finiscono|scompare|scompaiono))\b"
        ),
        _stems_of("dura durano durata cessa cessano finisce finiscono scompare scompaiono"),
    ),
    _Aspect(  # a number ("quali sono le minime VMC?": the minima are figures)
        re.compile(
            r"\b(?:a che quota|che quota|quanto|quanti|quante|quanta|quale valore|minim[aei])\b"
        ),
        frozenset({_NUMBER}),
    ),
    _Aspect(  # a cause
        re.compile(r"\b(?:perche|xke|xche|perke|xk|come mai|causa|cause|motivo)\b"),
        _stems_of("perché perche poiché poiche causa dovuto quindi dipende riduce aumenta"),
        alone=False,
    ),
)

# First words of a sentence that lean on the sentence before it for their subject.
_LEANING_TEXT = """
    questo questa questi queste cio esso essa essi esse non inoltre quindi percio pertanto
    infatti invece anche poi allora tuttavia pero ma oppure ne cosi riduce aumenta diminuisce
    provoca causa serve servono indica indicano permette consente puo possono deve devono e
    sono ha hanno va vanno tende tendono dipende dipendono viene vengono agisce comporta
    produce genera richiede avviene compare appare dura vale significa segue si lo li nasce
    nascono cambia varia
"""
_LEANING = frozenset(_LEANING_TEXT.split())


@dataclass(frozen=True)
class Found:
    """One section of a `kb_search` result."""

    ref: str
    materia: str
    text: str


@dataclass(frozen=True)
class Asked:
    """What the conversation adds to a question: what the coach's earlier answers said
    (`told`); the student's own words (`asking`, where the aspects are read; default the
    query, whose search may add the topic's words, "sintomi" among them); and the subject a
    bare follow-up is about (`subject`: words counted as the student's own, where no aspect
    is read)."""

    told: str = ""
    asking: str = ""
    subject: Sequence[str] = ()


def results(text: str) -> list[Found]:
    """The sections of a `kb_search` result text, best first."""
    found = []
    for line in text.splitlines():
        match = _RESULT.match(line.strip())
        if match:
            found.append(Found(match["ref"], match["materia"], match["text"]))
    return found


def sentences(text: str) -> list[str]:
    """The sentences of a section's text."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


# An airspace class is a capital letter, which no word holds: a question that names one
# ("classe D", "in classe g") is answered by the sentences that name it ("Nelle classi B, C e
# D...", "In Italia le classi usate sono A, C, D, E e G"), not by the first to say "classi".
_CLASS_ASKED = re.compile(r"\bclass[ei]\s+([a-g])\b", re.IGNORECASE)
_CLASS_NAMED = re.compile(r"\b[A-G]\b")
_CLASS_RANGE = re.compile(r"\bda(?:lla)? [A-G] a(?:lla)? [A-G]\b")
_CLASS_STEM = stem("classe")


def _classes_asked(question: str) -> frozenset[str]:
    return frozenset(f"classe {letter.upper()}" for letter in _CLASS_ASKED.findall(question))


# A figure a sentence gives ("5 km", "1013,25 hPa", "30°"), not a rule's or a law's number
# ("SERA.5001", "n. 1178/2011", "FL100").
_FIGURE = re.compile(r"(?<![\w./])\d+(?:[.,]\d+)?(?![\w/])")


def _sentence_stems(sentence: str) -> frozenset[str]:
    found = {stem(w) for w in words(sentence)}
    if _FIGURE.search(sentence):
        found.add(_NUMBER)
    if _CLASS_STEM in found:  # a range ("dalla A alla G") names its ends only in passing
        named = _CLASS_NAMED.findall(_CLASS_RANGE.sub("", sentence))
        found.update(f"classe {letter}" for letter in named)
    return frozenset(found)


# Openings that refer to the sentence before: "Per questo non si deve forzare la salita".
_LEANING_OPENINGS = ("per questo", "per cio", "di conseguenza", "in questo caso")
# "the two" named in the sentence before: "La differenza tra i due è la declinazione".
_THE_TWO = re.compile(r"\b(?:tra|fra) (?:i|le) due\b")


def _leans_back(sentence: str) -> bool:
    folded = fold(sentence)
    if folded.startswith(_LEANING_OPENINGS) or _THE_TWO.search(folded):
        return True
    first = re.match(r"[\w']+", folded)
    if first is None:
        return False
    word = first.group(0).split("'")[0]
    return word in _LEANING or word.endswith(("ano", "ono"))


def _meant(literal: Iterable[str]) -> frozenset[str]:
    """The stems of the student's words with the manual's words for them, as the search read
    them ("smagrire": the sentence that says "impoverire"; "QNE": the one with "1013"; "cosa
    dico alla radio in emergenza": the one with "MAYDAY")."""
    literal = frozenset(literal)
    return literal | frozenset().union(*alternatives(literal).values())


def _pick(
    query: str,
    text: str,
    first: bool,
    asked: Asked = Asked(),
    lead: frozenset[str] = frozenset(),
) -> list[int]:
    """The positions of the sentences of one section that answer `query`: the one sharing the
    most words with it, then one for each aspect asked not yet given; with the sentences they
    lean on. Unless the question asks for one of those aspects (which is given again if it
    was said), a sentence the coach already said (`asked.told`) is chosen only when no other
    one holds a word of the student's (not the topic's): a follow-up gets what is new.
    `lead`: the stems of the sentences chosen from the first section, for a later one (not
    `first`)."""
    told, asking, subject = asked.told, asked.asking, asked.subject
    folded = fold(asking or query)
    literal = frozenset(stem(w) for w in words(query) if w not in _ASKING)
    wanted = _meant(literal) | _classes_asked(query)
    said = sentences(text)
    held = [_sentence_stems(s) for s in said]
    overlap = [len(wanted & h) for h in held]
    if not said:
        return []
    every = list(range(len(said)))
    aspects = [aspect for aspect in _ASPECTS if aspect.asks.search(folded)]
    untold = [i for i in every if said[i] not in told]
    fresh = every if aspects else untold
    own = set(_meant({stem(w) for w in words(asking) if w not in _ASKING})) if asking else wanted
    if asking:
        own |= _classes_asked(asking)
    own |= {stem(w) for w in words(" ".join(subject))}
    most = max(len(own & h) for h in held)
    if not most or not any(len(own & held[i]) == most for i in fresh):
        # Nothing new holds the student's words ("quando lo sento?"), or not as many as a
        # sentence said ("e se la pista è bagnata?" after what lengthens the take-off run got
        # the slope's): say it again.
        fresh = every
    classes = _classes_asked(asking or query)
    naming = [i for i in fresh if classes & held[i]]
    if naming:
        fresh = naming
    elif classes and not first:
        return []  # a later section that does not name the class asked adds nothing to it
    if first and told and untold and own and own <= _MORE:
        # "spiegami meglio", nothing else asked: what the section says beside what was told,
        # in its order (it gave the sentence told again: no other holds the topic's word).
        last_told = max((i for i in every if said[i] in told), default=-1)
        return _with_subjects(said, [i for i in untold if i > last_told][:2] or untold[-2:], 2)
    # The student's own words first ("e a 45?": the sentence with 45°), then the topic's.
    best = max(fresh, key=lambda i: (len(own & held[i]), overlap[i], -i))
    own_hits = {i for i in every if own & held[i]}
    topic = wanted & lead  # the question's words the first section's answer holds
    if not first and (overlap[best] < 2 or not topic or not topic <= held[best]):
        # A second section is cited only when it clearly adds to the first: two words of the
        # question, and every word of it the first's answer holds (the topic). "perdo il
        # contatto radio" found the radio failure, then the fog, whose sentence "perde
        # calore" and cools the air "a contatto" with the ground holds no word of the
        # radio's; the cold front's clouds found the warm front's ("fronte", "nubi", not
        # "freddo"), the engine stopping after take-off the frost on an aircraft "fermo"
        # before "decollo" (not "motore").
        return []
    chosen = [best]
    alone = False  # a sentence was added for an aspect that answers on its own
    for aspect in aspects:
        if any(aspect.gives & held[i] for i in chosen):
            continue
        giving = [i for i in every if aspect.gives & held[i]]
        if giving and first:
            chosen.append(max(giving, key=lambda i: (len(aspect.gives & held[i]), overlap[i], -i)))
            alone = alone or aspect.alone
    if first and len(literal) == 2 and COMPARING_WORDS & set(words(asking or query)):
        # Two subjects compared: a sentence on each ("differenza tra Vx e Vy" gave "Vx è
        # sempre minore di Vy" and Vy's definition, not Vx's). Two words: subjects of several
        # ("brezza di mare", "brezza di terra") share theirs.
        for term in sorted(literal & frozenset().union(*held)):
            others = literal - {term}
            if not any(term in held[i] and not others & held[i] for i in chosen):
                on_it = [i for i in every if term in held[i] and not others & held[i]]
                if on_it:
                    chosen.append(on_it[0])
    if alone and said[best] in told and best not in own_hits:
        # A follow-up asking for an aspect ("come la evito?") gets its sentence, not the
        # topic's told before it again (unless that one holds the student's own words).
        chosen.remove(best)
    if first and len(chosen) == 1 and len(said) > 1:
        # One more sentence of the best section when it shares a word with the question.
        runner = max(
            (i for i in every if i != best),
            key=lambda i: (i in fresh, overlap[i], -abs(i - best)),
        )
        if overlap[runner] > 0 and runner in fresh and said[runner] not in told:
            chosen.append(runner)
    return _with_subjects(said, chosen, MAX_SENTENCES if first else 1)


def _with_subjects(said: Sequence[str], chosen: list[int], limit: int) -> list[int]:
    """The positions of `chosen` with the sentences they lean on for their subject, at most
    `limit`."""
    with_subjects: set[int] = set()
    for i in chosen:
        with_subjects.add(i)
        j = i
        while j > 0 and _leans_back(said[j]):
            j -= 1
            with_subjects.add(j)
    return (
        sorted(with_subjects)[:limit]
        if len(with_subjects) <= limit
        else _trim(chosen, with_subjects, limit)
    )


def _trim(chosen: list[int], with_subjects: set[int], limit: int) -> list[int]:
    """At most `limit` sentences, the best-ranked choices and their subjects first."""
    kept: set[int] = set()
    for i in chosen:
        group = {
            j for j in with_subjects if j <= i and all(k in with_subjects for k in range(j, i + 1))
        }
        if len(kept | group) > limit:
            break
        kept |= group
    return sorted(kept)


def section_answer(
    query: str, text: str, focus: Sequence[str] = (), asked: Asked = Asked()
) -> tuple[str, list[Found]] | None:
    """The answer to one question (or one part of it) from a `kb_search` result, and the
    sections it used, best first; None when the result holds no section. `focus`: the words
    a follow-up adds to the topic ("e il microburst?"): the section that uses them most comes
    first; `asked`: what the conversation adds to the question."""
    found = [f for f in results(text) if not f.ref.startswith("quiz ")] or results(text)
    if not found:
        return None
    wanted = {stem(w) for w in words(" ".join(focus))}
    if wanted and not wanted & {stem(w) for w in words(found[0].text)}:
        found.sort(key=lambda f: -sum(stem(w) in wanted for w in words(f.text)))
    picked: list[tuple[Found, list[str]]] = []
    lead: frozenset[str] = frozenset()
    for rank, item in enumerate(found[:MAX_SOURCES]):
        said = sentences(item.text)
        positions = _pick(query, item.text, rank == 0, asked, lead)
        if positions:
            picked.append((item, [said[i] for i in positions]))
        if rank == 0:
            lead = frozenset(stem(w) for i in positions for w in words(said[i]))
    body = " ".join(s for _, chosen in picked for s in chosen)
    return body, [item for item, _ in picked]


def _sources(used: Sequence[Found]) -> str:
    cited = {f.ref: f.materia for f in used}
    return ", ".join(f"§ {ref} ({materia})" for ref, materia in cited.items())


def answer(
    query: str, text: str, focus: Sequence[str] = (), asked: Asked = Asked()
) -> tuple[str, list[str]] | None:
    """An answer to `query` from a `kb_search` result and the sections it cites; None when
    the result holds no section (`focus`, `asked`: see `section_answer`)."""
    composed = section_answer(query, text, focus, asked)
    if composed is None:
        return None
    body, used = composed
    said = sentences(body)
    if asked.told and said and all(sentence in asked.told for sentence in said):
        # A follow-up ("perché?" after the QFE's "...e quindi zero a terra") that finds
        # nothing beyond what was said: said again as it was, it read as an answer not heard.
        lead = "Lo dice già la risposta qui sopra, dal manuale del corso"
        return f"{lead}: {body} (Fonte: {_sources(used)}.)", [f.ref for f in used]
    return f"Dal manuale del corso: {body} (Fonte: {_sources(used)}.)", [f.ref for f in used]


def answer_parts(
    asked: Sequence[tuple[str, str, str]], not_found: str
) -> tuple[str, list[str]] | None:
    """One answer to a question of several parts, from each part's `kb_search` result
    (`(part as written, what it was searched as, result text)`): a paragraph per part, each
    citing its sections and preferring what the parts before it did not say; `not_found` for
    a part the manual does not answer. None when no part found anything."""
    lines: list[str] = []
    cited: list[str] = []
    told = ""  # what the parts before said
    for part, searched, text in asked:
        composed = section_answer(searched, text, asked=Asked(told=told, asking=part))
        if composed is None:
            lines.append(f"- {part}: {not_found}")
            continue
        body, used = composed
        # A sentence a part before said is not said again ("cos'è il punto di rugiada e
        # perché è importante?" gave the same two sentences twice).
        new = [sentence for sentence in sentences(body) if sentence not in told]
        told = f"{told} {body}".strip()
        if not new:
            lines.append(f"- {part}: {SAID_ABOVE} (Fonte: {_sources(used)}.)")
            continue
        lines.append(f"- {part}: {' '.join(new)} (Fonte: {_sources(used)}.)")
        cited += [f.ref for f in used if f.ref not in cited]
    if not cited:
        return None
    return "Dal manuale del corso:\n" + "\n".join(lines), cited

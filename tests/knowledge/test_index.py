"""The embedded course search: Italian-aware ranking over the manual and the quiz
explanations, nothing for what the course does not cover, bounded inputs."""

from __future__ import annotations

import json

import pytest

from aircoach.knowledge.index import EXCERPT_CHARS, MAX_TOP_K, CourseIndex, passages_of
from aircoach.knowledge.manual import Section, parse_manual
from aircoach.quiz.bank import DEMO_QUESTIONS
from tests.helpers import shipped_docs

BANK = json.loads(DEMO_QUESTIONS.read_text("utf-8"))
CHAPTERS = {int(n): t for n, t in BANK["chapters"].items()}


@pytest.fixture(scope="module")
def course() -> CourseIndex:
    return CourseIndex(
        passages_of(parse_manual(shipped_docs()), BANK["questions"], CHAPTERS), "test"
    )


def _refs(index: CourseIndex, query: str, **kwargs) -> list[str]:
    return [r["riferimento"] for r in index.search(query, **kwargs)]


@pytest.mark.parametrize(
    "query",
    [
        "Cos'è lo stallo?",
        "cos'e lo stallo",  # no accents
        "COS'È LO STALLO",
        "stalo",  # a typo
        "gli stalli",  # the plural
    ],
)
def test_accents_case_plurals_and_one_typo_find_the_same_section(course, query):
    assert _refs(course, query)[0] == "1.4"


def test_a_result_has_the_shape_the_http_formatter_expects(course):
    [best] = course.search("altimetro QNH QFE 1013", top_k=1)
    assert best["riferimento"] == "3.2" and best["materia"] == "Strumenti di volo"
    assert best["capitolo"] == 3 and best["tipo"] == "manuale"
    assert best["titolo"] == "Altimetro e regolazioni QNH, QFE, 1013"
    assert "QNH" in best["testo"] and isinstance(best["score"], float) and best["score"] > 0


def test_results_are_best_first_and_top_k_is_bounded(course):
    results = course.search("pressione", top_k=50)
    assert 1 < len(results) <= MAX_TOP_K
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert len(course.search("pressione", top_k=0)) == 1


def test_materia_narrows_to_matching_chapters_accents_ignored(course):
    everywhere = {r["capitolo"] for r in course.search("pressione", top_k=20)}
    assert len(everywhere) > 1
    narrowed = course.search("pressione", top_k=20, materia="meteorologìa")
    assert narrowed and {r["capitolo"] for r in narrowed} == {5}


@pytest.mark.parametrize(
    "query",
    ["Mi consigli un buon mutuo per la casa?", "ricetta della torta di mele", "", "?!", "il la di"],
)
def test_what_the_course_does_not_cover_finds_nothing(course, query):
    assert course.search(query) == []


@pytest.mark.parametrize(
    ("query", "section"),
    [
        ("ho problemi con il QNH", "3.2"),
        ("faccio fatica con il vento al traverso", "9.4"),
        ("ho dei dubbi sulla navigazione stimata", "6.7"),
        ("aiutami con lo stallo", "1.4"),
        # The course's own "problema" is a magneto's: the word still counts where it is.
        ("problemi ai magneti", "4.2"),
        # How the answer should be is no subject either.
        ("Spiegami lo stallo in 3 frasi", "1.4"),
        ("spiegami il QNH in parole semplici", "3.2"),
    ],
)
def test_words_that_name_no_subject_are_not_words_a_section_must_hold(course, query, section):
    assert _refs(course, query)[0] == section


@pytest.mark.parametrize(
    ("query", "section"),
    [
        # A frame word held by another passage outranked the subject's section: the readback
        # says "regole", the ground speed's § 6.11 "si usa".
        ("quali sono le regole sul transponder?", "7.8"),
        ("che tipo di carburante si usa?", "4.7"),
        ("quando si usa il QNH?", "3.2"),
        # "carburante" and "carburatore" share a stem: the heading with the word as written.
        ("carburante", "4.7"),
        ("i carburanti", "4.7"),  # its plural too
        ("carburatore", "4.3"),
        ("ghiaccio al carburatore", "4.3"),
        # A request to search names no subject: each found nothing.
        ("cercami il VDS", "7.14"),
        ("cerca il QNH", "3.2"),
        ("mi trovi la sezione sullo stallo?", "1.4"),
    ],
)
def test_a_frame_word_or_a_stem_sibling_does_not_outrank_the_subjects_section(
    course, query, section
):
    assert _refs(course, query)[0] == section


@pytest.mark.parametrize("query", ["ho un problema", "ho dei dubbi", "ho un problema con mia zia"])
def test_a_difficulty_without_a_subject_of_the_course_finds_nothing(course, query):
    assert course.search(query) == []


@pytest.mark.parametrize("query", ["vinto", "ho vinto la partita", "mondo"])
def test_a_typo_is_undone_only_on_a_stem_of_five_letters(course, query):
    # `vinto` (stem `vint`) is one letter from `vito`, whose stem meets `vite` (§ 1.13):
    # a short stem is one edit from too many words to guess which was meant.
    assert course.search(query) == []


def test_a_long_word_is_looked_up_as_written(course, monkeypatch):
    """A "word" of hundreds of letters (a pasted hash, a URL) made every string one edit
    from it: 17,000 of 400 letters, about 7 MB, for each such word of a query."""
    import aircoach.knowledge.index as index

    edited: list[str] = []
    real = index.one_edit_away
    monkeypatch.setattr(index, "one_edit_away", lambda term: edited.append(term) or real(term))
    course.search("resistnza " + "x" * 400)
    assert edited == ["resistnz"]  # the typo of the short word is still undone


def test_a_typo_hiding_a_derivational_ending_is_still_undone(course):
    assert _refs(course, "resistnza")[0] == "1.5"


@pytest.mark.parametrize(
    ("query", "section"),
    [
        ("qunado c'è la nebbia?", "5.3"),
        ("perhcè si forma la nebbia?", "5.3"),
        ("cmoe funziona il VOR?", "6.9"),
    ],
)
def test_a_question_word_with_two_letters_swapped_is_not_searched(course, query, section):
    """ "qunado c'è la nebbia?" found nothing: "qunado", a word the course never uses, was
    the rarest of all and outweighed "nebbia". A word of the course that is one swap from a
    function word is still searched ("ISA" and "sia", "far" and "fra")."""
    assert _refs(course, query)[:1] == [section]
    assert _refs(course, "cos'è l'ISA?")[:1] == ["5.1"]


def test_a_quiz_explanation_lends_its_words_to_its_section():
    """The wording of a question ("quadruplica") finds the section that teaches it, which
    never uses that word; the explanation itself is not a result."""
    section = Section(
        "1.2",
        "Portanza",
        1,
        "Aerodinamica",
        "La portanza dipende dal quadrato della velocità.",
        "01.md",
    )
    other = Section(
        "1.3", "Resistenza", 1, "Aerodinamica", "La resistenza frena l'aereo in volo.", "01.md"
    )
    question = {
        "capitolo": 1,
        "numero": 1,
        "testo": "Se la velocità raddoppia la portanza:",
        "spiegazione": "Quadruplica: dipende dal quadrato della velocità.",
    }
    index = CourseIndex(passages_of([section, other], [question], {1: "Aerodinamica"}), "v")
    assert _refs(index, "perche quadruplica") == ["1.2"]
    alone = CourseIndex(passages_of([section, other], [], {1: "Aerodinamica"}), "v")
    assert _refs(alone, "perche quadruplica") == []


def test_a_long_passage_is_cut_to_an_excerpt_around_the_words_asked(course):
    long_text = " ".join(f"Frase numero {i} sul vento." for i in range(100)) + " Il QNH finale."
    section = Section("9.9", "Lunga", 9, "Prestazioni", long_text, "09.md")
    index = CourseIndex(passages_of([section], [], {}), "v")
    [hit] = index.search("QNH finale vento")
    assert len(hit["testo"]) <= EXCERPT_CHARS


def test_an_excerpt_is_whole_sentences_not_clauses(course):
    """An excerpt was cut at a colon or a semicolon: the alcohol's ended "... rischio di
    malattia da decompressione:", and the licences' started "serve anche un certificato
    medico", the second half of a sentence."""
    for query in ("si puo volare dopo aver bevuto alcol?", "quanto dura il certificato medico"):
        for hit in course.search(query, top_k=3):
            text = hit["testo"]
            assert text[0].isupper() and text.rstrip()[-1] in '.!?)"', (query, text[-60:])


def test_a_huge_query_is_cut_before_it_is_searched(course):
    assert _refs(course, "stallo angolo critico " * 50_000)[0] == "1.4"


@pytest.mark.parametrize("materia", ["Meteorologia generale", "meteorologia e nubi", "Meteo"])
def test_a_materia_naming_a_chapter_in_other_words_narrows_to_it(course, materia):
    found = course.search("fronte freddo", materia=materia)
    assert found and {r["capitolo"] for r in found} == {5}


@pytest.mark.parametrize("materia", ["altimetria", "regole del volo", "3"])
def test_a_materia_that_names_no_chapter_does_not_hide_the_answer(course, materia):
    """A model guessing the subject ("altimetria") must not be told the manual has nothing:
    the search runs on every chapter, as without `materia`."""
    assert _refs(course, "altimetro QNH", materia=materia) == _refs(course, "altimetro QNH")


def test_a_query_cut_at_its_limit_drops_the_word_cut_in_half(course):
    # 85 x "stallo " is cut at 500 characters inside a word ("sta"): a word the course never
    # uses, the rarest of all, would outweigh "stallo" and find nothing.
    assert _refs(course, "stallo " * 85)[:1] == ["1.4"]


@pytest.mark.parametrize(
    "query",
    ["meteorologia", "parlami della meteorologia", "cosa c'è nel capitolo di meteorologia?"],
)
def test_a_chapter_named_by_its_title_gives_its_sections_in_order(course, query):
    """No section of chapter 5 says "meteorologia"; the radio failure's "condizioni
    meteorologiche" came first. A query that only names a chapter stays in it, and when no
    passage there holds its words, the chapter's first sections come, in the manual's order."""
    assert _refs(course, query, top_k=3) == ["5.1", "5.2", "5.3"]


@pytest.mark.parametrize(
    ("query", "capitolo"),
    [("fattore umano", 10), ("il motore", 4), ("navigazione", 6), ("spazi aerei", 7)],
)
def test_a_chapter_named_by_its_title_is_searched_within(course, query, capitolo):
    found = course.search(query)
    assert found and {r["capitolo"] for r in found} == {capitolo}


@pytest.mark.parametrize("query", ["aria", "volo"])
def test_a_word_of_a_title_that_does_not_name_the_chapter_searches_every_chapter(course, query):
    """At least half of a title's words name the chapter: "aria" alone is not "Regole
    dell'aria e spazi aerei", nor is a word of the whole course ("volo") a chapter."""
    assert len({r["capitolo"] for r in course.search(query)}) > 1


def test_a_section_whose_heading_is_asked_in_full_comes_first(course):
    """ "cos'è la vite?" found "Stallo e vite in virata base-finale" (10.11) before "La vite"
    (1.13), which the explanations of the quiz lent less to."""
    assert _refs(course, "cos'è la vite?")[:1] == ["1.13"]


@pytest.mark.parametrize(
    ("query", "section"),
    [
        ("quando si usa il QNH?", "3.2"),
        ("quando si utilizza il QNH", "3.2"),
        ("quando si mette il 1013?", "3.2"),
        ("come si riconosce lo stallo?", "1.4"),
        ("come si evita lo stallo?", "1.4"),
        ("come si previene la vite?", "1.13"),
        ("quanto deve essere la visibilità per volare VFR?", "7.5"),
        # the rudder's (2.5) "Agisce principalmente sull'imbardata" came before the elevator
        ("l'equilibratore su che asse agisce", "2.4"),
        ("come agisce il trim?", "2.6"),
    ],
)
def test_a_questions_common_verb_is_not_a_word_a_section_must_hold(course, query, section):
    """They found nothing: no section holds "usa" and "QNH", "riconosce" and "stallo". The
    visibility found the minimum heights (7.6), which say a flight "deve" keep above them,
    before the VMC minima (7.5)."""
    assert _refs(course, query)[:1] == [section]


def test_a_frame_word_is_never_one_of_the_two_words_a_result_needs(course):
    """ "quale si usa in atterraggio?" after the QNH: no section holds "QNH" and
    "atterraggio", and the airspeed arcs' section, which holds "usa", came back."""
    assert _refs(course, "QNH usa atterraggio") == []
    assert _refs(course, "QNH QFE usa atterraggio")[:1] == ["3.2"]


def test_a_section_whose_heading_holds_every_word_asked_comes_first(course):
    """ "il TAF?" found the UTC (6.16), to which a quiz question on the times of METAR and TAF
    lends, before "METAR e TAF" (5.11); a heading said in full still counts more."""
    assert _refs(course, "il TAF?")[:1] == ["5.11"]
    assert _refs(course, "la vite")[:1] == ["1.13"]


def test_a_common_word_is_one_of_the_two_only_when_the_question_lacks_telling_ones(course):
    """ "si può volare VFR di notte?" answered with the ATC clearances (8.11), which hold
    "volo" (a word of a fifth of the course) and "VFR", not "notte": the manual has no rule
    for VFR at night. A question of common words still finds its section."""
    assert _refs(course, "si può volare VFR di notte?") == []
    assert _refs(course, "quota minima VFR sopra le città")[:1] == ["7.6"]
    assert _refs(course, "velocità di stallo in virata")[:1] == ["1.9"]


def test_a_word_only_a_section_or_two_hold_names_its_subject_alone(course):
    """ "cosa dice la regola IMSAFE?" found nothing: no section holds "regola" and "IMSAFE",
    and a result needed two of the words asked."""
    assert _refs(course, "cosa dice la regola IMSAFE?")[:1] == ["10.12"]


def test_a_rare_stem_names_its_subject_only_as_written(course):
    """ "cos'è il punto di non ritorno?" found the light signals (7.9), the one section with
    a word of the stem of "ritorno" ("ritornare per l'atterraggio"): the manual has no point
    of no return. The glossary's words for a student's count as written ("catabatici": the
    mountain breeze)."""
    assert _refs(course, "cos'è il punto di non ritorno?") == []
    assert _refs(course, "cosa sono i venti catabatici?")[:1] == ["5.9"]


def test_can_is_a_frame_verb(course):
    """ "cosa si può fare in classe G?" found nothing: no section holds "può" and "classe"."""
    assert _refs(course, "cosa si può fare in classe G?")[:1] == ["7.3"]


def test_in_caso_di_says_nothing_of_the_subject(course):
    """ "cosa faccio in caso di incendio motore?" found the rules of precedence (7.2), which
    say "in caso di" and "aeromobili a motore": the manual has no engine fire, and "caso"
    was one of the two words the result held. Other emergencies asked the same way are found."""
    assert _refs(course, "cosa faccio in caso di incendio motore?") == []
    assert _refs(course, "cosa fare in caso di avaria radio?")[:1] == ["8.9"]
    assert _refs(course, "in caso di piantata motore cosa faccio?")[:1] == ["10.15"]


def test_the_words_of_a_conversation_are_not_searched(course):
    """ "grazie, ora parliamo dell'ipossia" found the hyperventilation ("parlando ad alta
    voce"), with "grazie" a word the course never uses; "passiamo" is the propeller's "passo"."""
    assert _refs(course, "grazie, ora parliamo dell'ipossia")[:1] == ["10.1"]
    assert _refs(course, "parliamo dell'ipossia")[:1] == ["10.1"]
    assert _refs(course, "ok perfetto, passiamo al QNH")[:1] == ["3.2"]
    assert _refs(course, "vorrei sapere cos'è lo stallo")[:1] == ["1.4"]
    # "si intende per": "intende" is no word of the course (the rarest of all): none found
    assert _refs(course, "cosa si intende per VMC?")[:1] == ["7.5"]
    # A text message's "xke" ("perché") is no word of the course either.
    assert _refs(course, "xke serve il QNH?")[:1] == ["3.2"]  # it found nothing
    # Nor "importante", which asks what a thing is for: "perché l'olio è importante?" found
    # nothing (no section says the word).
    assert _refs(course, "perché l'olio è importante?")[:1] == ["4.6"]
    # "rischio" asks what a subject brings, like "problemi": no section needs to say it.
    assert _refs(course, "quando c'è rischio di nebbia?")[:1] == ["5.3"]
    assert _refs(course, "quali sono i rischi del ghiaccio?")[:1] == ["5.10"]
    # "domanda" is the student's or the quiz's: "non capisco questa domanda" found ROGER's
    # "una domanda che chiede sì o no" (8.3); the radio's own questions are still found.
    assert _refs(course, "non capisco questa domanda") == []
    assert _refs(course, "che domanda è?") == []
    assert _refs(course, "ROGER si usa per rispondere a una domanda?")[:1] == ["8.3"]
    assert _refs(course, "come rispondo alla domanda how do you read?")[:1] == ["8.5"]
    # The kind asked for, or that a thing exists: each found nothing (four sections say
    # "tipo" or "tipi", none "esistono").
    assert _refs(course, "quali tipi di nubi ci sono?")[:1] == ["5.4"]
    assert _refs(course, "quali tipi di nebbia ci sono?")[:1] == ["5.3"]
    assert _refs(course, "che tipi di spazio aereo esistono?")[:1] == ["7.3"]
    assert _refs(course, "quali nubi esistono?")[:1] == ["5.4"]
    # What a thing is like or for, asked in everyday frames: each found nothing.
    for query, ref in (
        ("quali sono le caratteristiche dell'altimetro?", "3.2"),
        ("qual è la funzione degli alettoni?", "2.2"),
        ("in che modo si usa l'ATIS?", "8.7"),
        ("come mai l'alcol è importante?", "10.4"),
        ("mi spieghi l'anemometro?", "3.5"),
        ("mi fai un riassunto sull'alcol?", "10.4"),
        ("cosa bisogna fare con l'alcol?", "10.4"),
    ):
        assert ref in _refs(course, query)[:3], query
    # "devo", "deve", "essere" say nothing of the subject: a section that said "deve" came
    # first ("cosa devo sapere sul QNH?": the readback's § 8.4; the stall's: the centre of
    # gravity's § 9.9, which says "deve"), and "ricordare", "definizione" found nothing.
    for query, ref in (
        ("cosa devo sapere sul QNH?", "3.2"),
        ("cosa devo fare in caso di stallo?", "1.4"),
        ("cosa devo ricordare dello stallo?", "1.4"),
        ("quanto deve essere la visibilità?", "7.5"),
        ("definizione di portanza", "1.2"),
        # each found nothing, or the radio's "parla"
        ("cosa succede se sbaglio il QNH?", "3.2"),
        ("cos'è lo stallo in pratica?", "1.4"),
        ("perché si parla di wind shear?", "5.14"),
        ("in quali situazioni conta l'effetto suolo?", "1.8"),
    ):
        assert _refs(course, query)[:1] == [ref], query


@pytest.mark.parametrize(
    ("query", "refs"),
    [
        ("cos'è la fatica?", ["10.12"]),  # it found nothing: "fatica" as in "faccio fatica"
        ("faccio fatica", []),  # what the student says of themselves names no subject
        ("ho un problema", []),
    ],
)
def test_a_question_of_frame_words_is_searched_only_when_each_is_a_headings(course, query, refs):
    assert _refs(course, query)[:1] == refs

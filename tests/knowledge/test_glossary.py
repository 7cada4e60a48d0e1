"""The glossary: every entry means words the manual uses, and a student's word finds the
section that says it in other words."""

from __future__ import annotations

import json
import re

import pytest

from aircoach.glossary import CAPITALS, GLOSSARY, LETTERED, alternatives
from aircoach.knowledge.index import CourseIndex, passages_of
from aircoach.knowledge.manual import parse_manual
from aircoach.quiz.bank import DEMO_QUESTIONS
from aircoach.text import stem, terms, words
from tests.helpers import shipped_docs

BANK = json.loads(DEMO_QUESTIONS.read_text("utf-8"))
CHAPTERS = {int(n): t for n, t in BANK["chapters"].items()}
MANUAL = parse_manual(shipped_docs())
MANUAL_TERMS = {t for section in MANUAL for t in terms(f"{section.title} {section.text}")}


@pytest.fixture(scope="module")
def course() -> CourseIndex:
    return CourseIndex(passages_of(MANUAL, BANK["questions"], CHAPTERS), "test")


@pytest.mark.parametrize(("key", "meant"), sorted(GLOSSARY.items()))
def test_every_entry_means_words_of_the_manual(key, meant):
    key_terms = [stem(w) for w in words(key)]
    found = alternatives(key_terms)
    assert set(found) == set(key_terms)
    for term in key_terms:
        assert {stem(w) for w in words(" ".join(meant))} <= found[term]
    # at least one of the words meant is in the manual, or the entry finds nothing
    assert {stem(w) for w in words(" ".join(meant))} & MANUAL_TERMS, key


def test_a_phrase_needs_all_its_words():
    assert alternatives([stem("pressione"), stem("mare")]) == {}
    assert stem("qnh") in alternatives(terms("pressione al livello del mare"))[stem("mare")]


@pytest.mark.parametrize(
    ("query", "section"),
    [
        ("quando devo smagrire la miscela?", "4.4"),
        ("centro di gravità avanzato", "9.9"),  # the manual's "baricentro": it found nothing
        ("galleggiamento in atterraggio", "1.8"),
        ("due aerei si avvicinano frontalmente, chi ha la precedenza?", "7.2"),
        ("a cosa serve la pressione al livello del mare in volo", "3.2"),
        ("turbolenza in aria limpida", "5.13"),
        ("come si esce dalla vite", "1.13"),
        ("cosa fare se mi perdo in volo", "6.15"),
        ("se perdo l'orientamento?", "6.15"),
        ("mi perdo durante la navigazione, cosa faccio?", "6.15"),  # it found the GPS, § 6.12
        ("si puo volare dopo aver bevuto?", "10.4"),
        ("serve la licenza per volare con un ultraleggero?", "7.13"),
        ("la CAT ad alta quota", "5.13"),
        ("cosa fare se si spegne il motore in volo?", "10.15"),  # the manual: "si ferma"
        ("mi si è spento il motore in decollo", "10.15"),
        ("cosa fare in caso di avaria motore?", "10.15"),  # "avaria" is the radio's: none
        ("ho un guasto al motore", "10.15"),  # the oil's and instruments' 4.6 and the panel
        ("cosa faccio se perdo il contatto radio?", "8.9"),  # it found the fog, "a contatto"
        ("come si evita il wake turbulence?", "10.10"),
        ("cos'è lo sbandamento?", "3.9"),  # "sband" was guessed a typo of "band": VHF
        ("cos'è il go-around?", "10.11"),  # the manual says "riattaccare"
        ("cosa succede se vola con il baricentro troppo indietro?", "9.9"),
        ("come si entra in circuito?", "7.15"),  # "ci si inserisce"; it found the spin's 10.11
        ("cos'è la quota di transizione?", "3.3"),  # "altitudine di transizione"; it found none
        ("cosa devo fare se entro in una nube?", "10.14"),  # "entro 1000 ft": the VMC minima
        ("se finisco in una nube?", "10.14"),
        ("cosa faccio se entro in vite?", "10.11"),  # the engine failure's "entro circa 30°"
        ("quali sono le fasi di un temporale?", "5.5"),  # "tre stadi": it found none
        ("perché l'aereo vola?", "1.12"),  # the four forces; it found the airspace classes
        ("come fa un aereo a volare?", "1.12"),
        ("cosa fare con il ghiaccio sulle ali?", "5.10"),  # "ali" is not "ala": none found
        ("quali sono i lati del circuito?", "7.15"),  # it found the directional stability
        ("cos'è il vento di gradiente?", "5.8"),  # the ISA: a quiz's "gradiente termico"
        ("perché si atterra controvento?", "9.3"),  # the wings braced, "controventate"
        ("perché si decolla controvento?", "9.2"),
        ("cosa sono i venti catabatici?", "5.9"),  # the breezes: none found
        ("cos'è il vento anabatico?", "5.9"),
        # MAYDAY and PAN PAN (§ 8.8, no "radio"): the transponder's codes, the declared distances
        ("cosa dico alla radio se ho un'emergenza?", "8.8"),
        ("come dichiaro un'emergenza?", "8.8"),
    ],
)
def test_a_students_words_find_the_section_that_says_it_otherwise(course, query, section):
    assert section in [r["riferimento"] for r in course.search(query, top_k=3)]


def test_an_abbreviation_finds_the_section_of_its_setting_first(course):
    """ "QNE" meant "1013" or "standard", and "standard" is the standard atmosphere's word
    (5.1 came first); the setting is § 3.2's, whose heading says "1013"."""
    assert [r["riferimento"] for r in course.search("cos'è il QNE?", top_k=1)] == ["3.2"]


def test_summer_is_the_heat_not_the_summer_time(course):
    """ "d'estate il decollo è più lungo?" found the summer time of UTC (§ 6.16) first."""
    found = [r["riferimento"] for r in course.search("d'estate il decollo è più lungo?", top_k=3)]
    assert found[0] == "9.2"


def test_an_abbreviation_that_is_an_italian_word_counts_in_capitals_only(course):
    """ "va" is a word of the question ("come va?"): "cos'è la VA?" found nothing. In
    capitals it is the manoeuvring speed (§ 2.16, "La velocità di manovra (VA)")."""
    for abbreviation, meant in CAPITALS.items():  # the manual writes it in capitals
        assert any(re.search(rf"\b{abbreviation}\b", section.text) for section in MANUAL)
        assert {stem(w) for w in words(" ".join(meant))} <= MANUAL_TERMS
    assert [r["riferimento"] for r in course.search("cos'è la VA?", top_k=1)] == ["2.16"]
    found = {r["riferimento"] for r in course.search("come va il motore?", top_k=5)}
    assert "2.16" not in found and found


@pytest.mark.parametrize("query", ["cos'è il fattore P?", "il fattore p", "l'effetto P dell'elica"])
def test_a_phrase_with_a_one_letter_word_is_searched_as_the_manuals_words(course, query):
    """The search drops one-letter words: "cos'è il fattore P?" was "fattore", the load
    factor's (§ 1.9); the propeller's effects (§ 4.10) say "il fattore P (la pala
    discendente ...)"."""
    for phrase, meant in LETTERED.items():
        assert {stem(w) for w in words(" ".join(meant))} <= MANUAL_TERMS, phrase
    assert course.search(query, top_k=1)[0]["riferimento"] == "4.10"


def test_two_subjects_compared_find_the_section_of_each(course):
    """A section on either subject is a result: "differenza tra VA e VNO" found nothing, the
    two speeds being taught apart (§ 2.16 and the airspeed indicator's § 3.5); two subjects
    one section teaches together still find it first."""
    found = [r["riferimento"] for r in course.search("differenza tra VA e VNO?", top_k=3)]
    assert {"2.16", "3.5"} <= set(found[:2])
    assert course.search("differenza tra QNH e QFE?", top_k=1)[0]["riferimento"] == "3.2"
    assert course.search("VA e VNO?", top_k=3) == []  # not compared: both words needed


def test_how_a_thing_is_to_be_used_is_asked_of_the_thing(course):
    """ "come va usato il trim?" found nothing: no section says "usato" with "trim"."""
    assert course.search("come va usato il trim?", top_k=1)[0]["riferimento"] == "2.6"


def test_the_standard_pressure_is_its_figure(course):
    """ "quanto vale la pressione standard?" found the altimeter's errors first ("Lo stesso
    vale", "più fredda dello standard"); the manual gives the figure, 1013,25 hPa: the
    standard atmosphere (§ 5.1)."""
    found = course.search("quanto vale la pressione standard?", top_k=1)
    assert found[0]["riferimento"] == "5.1"


@pytest.mark.parametrize("query", ["cos'è la derapata?", "cos'è la scivolata?"])
def test_a_slip_or_a_skid_is_the_ball_of_the_slip_indicator(course, query):
    """The spin's section (§ 1.13, "da una virata in derapata") and the dihedral's (§ 2.10,
    "scivola verso l'ala bassa") came first; § 3.9 says what each is."""
    assert course.search(query, top_k=1)[0]["riferimento"] == "3.9"


def test_the_best_climb_and_glide_are_the_manuals_maximum_rate_and_efficiency(course):
    """ "miglior salita" found the fixed-pitch propeller first ("rendimento migliore", "in
    salita"), "miglior planata" the engine failure's "velocità di planata"."""
    climb = course.search("qual è la velocità di miglior salita?", top_k=1)
    assert climb[0]["riferimento"] == "9.5"
    glide = course.search("qual è la velocità di miglior planata?", top_k=1)
    assert glide[0]["riferimento"] in {"9.6", "1.10"}


@pytest.mark.parametrize("query", ["come si recupera lo stallo?", "recupero dallo stallo"])
def test_recovering_from_a_stall_is_the_manuals_rimettere(course, query):
    """ "come si recupera?" after the stall found the base-to-final turn's "senza margine di
    recupero" (§ 10.11); § 1.4 says "Per rimettere si riduce l'angolo d'attacco"."""
    assert course.search(query, top_k=1)[0]["riferimento"] == "1.4"


def test_losing_power_is_not_losing_ones_way(course):
    """ "perde" and "perdo" are one stem: "perdo" meant the uncertainty of position, and "il
    motore perde potenza in quota" found the wind shear ("perdita di velocità", "potenza")."""
    found = [r["riferimento"] for r in course.search("perché il motore perde potenza in quota?")]
    assert "4.4" in found[:2] and "6.15" not in found and found[0] != "5.14"

"""The rules that read what a student says about themselves, and the request to forget it."""

from __future__ import annotations

import time

import pytest

from aircoach.memory.extract import (
    MAX_FACT_CHARS,
    Fact,
    ForgetRequest,
    asks_to_forget,
    carries_credential,
    facts,
    forget_request,
    without_facts,
)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Ciao, studio per il VDS", [Fact("goal", "VDS")]),
        ("mi sto preparando per la licenza PPL", [Fact("goal", "licenza ppl")]),
        ("ho l'esame a marzo", [Fact("exam", "a marzo")]),
        ("Sostengo l'esame teorico tra due settimane", [Fact("exam", "tra due settimane")]),
        ("faccio fatica con la meteo", [Fact("difficulty", "meteo")]),
        ("Ho difficoltà con la navigazione e con la radio", [Fact("difficulty", "navigazione")]),
        (
            "Studio per il PPL, ho l'esame a giugno e faccio fatica con la meteorologia",
            [Fact("goal", "PPL"), Fact("exam", "a giugno"), Fact("difficulty", "meteorologia")],
        ),
    ],
)
def test_what_a_student_says_about_themselves_is_read(message, expected):
    assert facts(message) == expected


@pytest.mark.parametrize(
    "message",
    [
        "Cos'è lo stallo?",
        "Come si regola l'altimetro con il QNH?",
        "Cosa si studia per l'esame?",
        "quali domande ci sono all'esame teorico?",
        "",
    ],
)
def test_a_theory_question_says_nothing_about_the_student(message):
    assert facts(message) == []


@pytest.mark.parametrize(
    ("message", "kinds", "rest"),
    [
        ("Ho l'esame a marzo, spiegami il QNH", ("exam",), "spiegami il qnh"),
        ("Studio per il PPL: cos'è il QNH?", ("goal", "exam"), "cos'e il qnh?"),
        (
            "Ho l'esame a marzo e faccio fatica con la meteo",
            ("goal", "exam"),
            "e faccio fatica con la meteo",
        ),
        ("Ho l'esame a marzo e faccio fatica con la meteo", ("exam", "difficulty"), "e"),
        (
            "ho problemi con il QNH, me lo spieghi?",
            ("goal", "exam"),
            "ho problemi con il qnh, me lo spieghi?",
        ),
        ("Cos'è il QNH?", ("goal", "exam", "difficulty"), "cos'e il qnh?"),
    ],
)
def test_what_a_message_asks_besides_what_it_says_of_the_student(message, kinds, rest):
    assert without_facts(message, kinds) == rest


def test_a_fact_is_short_and_reads_as_the_prompt_shows_it():
    [fact] = facts("faccio fatica con " + "la meteorologia dei fronti " * 20)
    assert len(fact.value) <= MAX_FACT_CHARS
    assert Fact("goal", "VDS").text == "Studia per: VDS"


@pytest.mark.parametrize(
    ("message", "forget"),
    [
        ("dimentica quello che ti ho detto", True),
        ("Dimenticati di me", True),
        ("cancella la mia memoria", True),
        ("scordati tutto", True),
        ("non dimenticare il QNH prima dell'atterraggio", False),
        ("cosa succede se dimentico la miscela ricca?", False),
        ("Ciao, cancella i miei dati", True),
        ("Grazie! E ora dimentica tutto, per favore", True),
        ("ok. Per favore scordati di me", True),
        # The same verbs in a question about flying: a third person, not a request to the coach.
        ("Se la torre cancella tutto il piano di volo cosa devo fare?", False),
        ("Cosa succede se il controllore cancella quanto autorizzato?", False),
        ("Il pilota che dimentica tutto la checklist cosa rischia?", False),
        ("la pioggia cancella tutto sul parabrezza?", False),
    ],
)
def test_a_request_to_forget_is_recognised(message, forget):
    assert asks_to_forget(message) is forget


@pytest.mark.parametrize(
    ("message", "about"),
    [
        ("dimentica quello che ti ho detto", None),
        ("Dimentica tutto su di me", None),
        ("Dimentica quello che ho detto sul QNH", "QNH"),
        ("cancella tutto riguardo all'esame", "esame"),
        ("scordati quello che sai sulla meteo in montagna, grazie", "meteo in montagna"),
        ("dimentica quanto ti ho detto sul VDS e ricominciamo", "VDS"),
        (
            "ok, dimentica quello che ti ho chiesto a proposito del vento al traverso",
            "vento al traverso",
        ),
        ("dimentica tutto sull'altimetro", "altimetro"),
        # The topic as the verb's object (they were no request to forget).
        ("dimentica l'esame", "esame"),
        ("ok, scordati della LAPL", "LAPL"),
        ("Dimentica il QNH, grazie", "QNH"),
    ],
)
def test_a_request_to_forget_may_name_what_to_forget(message, about):
    assert forget_request(message) == ForgetRequest(about)


def test_the_rules_are_linear_in_the_text():
    hostile = "faccio fatica con " + "a " * 50_000 + "ho l'esame " * 5_000
    started = time.perf_counter()
    facts(hostile)
    asks_to_forget(hostile)
    forget_request("dimentica tutto sul " + "vento " * 50_000)
    carries_credential(hostile)
    carries_credential("eyJ" + "a" * 100_000)
    assert time.perf_counter() - started < 2.0

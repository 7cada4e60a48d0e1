"""Reading a student's answer: letters however written, options by their text."""

from __future__ import annotations

import time

import pytest

from aircoach.quiz.answers import read_answer, read_letter, read_numbered_answers, read_option

OPTIONS = {
    "a": "raddoppia",
    "b": "si dimezza",
    "c": "quadruplica",
    "d": "resta invariata",
}


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("c", "c"),
        ("C", "c"),
        ("c)", "c"),
        ("(b)", "b"),
        ("la b", "b"),
        ("La B.", "b"),
        ("risposta: a", "a"),
        ("Risposta C", "c"),
        ("è la d", "d"),
        ("direi la a", "a"),
        ("secondo me è la c!", "c"),
        ("lettera b", "b"),
        ("e", "e"),  # a letter, though not an option here: the grader says so
        ("la e", "e"),
        # "è" (folded to "e", also the conjunction) beside a letter is a word, not a letter
        ("la c è giusta", "c"),
        ("c è la risposta giusta", "c"),
        ("la b è corretta", "b"),
        ("la b e' corretta", "b"),
        ("sono sicuro: c", "c"),
        ("la risposta giusta è la d", "d"),
        ("c, la c", "c"),  # the same letter twice
        # an option by its place: "la seconda" was searched in the manual ("per un secondo")
        ("la seconda", "b"),
        ("la prima è giusta", "a"),
        ("direi la terza", "c"),
        ("Quarta.", "d"),
        # a doubt said first (each was searched in the manual)
        ("non sono sicuro, c", "c"),
        ("non so, direi b", "b"),
        ("mmm c", "c"),
        ("non ne sono sicura: la a", "a"),
    ],
)
def test_letters_however_written(text, letter):
    assert read_letter(text) == letter
    assert read_answer(text, OPTIONS) == letter


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("quadruplica", "c"),
        ("Si dimezza.", "b"),
        ("penso che quadruplica", "c"),
        ("la portanza resta invariata", "d"),
        ("resta sempre invariata", "d"),  # most of the option's words
        ("c) quadruplica", "c"),  # its letter and its text agree
        ("la c, quadruplica", "c"),
    ],
)
def test_options_by_their_text(text, letter):
    assert read_letter(text) is None
    assert read_option(text, OPTIONS) == letter
    assert read_answer(text, OPTIONS) == letter


@pytest.mark.parametrize(
    "text",
    [
        "Cos'è la portanza?",
        "non lo so",
        "raddoppia o quadruplica",  # two options: not one answer
        "c e poi d",
        "a o c?",  # two different letters: not one answer
        "la a o la c",
        "b e c",
        "la c è giusta, la a",
        "la seconda o la terza",
        "la prima legge",
        "non è la c",  # not c: a doubt is not a "non" before the letter
        # a letter and another option's text: graded as the text's option (c, right)
        "a) quadruplica",
        "la a: quadruplica",
        "risposta a, cioè quadruplica",
        "c) raddoppia",
        "non so",
        "",
        "   ",
    ],
)
def test_what_is_not_an_answer(text):
    assert read_answer(text, OPTIONS) is None


@pytest.mark.parametrize(
    "text",
    [
        "3 e " * 1000,
        "3, " * 1333,
        "3 e’ " * 800,
        "3 e 3 non lo " * 300,
        "3 -" + " " * 4000 + "x",
        "la 3 è " * 570,
        "3 la la la " * 360,
        "1 da b a " * 440,
        "3 -> " * 800,
    ],
    ids=["and", "commas", "apostrophes", "dont-know", "spaces", "verbs", "words", "from", "arrows"],
)
def test_a_long_message_of_numbers_reads_at_once(text: str):
    """A 4,000-character message is read in linear time (no regex backtracking over the
    numbers: a list of numbers before one answer has a bounded length). The bound is far
    above the milliseconds it takes, so a busy machine never fails it."""
    start = time.perf_counter()
    read_numbered_answers(text)
    assert time.perf_counter() - start < 1.0


def test_a_one_letter_word_of_the_option_itself_names_no_other_letter():
    sides = {"a": "a destra", "b": "in alto", "c": "in basso", "d": "a sinistra"}
    assert read_answer("a sinistra", sides) == "d"
    assert read_answer("d) a sinistra", sides) == "d"
    assert read_answer("b) a sinistra", sides) is None

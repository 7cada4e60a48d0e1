"""The shipped question bank: enough well-formed questions per chapter for a mock exam, keys
spread over the letters, no repeats, and every key backed by the manual section it names."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from aircoach.knowledge.manual import Section, parse_manual
from aircoach.quiz.bank import CHAPTERS, DEMO_QUESTIONS, SeededBank
from aircoach.quiz.service import public
from aircoach.store.sqlite import SqliteQuizStore
from aircoach.text import fold, stem, words
from tests.helpers import chat, services_of, shipped_docs
from tests.scripted_model import call, text

BANK: dict[str, Any] = json.loads(DEMO_QUESTIONS.read_text("utf-8"))
QUESTIONS: list[dict[str, Any]] = BANK["questions"]
SECTIONS: dict[str, Section] = {s.id: s for s in parse_manual(shipped_docs())}

MIN_PER_CHAPTER = 30
DIFFICULTIES = {"facile", "media", "difficile"}
FIELDS = {"capitolo", "numero", "argomento", "difficolta", "testo", "risposte", "corretta"}
FIELDS |= {"spiegazione", "riferimento"}
# A letter's share of a chapter's keys: an even spread is 25%; 30 questions with one letter
# on 10 of them (33%) or on 5 (17%) is a skew.
KEY_SHARE = (0.2, 0.3)
# The share of a key's content words (stemmed, accents ignored) found in its section: every
# question meets it (the lowest is 2/3: "ridurre" does not meet "riduce"); pointed at the
# next section of their chapter, 97% of the keys fall below it.
SUPPORT = 0.65


def _stems(text: str) -> set[str]:
    return {stem(w) for w in words(text)}


def _key(question: dict[str, Any]) -> str:
    return f"{question['capitolo']}.{question['numero']}"


def test_every_question_is_well_formed():
    bad = []
    for q in QUESTIONS:
        options = q.get("risposte")
        checks = {
            "fields": set(q) == FIELDS,
            "capitolo": type(q.get("capitolo")) is int and q["capitolo"] in CHAPTERS,
            "numero": type(q.get("numero")) is int and q["numero"] >= 1,
            "texts": all(
                isinstance(q.get(name), str) and q[name].strip() == q[name] != ""
                for name in ("argomento", "testo", "spiegazione")
            ),
            "options": isinstance(options, dict)
            and list(options) == ["a", "b", "c", "d"]
            and all(isinstance(v, str) and v.strip() for v in options.values())
            and len({fold(v).strip() for v in options.values()}) == 4,
            "corretta": isinstance(options, dict) and q.get("corretta") in options,
            "difficolta": q.get("difficolta") in DIFFICULTIES,
            "riferimento": isinstance(q.get("riferimento"), str)
            and re.fullmatch(rf"{q.get('capitolo')}\.\d+", q["riferimento"]) is not None,
        }
        bad += [(_key(q), name) for name, ok in checks.items() if not ok]
    assert not bad, bad


def test_what_clients_see_never_names_the_key_fields():
    """`corretta` and `spiegazione` anywhere in a text, a topic or an option would defeat the
    key-leak checks, which look for them in every response before a grading."""
    leaking = [
        _key(q)
        for q in QUESTIONS
        for text in (q["testo"], q["argomento"], *q["risposte"].values())
        if "corretta" in fold(text) or "spiegazione" in fold(text)
    ]
    assert not leaking, leaking


def test_each_chapter_can_carry_an_exam_with_unique_numbers():
    per_chapter = Counter(q["capitolo"] for q in QUESTIONS)
    assert set(per_chapter) == set(CHAPTERS)
    assert min(per_chapter.values()) >= MIN_PER_CHAPTER, per_chapter
    ids = [(q["capitolo"], q["numero"]) for q in QUESTIONS]
    assert len(ids) == len(set(ids))
    assert {int(n) for n in BANK["chapters"]} == set(CHAPTERS)


def test_every_difficulty_is_used_in_every_chapter():
    for chapter in CHAPTERS:
        used = {q["difficolta"] for q in QUESTIONS if q["capitolo"] == chapter}
        assert used == DIFFICULTIES, chapter


def test_keys_are_spread_over_the_letters_in_every_chapter():
    low, high = KEY_SHARE
    skewed = {}
    for chapter in CHAPTERS:
        keys = Counter(q["corretta"] for q in QUESTIONS if q["capitolo"] == chapter)
        total = sum(keys.values())
        shares = {letter: keys[letter] / total for letter in "abcd"}
        if not all(low <= share <= high for share in shares.values()):
            skewed[chapter] = dict(keys)
    assert not skewed, skewed


def test_no_two_questions_are_the_same():
    texts = Counter(" ".join(words(q["testo"])) for q in QUESTIONS)
    assert [t for t, n in texts.items() if n > 1] == []
    # Nor the same question reworded around the same answer.
    asked = Counter(
        (frozenset(_stems(q["testo"])), frozenset(_stems(q["risposte"][q["corretta"]])))
        for q in QUESTIONS
    )
    assert [a for a, n in asked.items() if n > 1] == []


def test_every_reference_is_a_section_of_the_manual():
    missing = [(_key(q), q["riferimento"]) for q in QUESTIONS if q["riferimento"] not in SECTIONS]
    assert not missing, missing


def key_support(question: dict[str, Any], section: Section) -> float:
    """The share of the key option's content words (stemmed) that occur in the section."""
    key = _stems(question["risposte"][question["corretta"]])
    return len(key & _stems(f"{section.title} {section.text}")) / len(key)


def test_every_key_has_content_words():
    empty = [_key(q) for q in QUESTIONS if not _stems(q["risposte"][q["corretta"]])]
    assert not empty, empty


def test_each_key_is_supported_by_its_section():
    weak = {
        _key(q): round(support, 2)
        for q in QUESTIONS
        if (support := key_support(q, SECTIONS[q["riferimento"]])) < SUPPORT
    }
    assert not weak, weak


def test_the_support_check_catches_a_wrong_reference():
    """Pointed at the next section of its chapter, nearly every key loses its support: the
    check tells a right reference from a wrong one."""
    by_chapter: dict[int, list[str]] = {}
    for section_id in SECTIONS:
        by_chapter.setdefault(SECTIONS[section_id].capitolo, []).append(section_id)
    moved = []
    for q in QUESTIONS:
        ids = by_chapter[q["capitolo"]]
        wrong = ids[(ids.index(q["riferimento"]) + 1) % len(ids)]
        moved.append(key_support(q, SECTIONS[wrong]) >= SUPPORT)
    assert sum(moved) / len(moved) < 0.1


async def test_a_stored_question_keeps_its_reference_and_clients_do_not_see_it(bank_file):
    question = await SqliteQuizStore(bank_file).by_chapter_and_number(3, 7)
    assert question is not None and question["riferimento"] == "3.5"
    assert "riferimento" not in public(question) and "corretta" not in public(question)


async def test_the_bank_is_loaded_the_first_time_a_question_is_read(tmp_path):
    store = SqliteQuizStore(tmp_path / "quiz.sqlite3")
    bank = SeededBank(store)
    assert await store.count() == 0  # made, not yet read: nothing loaded
    question = await bank.by_chapter_and_number(1, 1)
    assert question is not None and question["testo"] == QUESTIONS[0]["testo"]
    assert await store.count() == len(QUESTIONS)
    assert await SeededBank(store).upsert_questions(QUESTIONS[:1]) == 1  # full: no reload


async def test_a_theory_turn_never_loads_the_bank_a_quiz_turn_does(app, client, auth, script):
    quiz = services_of(app).quiz
    script([text("La portanza dipende dalla velocità.")])
    assert (await chat(client, auth(), "Che cos'è la portanza?"))[-1]["status"] == "ok"
    assert await quiz.count() == 0
    script([call("domanda_teoria", capitolo=2)])
    events = await chat(client, auth(), "Una domanda del capitolo 2")
    assert events[0]["data"]["question"]["capitolo"] == 2
    assert await quiz.count() == len(QUESTIONS)

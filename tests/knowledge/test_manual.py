"""The course manual: one file per quiz chapter, short sections with stable ids, every topic
of the quiz covered, an area of its own (never the system prompt, never `prompt_version`)."""

from __future__ import annotations

import json
import re

import pytest

from aircoach.errors import ConfigError
from aircoach.knowledge.manual import (
    check_manual,
    manual_docs,
    manual_version,
    parse_chapter,
    parse_manual,
)
from aircoach.prompts.store import build_prompt
from aircoach.quiz.bank import DEMO_QUESTIONS
from aircoach.text import fold, stem, words
from tests.helpers import shipped_docs

BANK = json.loads(DEMO_QUESTIONS.read_text("utf-8"))
MAX_SECTION_CHARS = 1000  # short: a section is an answer, not a lesson


def test_one_file_per_chapter_with_the_quiz_titles():
    sections = parse_manual(shipped_docs())
    chapters = {(s.capitolo, s.materia) for s in sections}
    assert chapters == {(int(n), title) for n, title in BANK["chapters"].items()}
    per_file = {s.doc: s.capitolo for s in sections}
    assert len(per_file) == len(set(per_file.values())) == 10


def test_sections_are_short_with_unique_ids_of_their_chapter():
    sections = parse_manual(shipped_docs())
    ids = [s.id for s in sections]
    assert len(ids) == len(set(ids)) and len(ids) >= 80
    for s in sections:
        assert s.id.split(".")[0] == str(s.capitolo), s.id
        assert 100 <= len(s.text) <= MAX_SECTION_CHARS, s.id
        assert s.title and not s.title.startswith("#")


def test_every_argomento_of_the_quiz_is_covered_by_its_chapter():
    """Each topic's words (stemmed, accents ignored) occur in a section of its chapter."""
    sections = parse_manual(shipped_docs())
    stems_by_chapter: dict[int, set[str]] = {}
    for s in sections:
        stems_by_chapter.setdefault(s.capitolo, set()).update(
            stem(w) for w in words(f"{s.title} {s.text}")
        )
    missing = []
    for q in BANK["questions"]:
        topic = {stem(w) for w in words(q["argomento"])}
        if not topic <= stems_by_chapter[q["capitolo"]]:
            missing.append((q["capitolo"], q["argomento"]))
    assert not missing, sorted(set(missing))


def test_regulation_references_appear_where_the_text_needs_them():
    text = fold(" ".join(s.text for s in parse_manual(shipped_docs())))
    for reference in ("sera.", "parte fcl", "icao annesso", "regolamento (ue)"):
        assert reference in text, reference


def test_the_manual_is_its_own_area_never_the_prompt():
    docs = shipped_docs()
    prompt, version = build_prompt(docs)
    assert "Capitolo 3" not in prompt and "QFE" not in prompt
    edited = {
        **docs,
        "manual/03_strumenti.md": docs["manual/03_strumenti.md"] + "\n\n## 3.99 X\n\nNuovo.",
    }
    assert build_prompt(edited) == (prompt, version)  # prompt_version unchanged
    assert manual_version(edited) != manual_version(docs) is not None
    assert manual_version({"00_ruolo.md": "x"}) is None
    assert set(manual_docs(docs)) == {
        k.removeprefix("manual/") for k in docs if k.startswith("manual/")
    }


def test_a_chapter_is_parsed_into_sections_and_a_stray_file_into_none():
    text = "# Capitolo 4 — Motore ed eliche\n\nIntro.\n\n## 4.1 Il ciclo\n\nQuattro\ntempi.\n\n## 4.2 Vuoto\n\n## 4.3 Magneti\n\nDue magneti."
    sections = parse_chapter("04.md", text)
    assert [(s.id, s.title, s.text) for s in sections] == [
        ("4.1", "Il ciclo", "Quattro tempi."),
        ("4.3", "Magneti", "Due magneti."),
    ]
    assert sections[0].capitolo == 4 and sections[0].materia == "Motore ed eliche"
    assert parse_chapter("README.md", "# Come scrivere il manuale\n\n## 1.1 No") == []
    assert re.fullmatch(r"\d+\.\d+", sections[1].id)


def test_the_shipped_manual_passes_its_check():
    check_manual(shipped_docs())


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        (
            {
                "manual/03.md": "# Capitolo 3 — Strumenti\n\n## 3.1 A\n\nUno.\n\n## 3.1 B\n\nDue.",
            },
            "section '3.1' appears twice (manual/03.md, manual/03.md)",
        ),
        (
            {
                "manual/03.md": "# Capitolo 3 — Strumenti\n\n## 3.1 A\n\nUno.",
                "manual/03b.md": "# Capitolo 3 — Strumenti\n\n## 3.1 B\n\nDue.",
            },
            "section '3.1' appears twice (manual/03.md, manual/03b.md)",
        ),
        (
            {"manual/03.md": "# Capitolo 3 — Strumenti\n\n## 5.1 Meteo\n\nUno."},
            "section '5.1' is in chapter 3 (manual/03.md)",
        ),
        (
            {"manual/01.md": "# Capitolo 1 — Aerodinamica\n\n## 1.130 Lunga\n\nUno."},
            "section '1.130' (manual/01.md): an id is two numbers of one or two digits",
        ),
        (
            # `GET /api/manual/sections/1.1` serves `1.01` too: the manual writes it once.
            {"manual/01.md": "# Capitolo 1 — Aerodinamica\n\n## 1.01 Zero\n\nUno."},
            "section '1.01' (manual/01.md): write it '1.1', without a leading zero",
        ),
    ],
)
def test_a_manual_whose_citations_would_be_ambiguous_is_refused_naming_the_section(files, problem):
    with pytest.raises(ConfigError) as raised:
        check_manual(files)
    assert problem in str(raised.value)

"""The guard's verdicts, its messages and the docs' part of its context."""

from __future__ import annotations

from aircoach.grounding.context import _docs_index, docs_sources
from aircoach.grounding.guard import MAX_CITATIONS, ContextIndex, Source, caveat, check, correction

PASSAGE = Source("tool", "kb", "La Legge n. 199/2025, art. 1, commi da 231 a 252, lettera a).")


def test_the_seeds_case_is_caught_and_its_variants_are_not():
    context = ContextIndex.of([PASSAGE])
    wrong = check("È la Legge 197/2022.", context)
    assert wrong is not None and wrong.unverified == ["Legge 197/2022"]
    for written in ("L. 199/2025", "Legge 30 dicembre 2025 n. 199", "legge n. 199 del 2025"):
        result = check(f"Lo prevede la {written}.", context)
        assert result is not None and result.unverified == [], written


def test_structure_must_be_in_the_source_for_that_act():
    context = ContextIndex.of([PASSAGE, Source("docs", "d", "art. 3 del D.Lgs. 81/2008")])
    ok = check("Art. 1, comma 235 della L. 199/2025.", context)
    assert ok is not None and ok.unverified == []
    wrong = check("Art. 3 della L. 199/2025.", context)
    assert wrong is not None and wrong.unverified == ["Art. 3 della L. 199/2025"]


def test_no_citation_no_result_and_each_key_once():
    context = ContextIndex.of([PASSAGE])
    assert check("Nessun riferimento qui.", context) is None
    result = check("L. 199/2025 e poi di nuovo Legge n. 199/2025.", context)
    assert result is not None and [c.key for c in result.citations] == ["legge 199/2025"]
    many = " ".join(f"SERA.{5000 + n}" for n in range(MAX_CITATIONS + 5))
    bounded = check(many, context)
    assert bounded is not None and len(bounded.citations) == MAX_CITATIONS


def test_the_caveat_and_the_correction_are_italian_and_name_the_citations():
    assert caveat(["SERA.5010"]) == (
        "\n\nAttenzione: non trovo conferma nelle fonti per SERA.5010; "
        "verifica con il tuo istruttore."
    )
    assert "SERA.5010 e FCL.999" in caveat(["SERA.5010", "FCL.999"])
    assert "altri 2 riferimenti" in caveat([f"SERA.50{n}" for n in range(10, 17)])
    context = ContextIndex.of([PASSAGE])
    result = check("È la Legge 197/2022.", context)
    assert result is not None
    text = correction(result, context)
    assert "Legge 197/2022" in text and "Le fonti citano invece: Legge n. 199/2025" in text
    empty = correction(result, ContextIndex())
    assert "non citano alcun riferimento normativo" in empty


def test_the_docs_context_is_the_prompt_docs_and_the_manual_only():
    contents = {
        "00_ruolo.md": "Vedi la SERA.5005.",
        "tools.json": "{}",
        "manual/cap1/01.md": "Il Reg. (UE) n. 923/2012.",
        "tasks/email_triage/prompt.md": "La Legge 197/2022.",
    }
    assert [(s.kind, s.name) for s in docs_sources(contents)] == [
        ("docs", "00_ruolo.md"),
        ("manual", "manual/cap1/01.md"),
    ]
    index = _docs_index(contents)
    assert _docs_index(dict(contents)) is index  # built once per docs version
    result = check("SERA.5005, Reg. UE 923/2012 e Legge 197/2022.", index)
    assert result is not None and result.unverified == ["Legge 197/2022"]

"""Citation extraction and normalisation: every written variant of a citation gets one key."""

from __future__ import annotations

import pytest

from aircoach.grounding.citations import MAX_TEXT_CHARS, extract, year


def keys(text: str) -> list[str]:
    return [c.key for c in extract(text)]


@pytest.mark.parametrize(
    ("written", "key"),
    [
        # leggi
        ("Legge n. 199/2025", "legge 199/2025"),
        ("L. 199/2025", "legge 199/2025"),
        ("l. n. 199/2025", "legge 199/2025"),
        ("Legge 30 dicembre 2025 n. 199", "legge 199/2025"),
        ("legge 30 dicembre 2025, n. 199", "legge 199/2025"),
        ("Legge del 30 dicembre 2025, n. 199", "legge 199/2025"),
        ("legge n. 199 del 30 dicembre 2025", "legge 199/2025"),
        ("legge numero 199 del 2025", "legge 199/2025"),
        ("L. 199 del 2025", "legge 199/2025"),
        ("L. 199/25", "legge 199/2025"),
        ("LEGGE 27 luglio 2000, n. 212", "legge 212/2000"),
        ("legge 1° agosto 2003 n. 200", "legge 200/2003"),
        # decreti
        ("D.Lgs. 81/2008", "d.lgs. 81/2008"),
        ("D. Lgs. n. 81/2008", "d.lgs. 81/2008"),
        ("d.lgs 81/08", "d.lgs. 81/2008"),
        ("Dlgs 81/2008", "d.lgs. 81/2008"),
        ("Decreto Legislativo 81/2008", "d.lgs. 81/2008"),
        ("decreto legislativo 9 aprile 2008, n. 81", "d.lgs. 81/2008"),
        ("D.L. 18/2020", "d.l. 18/2020"),
        ("decreto-legge 17 marzo 2020, n. 18", "d.l. 18/2020"),
        ("DL n. 18/2020", "d.l. 18/2020"),
        ("DPR 633/72", "d.p.r. 633/1972"),
        ("D.P.R. 633/1972", "d.p.r. 633/1972"),
        ("d.P.R. 26 ottobre 1972, n. 633", "d.p.r. 633/1972"),
        ("D. P. R. n. 633 del 1972", "d.p.r. 633/1972"),
        ("Decreto del Presidente della Repubblica 633/1972", "d.p.r. 633/1972"),
        # circolari
        ("Circolare AdE n. 12/E del 2024", "circolare ade 12/e/2024"),
        ("circolare n. 12/E/2024", "circolare ade 12/e/2024"),
        ("circ. 12/E del 14 maggio 2024", "circolare ade 12/e/2024"),
        ("Circolare dell'Agenzia delle Entrate n. 12/E del 2024", "circolare ade 12/e/2024"),
        ("circolare 12/E", "circolare ade 12/e"),
        ("Circolare ENAC", "circolare enac"),
        ("circolare ENAC OPV-19B", "circolare enac opv-19b"),
        ("Circolare ENAC n. 5/2019", "circolare enac 5/2019"),
        # EU regulations
        ("Reg. (UE) n. 923/2012", "reg. ue 923/2012"),
        ("Regolamento (UE) 923/2012", "reg. ue 923/2012"),
        ("Regolamento di esecuzione (UE) n. 923/2012", "reg. ue 923/2012"),
        ("Reg. UE 923/2012", "reg. ue 923/2012"),
        ("Commission Implementing Regulation (EU) No 923/2012", "reg. ue 923/2012"),
        ("Regolamento (UE) 2018/1139", "reg. ue 1139/2018"),
        ("Reg. (UE) 1139/2018", "reg. ue 1139/2018"),
        ("Regolamento delegato (UE) 2020/2034", "reg. ue 2034/2020"),
        ("Reg. (CE) n. 216/2008", "reg. ce 216/2008"),
        ("Regulation (EC) No 216/2008", "reg. ce 216/2008"),
        # EASA rules and Parts
        ("SERA.5005", "sera.5005"),
        ("SERA.5005(f)", "sera.5005(f)"),
        ("SERA.5005 (f)", "sera.5005(f)"),
        ("SERA.5005, lettera f)", "sera.5005(f)"),
        ("FCL.210.A", "fcl.210.a"),
        ("FCL.740.A(b)(1)(ii)", "fcl.740.a(b)(1)(ii)"),
        ("NCO.OP.110", "nco.op.110"),
        ("CAT.POL.A.200", "cat.pol.a.200"),
        ("MED.A.030", "med.a.030"),
        ("Part-FCL", "part-fcl"),
        ("Parte-FCL", "part-fcl"),
        ("Parte FCL", "part-fcl"),
        ("part-NCO", "part-nco"),
        ("Part-M", "part-m"),
        # certification specifications, AMC and GM
        ("CS-23", "cs-23"),
        ("CS 23", "cs-23"),
        ("CS-23.2005", "cs-23.2005"),
        ("CS 23.2005(a)", "cs-23.2005(a)"),
        ("CS-FCD", "cs-fcd"),
        ("AMC1 SERA.5005(f)", "amc1 sera.5005(f)"),
        ("AMC1 SERA.5005 (f)", "amc1 sera.5005(f)"),
        ("GM1 FCL.210.A", "gm1 fcl.210.a"),
        ("GM2 to FCL.210.A", "gm2 fcl.210.a"),
        ("AMC2 NCO.OP.110", "amc2 nco.op.110"),
        ("AMC 20-22", "amc 20-22"),
        # decreti ministeriali
        ("D.M. 1 febbraio 2006", "d.m. 2006-02-01"),
        ("Decreto Ministeriale 1° febbraio 2006", "d.m. 2006-02-01"),
        ("DM del 12 aprile 2022", "d.m. 2022-04-12"),
        ("D.M. n. 55/2022", "d.m. 55/2022"),
        ("D. M. 12 aprile 2022, n. 55", "d.m. 55/2022"),
        # ICAO, AIP, Codice della navigazione
        ("ICAO Annesso 2", "icao annesso 2"),
        ("Annesso 2 ICAO", "icao annesso 2"),
        ("Annex 2", "icao annesso 2"),
        ("allegato 2 ICAO", "icao annesso 2"),
        ("Doc 4444", "icao doc 4444"),
        ("ICAO Doc. 4444", "icao doc 4444"),
        ("AIP ENR 1.4", "aip enr 1.4"),
        ("AIP Italia ENR 1.4", "aip enr 1.4"),
        ("ENR 1.4", "aip enr 1.4"),
        ("AD 2.24", "aip ad 2.24"),
        ("Codice della Navigazione", "cod. nav."),
        ("cod. nav.", "cod. nav."),
        # structure alone
        ("Art. 2-bis", "art. 2-bis"),
        ("articolo 2 bis", "art. 2-bis"),
        ("art.2bis", "art. 2-bis"),
        ("artt. 36-bis e 36-ter", "art. 36-bis,36-ter"),
        ("articoli da 1 a 3", "art. 1-3"),
        ("comma 231", "comma 231"),
        ("commi da 231 a 252", "comma 231-252"),
        ("commi 231-252", "comma 231-252"),
        ("commi 231, 232 e 233", "comma 231,232,233"),
        ("comma 1-bis", "comma 1-bis"),
        ("lettera a)", "lettera a"),
        ("lett. a)", "lettera a"),
        ("lettere a), b) e c)", "lettera a,b,c"),
    ],
)
def test_every_variant_gets_its_canonical_key(written: str, key: str):
    assert keys(f"Secondo {written}, si procede così.") == [key]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            "Art. 1, comma 231, lettera a) della Legge n. 199/2025",
            "legge 199/2025 art. 1 comma 231 lettera a",
        ),
        (
            "comma 231, lettera a), Art. 1 della L. 199/2025",
            "legge 199/2025 art. 1 comma 231 lettera a",
        ),
        ("Legge n. 199/2025, art. 1, commi da 231 a 252", "legge 199/2025 art. 1 comma 231-252"),
        ("art. 743 del Codice della Navigazione", "cod. nav. art. 743"),
        ("art. 743 cod. nav.", "cod. nav. art. 743"),
        ("(artt. 36-bis e 36-ter DPR 600/1973)", "d.p.r. 600/1973 art. 36-bis,36-ter"),
        ("ai sensi dell'art. 2 del D.Lgs. 81/2008", "d.lgs. 81/2008 art. 2"),
        ("l'articolo 4, comma 2, del Reg. (UE) 2018/1139", "reg. ue 1139/2018 art. 4 comma 2"),
        ("SERA.5005 lettera c)", "sera.5005(c)"),
    ],
)
def test_structure_written_beside_an_act_belongs_to_it(text: str, key: str):
    assert keys(text) == [key]


def test_structure_goes_to_the_act_it_names_not_to_its_neighbour():
    text = "La Legge 199/2025 e l'art. 3 del D.Lgs. 81/2008 si applicano."
    assert keys(text) == ["legge 199/2025", "d.lgs. 81/2008 art. 3"]


def test_structure_far_from_any_act_stands_alone():
    text = "La Legge 199/2025 disciplina la definizione agevolata. Le tasse auto rientrano nel comma 231, lettera a)."
    assert keys(text) == ["legge 199/2025", "comma 231 lettera a"]


def test_several_acts_in_one_sentence_are_several_citations():
    text = (
        "Valgono il Reg. (UE) 923/2012, SERA.5005 e la Part-FCL, oltre all'Annesso 2 e al Doc 4444."
    )
    assert keys(text) == [
        "reg. ue 923/2012",
        "sera.5005",
        "part-fcl",
        "icao annesso 2",
        "icao doc 4444",
    ]


def test_a_citation_written_twice_is_found_twice_with_its_own_text():
    found = extract("La L. 199/2025 e poi la Legge n. 199/2025.")
    assert [(c.text, c.key) for c in found] == [
        ("L. 199/2025", "legge 199/2025"),
        ("Legge n. 199/2025", "legge 199/2025"),
    ]


def test_text_and_offsets_point_at_the_citation_as_written():
    text = "Vedi l'art. 1, comma 235, della L. 199/2025 e basta."
    (found,) = extract(text)
    assert text[found.start : found.end] == "art. 1, comma 235, della L. 199/2025"
    assert found.text == "art. 1, comma 235, della L. 199/2025"
    assert found.act == "legge 199/2025"
    assert [p.render() for p in found.parts] == ["art. 1", "comma 235"]


def test_a_rule_names_its_part_and_an_enac_circular_its_family():
    (rule, circular) = extract("FCL.210.A e la circolare ENAC LIC-15")
    assert rule.families == ("part-fcl",)
    assert circular.families == ("circolare enac",)


@pytest.mark.parametrize(
    "text",
    [
        "La portanza nasce dalla differenza di pressione tra dorso e ventre.",
        "In VMC servono 5 km di visibilità e 1500 m dalle nubi sotto FL 100.",
        "Pista 09/27 in uso, QNH 1013; il TAF 12/18 prevede vento da 270.",
        "L'esame è il 12/06/2025 alle 09:30; porta il modulo 2/2024.",
        "La legge e il regolamento europeo lo prevedono; vedi l'articolo precedente.",
        "Ne parla il paragrafo 3.2 del manuale, a pagina 45 del capitolo 3.",
        "Le lettere e i numeri del codice ICAO; la lettera a cui ti riferisci.",
        "La parte media dell'ala e la parte alta del cruscotto.",
        "Un documento di 4444 pagine; ADF e VOR; la legge di bilancio 2026.",
        "La circolare arriverà domani; il regolamento dell'aeroclub è in bacheca.",
        "Il comma successivo e l'art. indicato sopra.",
        "Le regole SERA e la normativa EASA.",
    ],
)
def test_text_that_cites_nothing_gives_nothing(text: str):
    assert extract(text) == []


def test_two_digit_years_pivot():
    assert [year("72"), year("99"), year("31"), year("30"), year("08"), year("2025")] == [
        "1972",
        "1999",
        "1931",
        "2030",
        "2008",
        "2025",
    ]


def test_a_long_citation_text_is_cut():
    text = "Art. 1, commi " + ", ".join(str(n) for n in range(100, 160)) + " della L. 199/2025"
    (found,) = extract(text)
    assert len(found.text) == MAX_TEXT_CHARS and found.text.endswith("…")
    assert found.key.startswith("legge 199/2025 art. 1 comma 100,101,")


def test_a_huge_range_is_kept_as_written():
    (found,) = extract("commi da 1 a 9000")
    assert found.key == "comma 1-9000"
    assert extract("comma 12345") == []  # no act numbers its commi with five digits


def test_extraction_stays_fast_on_a_long_answer():
    import time

    text = (
        "Secondo l'art. 1, comma 231, lettera a) della L. 199/2025 e SERA.5005(f), "
        "la regola vale; 1, 2, 3 e 4 sono numeri, a) b) c) lettere. "
    ) * 300
    started = time.perf_counter()
    found = extract(text)
    # ~45,000 characters; measured ~0.1 s here. The bound only catches a backtracking blow-up.
    assert time.perf_counter() - started < 5
    assert len(found) == 600


def _corpus() -> list[str]:
    """Every string of the grounding tests and their data, the course docs, and each of them
    upper-cased, lower-cased and with the letters `re.IGNORECASE` also takes for i and s."""
    import ast
    from pathlib import Path

    root = Path(__file__).parent
    texts: list[str] = []
    for path in root.rglob("*.py"):
        texts += [
            node.value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
    for path in [*root.rglob("data/*"), *Path("docs").rglob("*.md")]:
        if path.is_file() and path.suffix in (".json", ".md", ".txt", ".jsonl"):
            texts.append(path.read_text())
    variants = [t.upper() for t in texts] + [t.lower() for t in texts]
    variants += [t.replace("i", "ı").replace("s", "ſ") for t in texts]
    variants += [t.replace("i", "İ") for t in texts]
    return texts + variants


@pytest.mark.integration  # every text of the repo, five ways: 1.7 s, and it grows with the repo
def test_a_pattern_is_skipped_only_when_it_cannot_match():
    """`extract` skips a pattern when the text writes none of its words: wherever a pattern
    matches, in every text the tests and the docs hold (and their case variants), one of its
    words is there."""
    from aircoach.grounding.citations import _WORDS, _folded

    matched = 0
    for text in _corpus():
        for pattern, (words, cased) in _WORDS.items():
            if pattern.search(text):
                matched += 1
                written = text if cased else _folded(text)
                assert any(word in written for word in words), (pattern.pattern[:60], text[:200])
    assert matched > 500  # the corpus does exercise the patterns


def test_citations_in_a_long_answer_are_found_as_in_a_short_one():
    short = "Le minime VMC sono nella SERA.5005(f) e nel Reg. (UE) n. 923/2012, art. 2."
    long = "Il QNH si imposta in volo. " * 200 + short
    assert [c.key for c in extract(long)] == [c.key for c in extract(short)]

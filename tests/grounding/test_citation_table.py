"""Every citation checked at its own level, for what it is cited for: one row per citation,
the answer, its context (and question), and the verdict (`None`: verified, else the reason).
Positive rows (verified) and negative ones side by side, so a change that loosens or tightens
the guard shows here."""

from __future__ import annotations

import pytest

from aircoach.grounding.guard import ContextIndex, Source, caveat, check

# The passage: SERA.5001 of Reg. (UE) 923/2012 tied to the VMC minima.
VMC = (
    "SERA.5001 del Reg. (UE) 923/2012: minimi di visibilità e distanza dalle nubi VMC. "
    "Sotto FL 100: visibilità 5 km, distanza dalle nubi 1.500 m in orizzontale e 1.000 ft "
    "in verticale."
)
QNH = "Il QNH standard è 1013,25 hPa (ICAO Annesso 8); si imposta prima del decollo."
LAW = (
    "La Legge n. 199/2025, art. 1, commi da 231 a 252, lettera a), disciplina la definizione "
    "agevolata dei carichi affidati all'agente della riscossione."
)
DLGS = "Il D.Lgs. 81/2008, art. 3, regola la sicurezza sui luoghi di lavoro e la formazione."
FCL = (
    "FCL.210.A: requisiti di esperienza per la licenza PPL(A), 45 ore di volo di cui 10 ore "
    "da solo. AMC1 FCL.210.A(b) descrive il programma di addestramento teorico."
)
CS = "CS-23.2005: categorie di certificazione degli aeroplani per numero di passeggeri e massa."
AMC = "AMC1 SERA.5005(f) chiarisce le quote minime di sorvolo dei centri abitati: 1.000 ft."
# A rule's paragraphs written as markers under its heading, and another rule's `(f)`.
SERA_PARAGRAPHS = (
    "SERA.5005 Regole del volo a vista: minimi di visibilità e distanza dalle nubi.\n"
    "(c) Volo VFR notturno: visibilità al suolo 5 km.\n\n"
    "SERA.5001(f) Condizioni meteorologiche di volo a vista nello spazio aereo."
)
DM = (
    "Il D.M. 1 febbraio 2006 disciplina le aviosuperfici e i campi di volo; il D.M. n. 55/2022 "
    "le tariffe degli esami di licenza."
)
ENAC = "La Circolare ENAC LIC-15 tratta il rilascio delle licenze di pilota e la loro validità."
ICAO = "ICAO Annex 2 - Rules of the Air: regole dell'aria internazionali, tenth edition."
NAV = "L'art. 743 del Codice della Navigazione definisce l'aeromobile come macchina atta al volo."

ROWS: list[tuple[str, str, str, str, str | None]] = [
    # (answer, context, question, key, reason) -- the examples first
    ("Il QNH è definito dal Reg. (UE) 923/2012.", VMC, "", "reg. ue 923/2012", "not_supported"),
    (
        "Le minime VMC sono stabilite dalla SERA.5005.",
        VMC,
        "",
        "sera.5005",
        "article_not_in_context",
    ),
    ("Le minime VMC sono stabilite dalla SERA.5001.", VMC, "", "sera.5001", None),
    ("I minimi VMC sono nel Reg. (UE) 923/2012.", VMC, "", "reg. ue 923/2012", None),
    ("La visibilità in VMC è fissata dalla SERA.5001.", VMC, "", "sera.5001", None),
    ("Lo dice la SERA.5001.", VMC, "Quali sono i minimi VMC?", "sera.5001", None),
    ("Lo dice la SERA.5001.", VMC, "Come si imposta il QNH?", "sera.5001", "not_supported"),
    ("Il QNH si regola secondo la SERA.5001.", VMC, "", "sera.5001", "not_supported"),
    ("La SERA.5001 fissa 1.000 ft dalle nubi in verticale.", VMC, "", "sera.5001", None),
    ("La SERA.5001 fissa 1000 ft dalle nubi in verticale.", VMC, "", "sera.5001", None),
    ("La SERA.5001 fissa 3.000 ft dalle nubi in verticale.", VMC, "", "sera.5001", "contradicts"),
    ("La SERA.5001 chiede 8 km di visibilità in VMC.", VMC, "", "sera.5001", "contradicts"),
    ("La SERA.5001 chiede 5 km di visibilità in VMC.", VMC, "", "sera.5001", None),
    ("La SERA.5001 chiede 1 500 m dalle nubi in VMC.", VMC, "", "sera.5001", None),
    ("La SERA.5001 chiede 600 m dalle nubi in VMC.", VMC, "", "sera.5001", "contradicts"),
    ("La SERA.5001(a) fissa i minimi VMC.", VMC, "", "sera.5001(a)", "article_not_in_context"),
    ("La SERA.5010 fissa i minimi VFR speciali.", VMC, "", "sera.5010", "article_not_in_context"),
    ("La Part-SERA fissa i minimi VMC.", VMC, "", "part-sera", None),
    ("Il QNH standard è 1013 hPa (ICAO Annesso 8).", QNH, "", "icao annesso 8", None),
    ("Il QNH standard è 1013,25 hPa (ICAO Annesso 8).", QNH, "", "icao annesso 8", None),
    ("Il QNH standard è 1012 hPa (ICAO Annesso 8).", QNH, "", "icao annesso 8", "contradicts"),
    ("Il QNH standard è 1013 hPa (ICAO Annesso 3).", QNH, "", "icao annesso 3", "not_in_context"),
    # Italian acts: article, comma, lettera at their level, and the claim's subject
    ("La definizione agevolata è nella L. 199/2025.", LAW, "", "legge 199/2025", None),
    (
        "La definizione agevolata è nella Legge 197/2022.",
        LAW,
        "",
        "legge 197/2022",
        "not_in_context",
    ),
    (
        "La definizione agevolata è all'art. 1, comma 235 della L. 199/2025.",
        LAW,
        "",
        "legge 199/2025 art. 1 comma 235",
        None,
    ),
    (
        "La definizione agevolata è all'art. 1, comma 260 della L. 199/2025.",
        LAW,
        "",
        "legge 199/2025 art. 1 comma 260",
        "article_not_in_context",
    ),
    (
        "La definizione agevolata è all'art. 2 della L. 199/2025.",
        LAW,
        "",
        "legge 199/2025 art. 2",
        "article_not_in_context",
    ),
    (
        "I carichi affidati sono alla lettera b) dell'art. 1 della L. 199/2025.",
        LAW,
        "",
        "legge 199/2025 art. 1 lettera b",
        "article_not_in_context",
    ),
    (
        "È disciplinata dall'art. 1, comma 231, della L. 199/2025.",
        LAW,
        "Che cos'è la definizione agevolata dei carichi?",
        "legge 199/2025 art. 1 comma 231",
        None,
    ),
    (
        "È disciplinata dall'art. 1, comma 231, della L. 199/2025.",
        LAW,
        "Quanto dura la licenza di pilota?",
        "legge 199/2025 art. 1 comma 231",
        "not_supported",
    ),
    (
        "La licenza di pilota scade secondo la L. 199/2025.",
        LAW,
        "",
        "legge 199/2025",
        "not_supported",
    ),
    ("La sicurezza sul lavoro è nel D.Lgs. 81/2008.", DLGS, "", "d.lgs. 81/2008", None),
    ("La sicurezza sul lavoro è nel d.lgs 81/08.", DLGS, "", "d.lgs. 81/2008", None),
    (
        "La sicurezza sul lavoro è all'art. 3 del D.Lgs. 81/2008.",
        DLGS,
        "",
        "d.lgs. 81/2008 art. 3",
        None,
    ),
    (
        "La sicurezza sul lavoro è all'art. 3 della L. 199/2025.",
        f"{LAW}\n\n{DLGS}",
        "",
        "legge 199/2025 art. 3",
        "article_not_in_context",
    ),
    ("La sicurezza sul lavoro è nel D.Lgs. 82/2008.", DLGS, "", "d.lgs. 82/2008", "not_in_context"),
    (
        "La meteorologia aeronautica è nel D.Lgs. 81/2008.",
        DLGS,
        "",
        "d.lgs. 81/2008",
        "not_supported",
    ),
    # EASA rules, points, AMC and GM, CS
    ("La licenza PPL(A) richiede esperienza secondo FCL.210.A.", FCL, "", "fcl.210.a", None),
    ("La PPL(A) richiede 45 ore di volo (FCL.210.A).", FCL, "", "fcl.210.a", None),
    ("La PPL(A) richiede 40 ore di volo (FCL.210.A).", FCL, "", "fcl.210.a", "contradicts"),
    ("La PPL(A) richiede esperienza (FCL.210.B).", FCL, "", "fcl.210.b", "article_not_in_context"),
    ("La licenza PPL(A) è nella Part-FCL.", FCL, "", "part-fcl", None),
    (
        "Il programma teorico della PPL(A) è in AMC1 FCL.210.A(b).",
        FCL,
        "",
        "amc1 fcl.210.a(b)",
        None,
    ),
    (
        "Il programma teorico della PPL(A) è in AMC2 FCL.210.A.",
        FCL,
        "",
        "amc2 fcl.210.a",
        "article_not_in_context",
    ),
    (
        "Il programma teorico della PPL(A) è in GM1 FCL.210.A.",
        FCL,
        "",
        "gm1 fcl.210.a",
        "article_not_in_context",
    ),
    ("Le quote di sorvolo dei centri abitati sono in SERA.5005(f).", AMC, "", "sera.5005(f)", None),
    (
        "Le quote di sorvolo dei centri abitati sono in AMC1 SERA.5005(f).",
        AMC,
        "",
        "amc1 sera.5005(f)",
        None,
    ),
    (
        "Le quote di sorvolo dei centri abitati sono in AMC1 SERA.5005 (f): 2.000 ft.",
        AMC,
        "",
        "amc1 sera.5005(f)",
        "contradicts",
    ),
    (
        "Le quote di sorvolo dei centri abitati sono in GM1 SERA.5005(f).",
        AMC,
        "",
        "gm1 sera.5005(f)",
        "article_not_in_context",
    ),
    # A paragraph the source does not write for the rule: its marker counts only in the
    # rule's own passage, standing alone (not inside `PPL(A)`, not as another rule's `(f)`).
    (
        "I requisiti di esperienza della licenza PPL sono in FCL.210.A(a).",
        FCL,
        "",
        "fcl.210.a(a)",
        "article_not_in_context",
    ),
    (
        "I minimi VFR di visibilità e distanza dalle nubi sono in SERA.5005(f).",
        SERA_PARAGRAPHS,
        "",
        "sera.5005(f)",
        "article_not_in_context",
    ),
    (
        "Le quote minime di sorvolo delle aree congestionate sono in SERA.5005(f)(1).",
        "SERA.5005(f) Quote minime di sorvolo: (1) sopra le aree congestionate 1.000 ft.",
        "",
        "sera.5005(f)(1)",
        None,
    ),
    (
        "Il volo VFR notturno richiede 5 km di visibilità al suolo (SERA.5005(c)).",
        SERA_PARAGRAPHS,
        "",
        "sera.5005(c)",
        None,
    ),
    ("Le categorie di certificazione sono nella CS-23.", CS, "", "cs-23", None),
    ("Le categorie di certificazione sono in CS 23.2005.", CS, "", "cs-23.2005", None),
    (
        "Le categorie di certificazione sono in CS-23.2010.",
        CS,
        "",
        "cs-23.2010",
        "article_not_in_context",
    ),
    ("Le categorie di certificazione sono nella CS-25.", CS, "", "cs-25", "not_in_context"),
    # D.M., circolari, ICAO, Codice della navigazione
    ("Le aviosuperfici sono nel D.M. 1 febbraio 2006.", DM, "", "d.m. 2006-02-01", None),
    (
        "Le aviosuperfici sono nel Decreto Ministeriale 1° febbraio 2006.",
        DM,
        "",
        "d.m. 2006-02-01",
        None,
    ),
    ("Le aviosuperfici sono nel D.M. 8 agosto 2003.", DM, "", "d.m. 2003-08-08", "not_in_context"),
    ("Le tariffe degli esami di licenza sono nel DM n. 55/2022.", DM, "", "d.m. 55/2022", None),
    ("Le tariffe degli esami sono nel D.M. 56/2022.", DM, "", "d.m. 56/2022", "not_in_context"),
    (
        "Il rilascio delle licenze è nella Circolare ENAC LIC-15.",
        ENAC,
        "",
        "circolare enac lic-15",
        None,
    ),
    ("Il rilascio delle licenze è in una Circolare ENAC.", ENAC, "", "circolare enac", None),
    (
        "Il rilascio delle licenze è nella Circolare ENAC LIC-16.",
        ENAC,
        "",
        "circolare enac lic-16",
        "not_in_context",
    ),
    (
        "Le regole dell'aria internazionali sono nell'ICAO Annesso 2.",
        ICAO,
        "",
        "icao annesso 2",
        None,
    ),
    (
        "Le regole dell'aria internazionali sono nell'Annesso 11.",
        ICAO,
        "",
        "icao annesso 11",
        "not_in_context",
    ),
    ("L'aeromobile è definito all'art. 743 cod. nav.", NAV, "", "cod. nav. art. 743", None),
    (
        "L'aeromobile è definito all'art. 744 del Codice della Navigazione.",
        NAV,
        "",
        "cod. nav. art. 744",
        "article_not_in_context",
    ),
    # A bare title in the source: nothing to compare the subject with, the name is enough.
    (
        "Le scuole di volo applicano il D.Lgs. 81/2008.",
        "D.Lgs. 81/2008",
        "",
        "d.lgs. 81/2008",
        None,
    ),
    # A structure alone, at its level
    (
        "Rientra nel comma 240.",
        LAW,
        "Che cosa prevede la definizione agevolata?",
        "comma 240",
        None,
    ),
    ("Rientra nel comma 300.", LAW, "", "comma 300", "article_not_in_context"),
]


@pytest.mark.parametrize(("answer", "context", "question", "key", "reason"), ROWS)
def test_each_citation_gets_its_verdict_and_reason(
    answer: str, context: str, question: str, key: str, reason: str | None
):
    result = check(answer, ContextIndex.of([Source("tool", "kb", context)]), question)
    assert result is not None
    (found,) = [c for c in result.citations if c.key == key]
    assert (found.verified, found.reason) == (reason is None, reason)
    assert (found.text in result.unverified) == (reason is not None)
    # The sentence that cites it, as offsets in the answer.
    assert found.sentence is not None
    assert found.text in answer[found.sentence.start : found.sentence.end]


def test_the_table_is_large_and_balanced():
    reasons = [row[4] for row in ROWS]
    assert len(ROWS) >= 60
    assert reasons.count(None) >= 25
    for reason in ("not_in_context", "article_not_in_context", "not_supported", "contradicts"):
        assert reasons.count(reason) >= 5, reason


def test_the_sentence_is_the_one_that_cites_in_a_longer_answer():
    answer = (
        "Ciao! Ecco la risposta. I minimi VMC sono stabiliti dal Reg. (UE) 923/2012. "
        "Il QNH invece si imposta prima del decollo secondo la SERA.5010; buon volo!"
    )
    result = check(answer, ContextIndex.of([Source("tool", "kb", VMC)]))
    assert result is not None
    spans = {
        c.key: answer[c.sentence.start : c.sentence.end] for c in result.citations if c.sentence
    }
    assert spans == {
        "reg. ue 923/2012": "I minimi VMC sono stabiliti dal Reg. (UE) 923/2012.",
        "sera.5010": "Il QNH invece si imposta prima del decollo secondo la SERA.5010;",
    }


def test_the_caveat_says_what_the_source_says():
    answer = (
        "La SERA.5001 fissa 3.000 ft dalle nubi in verticale. Il QNH è nel Reg. (UE) 923/2012. "
        "Vedi anche la SERA.5010."
    )
    result = check(answer, ContextIndex.of([Source("tool", "kb", VMC)]))
    assert result is not None
    assert [(c.key, c.reason, c.source_says) for c in result.citations] == [
        ("sera.5001", "contradicts", ["1.000 ft"]),
        ("reg. ue 923/2012", "not_supported", []),
        ("sera.5010", "article_not_in_context", []),
    ]
    assert caveat(result) == (
        "\n\nAttenzione: non trovo conferma nelle fonti per SERA.5010; le fonti citano "
        "Reg. (UE) 923/2012, ma non per quanto affermato qui; per SERA.5001 la fonte indica "
        "1.000 ft; verifica con il tuo istruttore."
    )


def test_the_check_stays_linear_in_the_answers_length():
    import time

    context = ContextIndex.of([Source("tool", "kb", VMC)])
    sentence = "La SERA.5001 fissa 1.000 ft dalle nubi e 5 km di visibilità in VMC. "
    timings = []
    for repeat in (200, 2000):
        started = time.perf_counter()
        check(sentence * repeat + "x" * (repeat * 50), context)
        timings.append(time.perf_counter() - started)
    # Ten times the text: far below the hundredfold a quadratic check would take.
    assert timings[1] < timings[0] * 30 + 0.5

"""The four stages and the two verifiers on the triage task: parse and schema (generic),
business rules, evidence and keyword verifiers (hard), quality checks (warnings and a
deterministic clean-up)."""

from __future__ import annotations

import copy
import json

import pytest

from aircoach.tasks.triage_offline import OFFLINE_MODEL
from aircoach.tasks.validation import StageFailure, parse_stage, schema_stage
from tests.tasks.conftest import email, prepare

BODY = (
    "Buongiorno, vorrei prenotare una lezione di volo per sabato mattina.\n"
    "Inoltre non ho ricevuto la fattura di marzo."
)


@pytest.fixture
def prepared(kind, triage):
    return prepare(kind, triage, email(BODY, "Prenotazione e fattura"))


def candidate(prepared, term: str) -> dict[str, str]:
    for c in prepared.context.candidates.values():
        if c.term == term and c.source == "body":
            return {"candidate_id": c.candidate_id, "term": c.term}
    raise AssertionError(f"no candidate {term!r}")


def answer(prepared, **changes) -> dict:
    data = {
        "topics": [
            {
                "label": "PRENOTAZIONE_VOLO",
                "confidence": 0.9,
                "keywords": [candidate(prepared, "lezione di volo")],
                "evidence": [{"quote": "vorrei prenotare una lezione di volo per sabato mattina"}],
            },
            {
                "label": "PAGAMENTO",
                "confidence": 0.7,
                "keywords": [candidate(prepared, "fattura")],
                "evidence": [{"quote": "non ho ricevuto la fattura di marzo"}],
            },
        ],
        "sentiment": {"value": "neutral", "confidence": 0.8},
        "language": "it",
        "priority": {"value": "medium", "confidence": 0.6, "signals": ["sabato mattina"]},
    }
    data.update(changes)
    return data


def test_a_good_answer_passes_every_stage_without_warnings(kind, triage, prepared):
    data = answer(prepared)
    schema_stage(triage, data)
    checked = kind.check(triage, prepared, data)
    assert checked.warnings == []
    keyword = checked.output["topics"][0]["keywords"][0]
    assert keyword["term"] == "lezione di volo" and keyword["source"] == "body"
    assert keyword["count"] == 1  # enriched from the candidate


def test_parse_stage():
    assert parse_stage('```json\n{"a": 1}\n```') == {"a": 1}
    for raw, code in [("", "empty"), ("{'a': 1}", "invalid_json"), ('{"a": 1', "invalid_json")]:
        with pytest.raises(StageFailure) as caught:
            parse_stage(raw)
        assert caught.value.stage == "parse" and caught.value.issues[0].code == code


def test_schema_stage_lists_errors_in_a_stable_order_and_short(triage, prepared):
    data = answer(prepared)
    del data["sentiment"]
    data["topics"][0]["label"] = "VOLO"
    data["topics"][1]["evidence"] = [{"quote": "x" * 5000}]
    data["extra"] = True
    with pytest.raises(StageFailure) as caught:
        schema_stage(triage, data)
    failure = caught.value
    assert failure.stage == "schema"
    messages = [i.message for i in failure.issues]
    assert any("$.topics[0].label" in m for m in messages)
    assert any("'sentiment' is a required property" in m for m in messages)
    assert any("extra" in m for m in messages)
    assert all(len(m) <= 300 for m in messages)
    with pytest.raises(StageFailure) as again:
        schema_stage(triage, data)
    assert again.value.issues == failure.issues


def test_an_invented_candidate_id_is_a_business_error(kind, triage, prepared):
    data = answer(prepared)
    data["topics"][1]["keywords"].append({"candidate_id": "cdeadbeef000", "term": "bonifico"})
    schema_stage(triage, data)
    with pytest.raises(StageFailure) as caught:
        kind.check(triage, prepared, data)
    assert caught.value.stage == "business"
    assert caught.value.issues[0].code == "invented_candidate"
    assert "topics[1].keywords[1].candidate_id 'cdeadbeef000'" in caught.value.issues[0].message


def test_labels_outside_the_rules_and_no_topic_are_business_errors(kind, triage, prepared):
    with pytest.raises(StageFailure) as caught:
        kind.check(triage, prepared, answer(prepared, topics=[]))
    assert caught.value.issues[0].code == "no_topic"
    data = answer(prepared)
    data["topics"][0]["label"] = "VOLO"
    with pytest.raises(StageFailure) as caught:
        kind.check(triage, prepared, data)
    assert caught.value.issues[0].code == "unknown_label"


def test_an_evidence_quote_must_be_in_the_text(kind, triage, prepared):
    data = answer(prepared)
    # Case, spacing and typographic apostrophes do not count; paraphrases do.
    data["topics"][0]["evidence"] = [{"quote": "VORREI prenotare  una lezione\ndi volo"}]
    kind.check(triage, prepared, data)
    data["topics"][1]["evidence"] = [{"quote": "la fattura di aprile non è arrivata"}]
    with pytest.raises(StageFailure) as caught:
        kind.check(triage, prepared, data)
    assert caught.value.stage == "evidence"
    assert caught.value.issues[0].code == "quote_not_in_text"


def test_quality_cleans_up_deterministically_and_warns(kind, triage, prepared):
    data = answer(prepared)
    booking = data["topics"][0]
    booking["keywords"].append(dict(booking["keywords"][0]))  # duplicate keyword
    booking["keywords"].append({**candidate(prepared, "sabato mattina"), "term": "sabato"})
    booking["evidence"].append({"quote": "Vorrei prenotare una lezione di volo per sabato mattina"})
    duplicate = copy.deepcopy(data["topics"][1])
    duplicate["confidence"] = 0.99
    unknown = {"label": "UNKNOWN_TOPIC", "confidence": 0.5, "keywords": [], "evidence": []}
    data["topics"][1]["confidence"] = 0.1
    data["topics"][1]["evidence"] = []
    data["topics"] += [duplicate, unknown]
    data["priority"]["signals"] = ["sabato", "sabato"]
    schema_stage(triage, data)
    first = kind.check(triage, prepared, copy.deepcopy(data))
    second = kind.check(triage, prepared, copy.deepcopy(data))
    assert first == second  # deterministic, and the input was not modified in place
    output = first.output
    assert [t["label"] for t in output["topics"]] == ["PRENOTAZIONE_VOLO", "PAGAMENTO"]
    assert output["topics"][1]["confidence"] == 0.1  # the first occurrence is kept
    terms = [k["term"] for k in output["topics"][0]["keywords"]]
    assert terms == ["lezione di volo", "sabato mattina"]
    assert len(output["topics"][0]["evidence"]) == 1
    assert output["priority"]["signals"] == ["sabato"]
    codes = [w.code for w in first.warnings]
    assert codes == [
        "duplicate_topic",
        "unknown_with_topics",
        "duplicate_keyword",
        "keyword_term_mismatch",
        "duplicate_evidence",
        "low_confidence",
        "topic_without_evidence",
        "duplicate_signal",
    ]
    assert all(w.stage == "quality" for w in first.warnings)


def test_the_offline_triage_passes_its_own_stages(kind, triage):
    mail = email(
        "Buongiorno, ho la lezione di volo domani mattina ma c'è nebbia: la annulliamo?",
        "Re: lezione di domani",
    )
    prepared = prepare(kind, triage, mail)
    data = kind.offline(triage, prepared)
    assert json.loads(json.dumps(data)) == data
    schema_stage(triage, data)
    checked = kind.check(triage, prepared, data)
    labels = [t["label"] for t in checked.output["topics"]]
    assert "PRENOTAZIONE_VOLO" in labels and "METEO" in labels
    assert checked.output["priority"]["value"] == "urgent"
    assert kind.offline(triage, prepared) == data  # deterministic
    assert OFFLINE_MODEL == "offline-rules"


def test_nothing_recognisable_is_the_unknown_topic(kind, triage):
    prepared = prepare(kind, triage, email("Zzz qwerty asdf.", "Zzz"))
    data = kind.offline(triage, prepared)
    assert [t["label"] for t in data["topics"]] == ["UNKNOWN_TOPIC"]
    assert kind.check(triage, prepared, data).warnings == []

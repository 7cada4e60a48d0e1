"""`GROUNDING_POLICY`: what a turn does with an answer that cites what its sources do not say
(caveat, regenerate, withhold), and how the older settings map onto it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aircoach.errors import ConfigError
from aircoach.grounding.guard import ContextIndex, Source, check, withheld
from aircoach.settings import GroundingSettings, Settings
from tests.helpers import ObservedChats, app_with, asgi_client, chat, copy_prompt_docs
from tests.scripted_model import Script, ScriptedModels, text

MANUAL = """# Spazio aereo

Le quote minime VFR sopra i centri abitati sono fissate dalla SERA.5005(f) del Reg. (UE)
n. 923/2012.
"""
MIXED = (
    "Le quote minime VFR sopra i centri abitati sono nella SERA.5005(f). "
    "Il VFR speciale è invece nella SERA.5010. Buon volo!"
)


@pytest.fixture
def manual_settings(settings: Settings, tmp_path: Path) -> Settings:
    docs = copy_prompt_docs(tmp_path / "docs")
    shutil.rmtree(docs / "manual")
    (docs / "manual").mkdir()
    (docs / "manual" / "01_spazio.md").write_text(MANUAL, "utf-8")
    return settings.model_copy(update={"prompt_docs_dir": docs})


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({}, "regenerate"),  # today's default: a JSON answer is rewritten once
        ({"GROUNDING_REGENERATE": "false"}, "caveat"),
        ({"GROUNDING_REGENERATE": "true"}, "regenerate"),
        ({"GROUNDING_POLICY": "caveat"}, "caveat"),
        ({"GROUNDING_POLICY": "withhold"}, "withhold"),
        ({"GROUNDING_POLICY": "regenerate", "GROUNDING_REGENERATE": "true"}, "regenerate"),
        ({"GROUNDING_POLICY": "caveat", "GROUNDING_REGENERATE": "false"}, "caveat"),
    ],
)
def test_todays_settings_map_onto_the_policy(monkeypatch, env, mode):
    for name in ("GROUNDING_POLICY", "GROUNDING_REGENERATE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert GroundingSettings(_env_file=None).grounding_mode == mode


def test_a_policy_that_contradicts_the_old_switch_is_refused(monkeypatch):
    monkeypatch.setenv("GROUNDING_POLICY", "withhold")
    monkeypatch.setenv("GROUNDING_REGENERATE", "true")
    with pytest.raises(ConfigError, match="GROUNDING_POLICY and GROUNDING_REGENERATE disagree"):
        GroundingSettings(_env_file=None)


def test_withheld_keeps_the_verified_sentences_and_names_what_it_left_out():
    context = ContextIndex.of([Source("manual", "m", MANUAL)])
    result = check(MIXED, context)
    assert result is not None and result.unverified == ["SERA.5010"]
    assert withheld(MIXED, result) == (
        "Le quote minime VFR sopra i centri abitati sono nella SERA.5005(f). Buon volo!",
        "Ho omesso quanto citava SERA.5010: non trovo conferma nelle fonti; chiedi al tuo "
        "istruttore.",
    )


async def test_withhold_answers_only_what_is_verified(manual_settings, auth):
    settings = manual_settings.model_copy(update={"grounding_policy": "withhold"})
    script = Script([text(MIXED), text("Prego!")])
    chats = ObservedChats(app_with(settings).state.services.chats)
    app = app_with(settings, models=ScriptedModels(script), chats=chats)
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query",
            json={"query": "Quote minime VFR?", "stream": False},
            headers=auth(),
        )
        await chat(client, auth(), "grazie")
        history = (await client.get("/api/history", headers=auth())).json()["turns"]
    body = response.json()
    assert body["answer"].startswith("Le quote minime VFR sopra i centri abitati sono nella")
    assert "SERA.5010" not in body["answer"].split("\n\n")[0]
    assert body["answer"].endswith("chiedi al tuo istruttore.")  # no caveat: nothing unverified
    grounding = body["grounding"]
    assert grounding["withheld"] == ["SERA.5010"] and grounding["unverified"] == []
    assert [c["key"] for c in grounding["citations"]] == ["sera.5005(f)"]
    assert grounding["regenerated"] is False
    # Stored as sent; the next turn's thread is rebuilt from the store.
    assert history[-1]["system"] == body["answer"]
    assert chats.reseeds == 1
    assert len(script.calls) == 2  # no second model call for this policy


async def test_a_stream_gets_the_caveat_whatever_the_policy(manual_settings, auth):
    settings = manual_settings.model_copy(update={"grounding_policy": "withhold"})
    app = app_with(settings, models=ScriptedModels(Script([text(MIXED)])))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "Quote minime VFR?")
    grounding = next(e for e in events if e["type"] == "grounding")
    assert grounding["unverified"] == ["SERA.5010"] and grounding["withheld"] == []
    assert "non trovo conferma nelle fonti per SERA.5010" in events[-2]["content"]


async def test_caveat_policy_does_not_rewrite_a_json_answer(manual_settings, auth):
    settings = manual_settings.model_copy(update={"grounding_policy": "caveat"})
    script = Script([text(MIXED)])  # a second model call would exhaust the script
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query", json={"query": "Quote?", "stream": False}, headers=auth()
        )
    body = response.json()
    assert body["answer"].startswith(MIXED) and "SERA.5010" in body["answer"]
    assert body["grounding"]["regenerated"] is False
    assert body["grounding"]["unverified"] == ["SERA.5010"]

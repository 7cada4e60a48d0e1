"""Tasks as versioned docs: the folder is validated when the docs load, a bad one is refused
with the file and the field named, and a task has a version of its own."""

from __future__ import annotations

import json
import re

import pytest

from aircoach.errors import ConfigError
from aircoach.prompts.store import build_prompt
from aircoach.tasks.catalog import load_tasks
from aircoach.tasks.definition import task_versions

FOLDER = "tasks/email_triage/"


def edit(docs: dict[str, str], name: str, change) -> dict[str, str]:
    data = json.loads(docs[FOLDER + name])
    change(data)
    return {**docs, FOLDER + name: json.dumps(data)}


def test_the_shipped_task_loads(triage):
    assert triage.name == "email_triage" and triage.permission == "tasks:email_triage"
    assert triage.manifest.policy.attempts == 3 and triage.manifest.candidates.top_n == 100
    assert triage.manifest.candidates.shrink_top_n == 50
    assert (
        triage.manifest.candidates.body_chars,
        triage.manifest.candidates.shrink_body_chars,
    ) == (8000, 4000)
    labels = triage.schema["properties"]["topics"]["items"]["properties"]["label"]["enum"]
    assert "UNKNOWN_TOPIC" in labels and "PRENOTAZIONE_VOLO" in labels
    assert "$schema" not in triage.model_schema and triage.model_schema["type"] == "object"


def test_a_task_edit_is_a_new_task_version_and_the_same_prompt_version(docs, triage):
    edited = {**docs, FOLDER + "prompt.md": docs[FOLDER + "prompt.md"] + "\nSii breve.\n"}
    again = load_tasks(edited).get("email_triage")
    assert again is not None and again.version != triage.version
    assert again.schema_hash == triage.schema_hash
    assert build_prompt(edited)[1] == build_prompt(docs)[1]
    assert task_versions(edited) == {"email_triage": again.version}


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("task.json", lambda d: d.update(name="other"), "must be the folder name"),
        ("task.json", lambda d: d.update(kind="poetry"), "unknown kind 'poetry'"),
        ("task.json", lambda d: d["policy"].update(attempts=0), "policy.attempts"),
        ("task.json", lambda d: d.update(colour="red"), "colour: Extra inputs"),
        ("rules.json", lambda d: d["topics"].pop("METEO"), "does not agree with rules.json"),
        ("rules.json", lambda d: d.update(unknown_topic="BOH"), "unknown_topic 'BOH'"),
        ("rules.json", lambda d: d["limits"].update(max_topics=4), "topics.maxItems is 5"),
        ("schema.json", lambda d: d.update(type="array"), "must be an object schema"),
        (
            "schema.json",
            lambda d: d["properties"]["topics"].update(minItems="one"),
            "invalid JSON Schema at properties/topics/minItems",
        ),
        ("offline.json", lambda d: d["topics"].update(VOLO=["x"]), "'VOLO' is not a topic"),
    ],
)
def test_invalid_task_files_are_refused_naming_file_and_field(docs, name, change, message):
    with pytest.raises(ConfigError, match=message) as caught:
        load_tasks(edit(docs, name, change))
    assert str(caught.value).startswith("tasks/email_triage/")


@pytest.mark.parametrize("name", ["task.json", "schema.json", "rules.json", "offline.json"])
def test_missing_or_broken_files_are_named(docs, name):
    with pytest.raises(ConfigError, match=re.escape(f"tasks/email_triage/{name}: missing")):
        load_tasks({k: v for k, v in docs.items() if k != FOLDER + name})
    with pytest.raises(ConfigError, match=re.escape(f"tasks/email_triage/{name}: not valid")):
        load_tasks({**docs, FOLDER + name: "{"})


def test_empty_prompt_and_missing_stoplist_are_refused(docs):
    with pytest.raises(ConfigError, match=r"prompt\.md: missing or empty"):
        load_tasks({**docs, FOLDER + "prompt.md": "  \n"})
    with pytest.raises(ConfigError, match=r"stoplist\.txt: missing"):
        load_tasks({k: v for k, v in docs.items() if k != FOLDER + "stoplist.txt"})


def test_docs_without_tasks_have_none(docs):
    assert load_tasks({k: v for k, v in docs.items() if "/" not in k}).names == []

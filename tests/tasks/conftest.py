"""Fixtures of the task tests: the shipped triage task, parsed from the shipped docs."""

from __future__ import annotations

from typing import Any

import pytest

from aircoach.tasks.catalog import kinds, load_tasks
from aircoach.tasks.definition import Prepared, TaskDefinition, TaskKind
from aircoach.tasks.triage import TriageInput
from tests.helpers import shipped_docs
from tests.llm.conftest import (  # noqa: F401 (fixtures: the fake model servers)
    gemini_api,
    gemini_settings,
    model_settings,
    openai_api,
)


@pytest.fixture(scope="session")
def docs() -> dict[str, str]:
    return shipped_docs()


@pytest.fixture(scope="session")
def triage(docs: dict[str, str]) -> TaskDefinition:
    definition = load_tasks(docs).get("email_triage")
    assert definition is not None
    return definition


@pytest.fixture(scope="session")
def kind() -> TaskKind:
    return kinds()["email_triage"]


def email(body: str, subject: str = "", sender: str = "allievo@example.it") -> TriageInput:
    return TriageInput.model_validate({"subject": subject, "from": sender, "body": body})


def prepare(kind: TaskKind, triage: TaskDefinition, mail: TriageInput, **kw: Any) -> Prepared:
    return kind.prepare(triage, mail, shrink=kw.get("shrink", False))

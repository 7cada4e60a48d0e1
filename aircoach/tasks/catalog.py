"""The task kinds this package ships, and the tasks of a set of docs: each `tasks/<name>/`
folder names its kind in `task.json`."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from aircoach.prompts.keys import docs_under, folders_in
from aircoach.tasks.definition import TASKS_AREA, TaskCatalog, TaskKind, load_task
from aircoach.tasks.triage import EmailTriage


@cache
def kinds() -> dict[str, TaskKind]:
    """The kinds a `task.json` may name."""
    return {"email_triage": EmailTriage()}


def load_tasks(contents: Mapping[str, str]) -> TaskCatalog:
    """Every task of the docs, validated; raises `ConfigError` naming the file at fault."""
    tasks = {}
    for name in folders_in(contents, TASKS_AREA):
        tasks[name] = load_task(name, docs_under(contents, f"{TASKS_AREA}/{name}"), kinds())
    return TaskCatalog(tasks)


def check_task_docs(contents: Mapping[str, str]) -> None:
    """The prompt store's check: docs with an invalid task are never served."""
    load_tasks(contents)

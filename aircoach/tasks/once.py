"""Once per message: a redelivered SQS message (SQS delivers at least once) or a repeated
request with the same `Idempotency-Key` gets the first run instead of a second one (and a
second bill). The key is claimed in the run store, shared by every instance, before the run
starts; the run's id is recorded with it when the run is stored.

- a key seen with the same input returns its first run (a dead letter raises `TaskFailed`
  with it again, so the caller answers as the first time);
- a key seen with another input is `KeyReused` (409 on HTTP; a failed record on SQS);
- a key whose run is still going on elsewhere is `KeyBusy` (409; SQS redelivers it later).
  A claim whose run never ended (its instance died) is taken over after `TASK_RUN_LEASE_S`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import anyio
from pydantic import BaseModel

from aircoach.tasks.definition import TaskDefinition
from aircoach.tasks.engine import TaskEngine, TaskFailed
from aircoach.tasks.records import RunSource, TaskRun

log = logging.getLogger(__name__)

MAX_KEY_CHARS = 200


class KeyReused(Exception):
    """The key ran another input."""


class KeyBusy(Exception):
    """The key's first run has not ended yet."""


def input_hash(task: str, payload: Any) -> str:
    canonical = json.dumps(
        {"task": task, "input": payload}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def http_key(caller: str, task: str, idempotency_key: str) -> str:
    """A caller's keys are its own: two callers may use the same key."""
    digest = hashlib.sha256(f"{caller}\x1f{task}\x1f{idempotency_key}".encode()).hexdigest()
    return f"http:{digest[:40]}"


def sqs_key(message_id: str) -> str:
    return f"sqs:{message_id[:MAX_KEY_CHARS]}"


async def run_once(
    engine: TaskEngine,
    definition: TaskDefinition,
    task_input: BaseModel,
    *,
    key: str,
    caller: str,
    source: RunSource,
    origin: str,
    lease_s: float,
    clock: Callable[[], float] = time.time,
) -> tuple[TaskRun, bool]:
    """The run of `key`: (the run, whether it is the first run's replay). Raises `TaskFailed`
    (the run went to review), `KeyReused`, `KeyBusy`, or a store's error (before the run is
    stored: after it, the run is the answer)."""
    runs = engine.stores.runs
    digest = input_hash(definition.name, task_input.model_dump(by_alias=True))
    claim = await runs.claim(key, digest, now=clock(), lease_s=lease_s)
    if claim.state == "mismatch":
        raise KeyReused(key)
    if claim.state == "busy":
        raise KeyBusy(key)
    if claim.state == "done":
        first = await runs.get_run(claim.run_id or "")
        if first is None:
            raise KeyBusy(key)  # recorded, not readable yet: as if still running
        if first.status == "dead_letter":
            raise TaskFailed(first)
        return first, True
    try:
        run = await engine.run(definition, task_input, caller=caller, source=source, origin=origin)
    except TaskFailed as failed:
        await _complete(engine, key, failed.run.run_id)
        raise
    except BaseException:
        # When the store is down too, the lease frees the key later.
        with anyio.CancelScope(shield=True), anyio.move_on_after(5), suppress(Exception):
            await runs.release(key)
        raise
    await _complete(engine, key, run.run_id)
    return run, False


async def _complete(engine: TaskEngine, key: str, run_id: str) -> None:
    """Record the stored run with its key. A store that fails now does not fail the run: it
    is stored, and the caller answered with it does not repeat it (an SQS message is done).
    The key stays claimed without its run: a repeat of it waits for the lease, like a run
    whose instance died."""
    try:
        with anyio.CancelScope(shield=True), anyio.fail_after(5):  # a hung store: logged too
            await engine.stores.runs.complete(key, run_id)
    except Exception:
        log.warning(
            "run key %s: run %s stored, its key not marked done", key, run_id, exc_info=True
        )

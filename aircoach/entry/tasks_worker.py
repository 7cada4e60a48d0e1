"""Task runs from SQS: the Lambda handler of a real inbox (`functions/tasks_worker.py`).

Each SQS message body is `{"task": "email_triage", "input": {...}}`. The records of one
invocation run concurrently (at most `TASK_BATCH_CONCURRENCY`), and the handler reports partial
batch failures (`ReportBatchItemFailures`), so one bad message never makes SQS redeliver the
others:

- a valid output, or a dead letter (the input is in the review queue): the message is done;
- a message that cannot be run (not JSON, JSON past the limits every request body has: depth,
  values, non-finite numbers; unknown task, invalid input): a failure; SQS redelivers it and,
  after the queue's `maxReceiveCount`, moves it to the dead-letter queue for someone to look at;
- a backend failure (store, prompt source): a failure; SQS redelivers it later.

An exception that left `_run` would fail the whole batch (SQS would run every record again):
whatever is wrong with one record fails that record alone, named in `batchItemFailures`.

SQS delivers at least once: the message id is claimed in the run store before the run (shared
by every instance), so a redelivered message returns its first run instead of running again;
a message whose first delivery is still running elsewhere fails, to come back later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import anyio
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from aircoach import telemetry
from aircoach.bodies import load_json
from aircoach.services import Services
from aircoach.tasks.callback import CallbackTarget, send_callback
from aircoach.tasks.definition import TaskCatalog
from aircoach.tasks.engine import TaskFailed
from aircoach.tasks.once import KeyBusy, KeyReused, run_once, sqs_key
from aircoach.tasks.records import TaskRun

if TYPE_CHECKING:
    from aircoach.telemetry.otel import OtelTelemetry

log = logging.getLogger(__name__)


class UnrunnableMessage(Exception):
    """A message no retry can run: it belongs in the dead-letter queue."""


class SqsTaskWorker:
    """With `telemetry` (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL=console), each batch is one trace:
    a root span `sqs_batch`, a span per message with the run's spans under it; what a run
    recorded is flushed as soon as it ends (within OTEL_FLUSH_TIMEOUT_MS), and the batch's
    root span before the handler returns, since Lambda may freeze the instance right after."""

    def __init__(self, services: Services, telemetry: OtelTelemetry | None = None):
        self.services = services
        self.telemetry = telemetry

    def handle(self, event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        """The Lambda handler: a fresh event loop per invocation (clients are made in it)."""
        return asyncio.run(self.process(event))

    async def process(self, event: dict[str, Any]) -> dict[str, Any]:
        if self.telemetry is None:
            return await self._process(event)
        try:
            with (
                telemetry.recording(self.telemetry),
                telemetry.span(
                    "sqs_batch",
                    {
                        "messaging.system": "aws_sqs",
                        "messaging.operation.type": "process",
                        "messaging.batch.message_count": len(event.get("Records") or []),
                    },
                ),
            ):
                return await self._process(event)
        finally:
            await self.telemetry.flush()

    async def _flush(self) -> None:
        if self.telemetry is not None:
            await self.telemetry.flush()

    async def _process(self, event: dict[str, Any]) -> dict[str, Any]:
        # A message delivered twice in one batch runs once: its id fails or succeeds once.
        records: list[dict[str, Any]] = []
        seen: set[str] = set()
        for record in event.get("Records") or []:
            if (message_id := str(record.get("messageId", ""))) not in seen:
                seen.add(message_id)
                records.append(record)
        ids = [str(r.get("messageId", "")) for r in records]
        try:
            catalog = self.services.tasks_for(await self.services.prompts.current())
        except Exception as exc:
            log.error("sqs batch of %d: docs unavailable (%s); all redelivered", len(ids), exc)
            return _failures(ids)
        failed: list[str] = []
        limiter = anyio.CapacityLimiter(self.services.settings.task_batch_concurrency)

        async def one(record: dict[str, Any]) -> None:
            async with limiter:
                message_id = str(record.get("messageId", ""))[:200]
                with telemetry.span("sqs_message", {"messaging.message.id": message_id}) as span:
                    done = await self._run(catalog, record)
                    if not done and span is not None:
                        span.set_attribute("error.type", "message_failed")
                if not done:
                    failed.append(str(record.get("messageId", "")))
                await self._flush()

        async with anyio.create_task_group() as group:
            for record in records:
                group.start_soon(one, record)
        return _failures([i for i in ids if i in failed])

    async def _run(self, catalog: TaskCatalog, record: dict[str, Any]) -> bool:
        """Whether the message is done (to be deleted)."""
        message_id = record.get("messageId")
        try:
            definition, task_input = _parse(catalog, record)
        except UnrunnableMessage as exc:
            log.error("sqs message %s cannot run: %s", message_id, exc)
            return False
        key = sqs_key(str(message_id or ""))
        try:
            run, replayed = await run_once(
                self.services.task_engine,
                definition,
                task_input,
                key=key,
                caller="sqs",
                source="sqs",
                origin=key,
                lease_s=self.services.settings.task_run_lease_s,
            )
        except TaskFailed as exc:
            log.info("sqs message %s: queued for review as %s", message_id, exc.run.review_id)
            return await self._callback(exc.run)
        except KeyReused:
            log.error("sqs message %s: its id ran another body already", message_id)
            return False
        except KeyBusy:
            log.info("sqs message %s: its first delivery is still running", message_id)
            return False
        except Exception as exc:
            log.warning("sqs message %s failed, to be redelivered: %r", message_id, exc)
            return False
        if replayed:
            log.info("sqs message %s: redelivered, its run is %s", message_id, run.run_id)
        return await self._callback(run)

    async def _callback(self, run: TaskRun) -> bool:
        """Tell the deployment's callback (if any) that the run ended; a callback that failed
        fails the message, whose redelivery sends it again (the run is not repeated)."""
        settings = self.services.settings
        if settings.task_callback_url is None or settings.task_callback_secret is None:
            return True
        target = CallbackTarget(
            url=settings.task_callback_url,
            secret=settings.task_callback_secret,
            hosts=tuple(settings.task_callback_hosts),
            timeout_s=settings.task_callback_timeout_s,
            allow_private=settings.task_callback_allow_private,
        )
        status = {"dead_letter": "review"}.get(run.status, run.status)
        payload = {"run_id": run.run_id, "status": status, "output": run.output}
        return await send_callback(target, payload)


def _parse(catalog: TaskCatalog, record: dict[str, Any]) -> tuple[Any, Any]:
    raw = record.get("body")
    if not isinstance(raw, str) or not raw:
        raise UnrunnableMessage("body is not JSON (empty)")
    try:
        body = load_json(raw)  # the limits of a request body: depth, values, finite numbers
    except RequestValidationError as exc:
        (error, *_) = exc.errors()
        reason = error.get("ctx", {}).get("error") or error["msg"]
        place = ".".join(map(str, error["loc"][1:]))[:80]  # keys are the sender's: cut short
        raise UnrunnableMessage(f"body refused ({error['type']}): {reason} at {place!r}") from None
    if not isinstance(body, dict) or not isinstance(body.get("input"), dict):
        raise UnrunnableMessage('body must be {"task": NAME, "input": {...}}')
    name = str(body.get("task", ""))[:40]
    definition = catalog.get(name)
    if definition is None:
        raise UnrunnableMessage(f"unknown task {name!r}; valid: {catalog.names}")
    try:
        return definition, definition.kind.input_model.model_validate(body["input"])
    except ValidationError as exc:
        fields = sorted({".".join(map(str, e["loc"])) for e in exc.errors()})
        raise UnrunnableMessage(f"invalid input for {name!r}: fields {fields}") from None


def _failures(ids: list[str]) -> dict[str, Any]:
    return {"batchItemFailures": [{"itemIdentifier": i} for i in ids]}


def worker_from_environment() -> SqsTaskWorker:
    """The worker of the Lambda entry: settings from the environment, logging set up."""
    from aircoach.logs import configure_logging
    from aircoach.settings import get_settings

    settings = get_settings()
    # As the HTTP entries do: on Lambda the runtime's handler is already on the root logger,
    # where basicConfig did nothing and the INFO lines were lost.
    configure_logging(settings)
    recorder = None
    if settings.telemetry_enabled:
        from aircoach.telemetry.otel import OtelTelemetry

        recorder = OtelTelemetry.from_settings(settings)
    return SqsTaskWorker(Services.build(settings), recorder)

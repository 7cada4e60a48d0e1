"""The task engine: one run of a task, from input to a stored, validated output or to the
review queue.

The fallback policy (the task's `task.json`): up to `attempts` with the full request, then
`shrink_attempts` with the shrunk one (fewer candidates, shorter body), then
`fallback_attempts` on `MODEL_FALLBACK`, then the review queue with the input, every attempt's
raw answer and errors, and the PipelineVersion. A refused answer's errors go back to the model
in the next attempt; a call that fails (timeout, 5xx after the client's retries) ends that
model's turn, since asking it again would only add its timeout. Every run, valid or dead letter, is stored in `task_runs` before the caller
gets its answer, and logged as one summary line (`task_run key=value ...`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

import aircoach
from aircoach import telemetry
from aircoach.tasks.contacts import lookup_customer
from aircoach.tasks.definition import Checked, Policy, Prepared, TaskDefinition
from aircoach.tasks.models import StructuredModel, StructuredRequest, TaskModels, Which
from aircoach.tasks.ports import TaskStores
from aircoach.tasks.records import (
    MAX_RAW_CHARS,
    Attempt,
    Customer,
    Issue,
    Mode,
    PipelineVersion,
    ReviewItem,
    RunSource,
    TaskRun,
    Verdict,
    new_id,
    run_facts,
    shown_source,
)
from aircoach.tasks.validation import MAX_MESSAGE_CHARS, StageFailure, parse_stage, schema_stage

log = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 2.0
_FEEDBACK_ISSUES = 5


class TaskFailed(Exception):
    """The whole fallback chain ended without a valid output; the input is in the review queue
    (`run.review_id`) and the dead-letter run is stored."""

    def __init__(self, run: TaskRun):
        super().__init__(f"task {run.task!r} run {run.run_id} went to review {run.review_id}")
        self.run = run


class InvalidOutput(Exception):
    """A reviewer's output that does not pass the task's stages."""

    def __init__(self, failure: StageFailure):
        super().__init__(str(failure))
        self.failure = failure


class AlreadyResolved(Exception):
    """The review item was resolved or dismissed already (or meanwhile, by someone else)."""


class RunMissing(Exception):
    """A low-confidence item whose run was never stored: the item is queued before its run
    (so that a stored doubtful run is always in the queue), and the run's write then failed.
    Its caller got a 503 and may have sent the input again; a verdict has no run to go with."""

    def __init__(self, item: ReviewItem):
        super().__init__(f"review {item.review_id}: run {item.run_id} was never stored")
        self.item = item


@dataclass(frozen=True)
class Step:
    which: Which
    shrink: bool


def plan(policy: Policy) -> Iterator[Step]:
    """The attempts of the fallback policy, in order."""
    yield from (Step("primary", False) for _ in range(policy.attempts))
    yield from (Step("primary", True) for _ in range(policy.shrink_attempts))
    yield from (Step("fallback", True) for _ in range(policy.fallback_attempts))


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def feedback_for(failure: StageFailure) -> str:
    """What the model is told about its previous, refused answer (in the task's language)."""
    lines = "\n".join(f"- {i.message}" for i in failure.issues[:_FEEDBACK_ISSUES])
    return (
        f"La risposta precedente non è valida (controllo '{failure.stage}'):\n{lines}\n"
        "Rispondi di nuovo con un oggetto JSON che rispetti lo schema e le regole."
    )


class _Models:
    """The models of one run, opened on first use and closed when the run ends."""

    def __init__(self, provider: TaskModels, temperature: float):
        self.provider = provider
        self.temperature = temperature
        self.opened: dict[Which, StructuredModel | None] = {}

    async def get(self, which: Which) -> StructuredModel | None:
        if which not in self.opened:
            self.opened[which] = await self.provider.open(which, temperature=self.temperature)
        return self.opened[which]

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
            for model in self.opened.values():
                if model is not None:
                    await model.aclose()

    def tokens(self) -> dict[str, int] | None:
        """The tokens the run's models reported, summed; None when none reported any."""
        total: dict[str, int] = {}
        for model in self.opened.values():
            for name, count in (model.tokens if model is not None else {}).items():
                total[name] = total.get(name, 0) + count
        return total or None


def _provider(model: StructuredModel) -> str:
    provider = getattr(model, "provider", None)
    if isinstance(provider, str) and provider:
        return provider
    return "offline" if model.notice else "unknown"


def _mode(model: StructuredModel) -> Mode:
    return "offline" if model.notice else "model"


@dataclass
class TaskEngine:
    stores: TaskStores
    models: TaskModels
    code_version: str | None = None
    # A valid output whose confidence is under its task's threshold is also queued for review.
    review_below: Mapping[str, float] = field(default_factory=dict)

    def pipeline_version(
        self,
        definition: TaskDefinition,
        model: str,
        *,
        provider: str = "",
        mode: Mode | None = None,
    ) -> PipelineVersion:
        versions = definition.kind.versions(definition)
        return PipelineVersion(
            task=definition.name,
            task_version=definition.version,
            schema_hash=definition.schema_hash,
            candidates_version=versions["candidates_version"],
            stoplist_version=versions["stoplist_version"],
            model=model,
            code_version=self.code_version or f"aircoach-{aircoach.__version__}",
            prompt_hash=definition.prompt_hash,
            dictionary_version=versions.get("dictionary_version", ""),
            provider=provider,
            mode=mode,
            temperature=definition.manifest.temperature,
        )

    async def run(
        self,
        definition: TaskDefinition,
        task_input: BaseModel,
        *,
        caller: str,
        source: RunSource,
        origin: str | None = None,
    ) -> TaskRun:
        """Run the task on `task_input`. Returns the stored run (status `low_confidence` when
        its output was also queued for review); raises `TaskFailed` when the input went to
        the review queue without a valid output, `StoreUnavailable` when the store failed."""
        started = time.perf_counter()
        kind = definition.kind
        customer = await lookup_customer(self.stores.contacts, kind.sender(task_input))
        prepared: dict[bool, Prepared] = {}
        attempts: list[Attempt] = []
        models = _Models(self.models, definition.manifest.temperature)
        result: tuple[dict[str, Any], list[Issue], StructuredModel, bool] | None = None
        tried: list[str] = []
        unreachable: set[Which] = set()
        try:
            feedback: str | None = None
            for step in plan(definition.manifest.policy):
                if step.which in unreachable:
                    continue
                model = await models.get(step.which)
                if model is None:
                    continue  # no MODEL_FALLBACK
                if step.shrink not in prepared:
                    prepared[step.shrink] = await anyio.to_thread.run_sync(
                        partial(kind.prepare, definition, task_input, shrink=step.shrink)
                    )
                if model.label not in tried:
                    tried.append(model.label)
                request = StructuredRequest(definition, prepared[step.shrink], feedback)
                attempt, checked, feedback = await self._attempt(
                    len(attempts) + 1, model, request, step
                )
                attempts.append(attempt)
                if attempt.stage == "model":
                    # The call itself failed (after the client's own retries): asking the same
                    # model again would only add its timeout; go on with the next model.
                    unreachable.add(step.which)
                if checked is not None:
                    warnings = list(checked[1])
                    if model.notice:
                        warnings.insert(
                            0, Issue(stage="model", code="offline_model", message=model.notice)
                        )
                    result = (checked[0], warnings, model, step.shrink)
                    break
        finally:
            await models.aclose()

        payload = task_input.model_dump(by_alias=True)
        latency_ms = round((time.perf_counter() - started) * 1000, 1)
        if result is not None:
            output, warnings, model, shrunk = result
            truncation = prepared[shrunk].truncation
            confidence = kind_confidence(definition, output)
            threshold = self.review_below.get(definition.name)
            doubtful = threshold is not None and confidence is not None and confidence < threshold
            run = TaskRun(
                run_id=new_id(),
                task=definition.name,
                status="low_confidence" if doubtful else "ok",
                source=source,
                caller=caller,
                created_at=now_iso(),
                input=payload,
                output=output,
                customer=customer,
                warnings=warnings,
                attempts=attempts,
                model=model.label,
                pipeline_version=self.pipeline_version(
                    definition, model.label, provider=_provider(model), mode=_mode(model)
                ),
                latency_ms=latency_ms,
                origin=origin,
                confidence=confidence,
                input_truncated=truncation is not None,
                input_kept_chars=truncation.kept_chars if truncation else None,
                input_total_chars=truncation.total_chars if truncation else None,
                tokens=models.tokens(),
            )
            if doubtful:
                # Queued before the run is stored, like a dead letter: a stored doubtful run is
                # always in the queue. A run whose write then fails leaves an item without its
                # run, which the review routes show (`run_stored: false`) and let be dismissed.
                run = await self._queue_doubtful(run)
            await self._store(run)
            return run
        opened = [m for m in models.opened.values() if m is not None]
        version = self.pipeline_version(
            definition,
            "+".join(tried) or "none",
            provider="+".join(dict.fromkeys(_provider(m) for m in opened)),
            mode=_mode(opened[0]) if opened else None,
        )
        run = await self._dead_letter(
            definition,
            payload,
            customer,
            attempts,
            version,
            caller,
            source,
            latency_ms,
            origin,
            tokens=models.tokens(),
        )
        raise TaskFailed(run)

    async def _queue_doubtful(self, run: TaskRun) -> TaskRun:
        """Queue a valid but doubtful output for a person; the run carries the `review_id`."""
        review_id = new_id()
        item = ReviewItem(
            review_id=review_id,
            task=run.task,
            created_at=run.created_at,
            source=run.source,
            caller=run.caller,
            input=run.input,
            attempts=run.attempts,
            pipeline_version=run.pipeline_version,
            run_id=run.run_id,
            reason="low_confidence",
            output=run.output,
            confidence=run.confidence,
        )
        try:
            await self.stores.reviews.enqueue(item)
        except Exception:
            _log_summary(run, "store_failed")
            raise
        return run.model_copy(update={"review_id": review_id})

    async def _attempt(
        self, n: int, model: StructuredModel, request: StructuredRequest, step: Step
    ) -> tuple[Attempt, tuple[dict[str, Any], list[Issue]] | None, str | None]:
        """One call and its validation: (the attempt, the checked output or None, feedback)."""
        t0 = time.perf_counter()

        def attempt(stage: str | None, errors: list[Issue], raw: str | None = None) -> Attempt:
            return Attempt(
                n=n,
                model=model.label,
                shrunk=step.shrink,
                ok=stage is None,
                stage=stage,
                errors=errors,
                latency_ms=_ms(t0),
                raw=raw,
            )

        try:
            with telemetry.span("task_attempt", {"gen_ai.request.model": model.label}):
                raw = await model.generate(request)
        except Exception as exc:  # the call failed: timeout, 5xx, refused connection...
            message = f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE_CHARS]
            log.warning(
                "task %s attempt %d: model %r failed: %s",
                request.definition.name,
                n,
                model.label,
                message,
            )
            error = Issue(stage="model", code="model_error", message=message)
            return attempt("model", [error]), None, None
        try:
            data = parse_stage(raw)
            schema_stage(request.definition, data)
            checked = request.definition.kind.check(request.definition, request.prepared, data)
        except StageFailure as failure:
            return (
                attempt(failure.stage, failure.issues, raw[:MAX_RAW_CHARS]),
                None,
                feedback_for(failure),
            )
        return attempt(None, []), (checked.output, checked.warnings), None

    async def _dead_letter(
        self,
        definition: TaskDefinition,
        payload: dict[str, Any],
        customer: Customer,
        attempts: list[Attempt],
        version: PipelineVersion,
        caller: str,
        source: RunSource,
        latency_ms: float,
        origin: str | None,
        *,
        tokens: dict[str, int] | None = None,
    ) -> TaskRun:
        run_id, review_id, created_at = new_id(), new_id(), now_iso()
        item = ReviewItem(
            review_id=review_id,
            task=definition.name,
            created_at=created_at,
            source=source,
            caller=caller,
            input=payload,
            attempts=attempts,
            pipeline_version=version,
            run_id=run_id,
        )
        run = TaskRun(
            run_id=run_id,
            task=definition.name,
            status="dead_letter",
            source=source,
            caller=caller,
            created_at=created_at,
            input=payload,
            customer=customer,
            attempts=attempts,
            model=None,
            pipeline_version=version,
            review_id=review_id,
            latency_ms=latency_ms,
            origin=origin,
            tokens=tokens,
        )
        # The review item first: if the run cannot be stored afterwards, the input is still
        # kept for a human, and the caller (503) may retry.
        try:
            await self.stores.reviews.enqueue(item)
        except Exception:
            _log_summary(run, "store_failed")
            raise
        await self._store(run)
        return run

    async def _store(self, run: TaskRun) -> None:
        try:
            await self.stores.runs.insert_run(run)
        except Exception:
            _log_summary(run, "store_failed")
            raise
        _log_summary(run, run.status)
        if run.review_id is not None:
            await self._observe_queue(run.task)

    async def _observe_queue(self, task: str) -> None:
        """The review queue's size and age, as the store counts them (only when metered; a
        failure to read them never fails the run)."""
        if not telemetry.active():
            return
        try:
            found = await self.stores.reviews.queue_stats(task)
        except Exception:
            log.warning("review queue of %s: size not read", task, exc_info=True)
            return
        stats = found[0] if found else None
        age = None
        if stats is not None and stats.oldest_created_at:
            oldest = datetime.fromisoformat(stats.oldest_created_at)
            age = round((datetime.now(UTC) - oldest).total_seconds(), 1)
        telemetry.observe(
            "review_queue",
            {"task": task, "open": stats.open if stats else 0, "oldest_age_s": age},
        )

    # --- review ---------------------------------------------------------------------------

    async def resolve_review(
        self,
        definition: TaskDefinition,
        item: ReviewItem,
        output: Any | None,
        *,
        reviewer: str,
    ) -> TaskRun:
        """Store a reviewer's verdict on a queued input: `output` is the corrected output
        (validated by the same stages against the candidates of the input), or None to confirm
        a low-confidence output as it is. Stored as a run with `source: "review"`, and the
        verdict with the run that queued the item. Raises `InvalidOutput`, `AlreadyResolved`,
        `RunMissing` or `StoreUnavailable`."""
        started = time.perf_counter()
        kind = definition.kind
        # A dead letter's item is resolvable without its run (keeping the input for a person
        # is why it is queued first); a low-confidence item exists to judge its run.
        if item.reason == "low_confidence" and not await self.stores.runs.stored([item.run_id]):
            raise RunMissing(item)
        verdict: Verdict = "corrected"
        if output is None:
            if item.output is None:
                raise InvalidOutput(
                    StageFailure(
                        "review",
                        [Issue(stage="review", code="nothing_to_confirm", message="no output")],
                    )
                )
            output, verdict = item.output, "confirmed"
        try:
            task_input = kind.input_model.model_validate(item.input)
        except ValidationError:
            raise InvalidOutput(
                StageFailure(
                    "review",
                    [
                        Issue(
                            stage="review",
                            code="input_outdated",
                            message="the queued input no longer validates for the task",
                        )
                    ],
                )
            ) from None
        if verdict == "confirmed":  # passed every stage when it was made
            checked = Checked(output, [])
        else:
            prepared = await anyio.to_thread.run_sync(
                partial(kind.prepare, definition, task_input, shrink=False)
            )
            try:
                schema_stage(definition, output)
                checked = kind.check(definition, prepared, output)
            except StageFailure as failure:
                raise InvalidOutput(failure) from None
        customer = await lookup_customer(self.stores.contacts, kind.sender(task_input))
        label = f"review:{reviewer}"
        run = TaskRun(
            run_id=new_id(),
            task=definition.name,
            status="ok",
            source="review",
            caller=reviewer,
            created_at=now_iso(),
            input=item.input,
            output=checked.output,
            customer=customer,
            warnings=checked.warnings,
            attempts=[],
            model=label,
            pipeline_version=self.pipeline_version(
                definition, label, provider="review", mode="review"
            ),
            review_id=item.review_id,
            latency_ms=round((time.perf_counter() - started) * 1000, 1),
            origin="review",
            confidence=kind_confidence(definition, checked.output),
            verdict=verdict,
            reviewed_output=checked.output,
        )
        if not await self.stores.reviews.resolve(
            item.review_id, run_id=run.run_id, by=reviewer, at=run.created_at, verdict=verdict
        ):
            raise AlreadyResolved(item.review_id)
        try:
            # The verdict first: it is an update the next reviewer's overwrites, where a stored
            # run followed by a failed verdict left a second review run once the item reopened.
            await self.stores.runs.record_verdict(
                item.run_id, verdict=verdict, output=checked.output
            )
            await self._store(run)
        except Exception:
            # The item stays open for the next reviewer rather than resolved by nothing.
            with anyio.CancelScope(shield=True):
                await self.stores.reviews.reopen(item.review_id)
            raise
        return run

    async def dismiss_review(self, item: ReviewItem, *, reviewer: str, note: str) -> ReviewItem:
        """Close an open item with no run and no verdict (its input outdated, its task gone,
        its run never stored...); `note` says why. Returns the item as stored now. Raises
        `AlreadyResolved` or `StoreUnavailable`."""
        at = now_iso()
        if not await self.stores.reviews.dismiss(item.review_id, by=reviewer, at=at, note=note):
            raise AlreadyResolved(item.review_id)
        log.info(
            "review_dismissed task=%s review_id=%s run_id=%s reason=%s",
            item.task,
            item.review_id,
            item.run_id,
            item.reason,
        )
        await self._observe_queue(item.task)
        return item.model_copy(
            update={
                "status": "dismissed",
                "resolved_by": reviewer,
                "resolved_at": at,
                "dismissal_note": note,
            }
        )


def kind_confidence(definition: TaskDefinition, output: dict[str, Any]) -> float | None:
    """The output's confidence as its kind measures it (None: the kind does not say)."""
    measure = getattr(definition.kind, "confidence", None)
    return None if measure is None else measure(output)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 1)


# A run's outcome among the numbers an office watches.
_OUTCOMES = {"dead_letter": "review", "store_failed": "failed"}


def _log_summary(run: TaskRun, status: str) -> None:
    """One line per run, `key=value` (the structured logger of the app can parse it)."""
    outcome = _OUTCOMES.get(status, status)
    if run.source != "review":
        telemetry.observe(
            "task_run",
            {
                "task": run.task,
                "outcome": outcome,
                "latency_ms": run.latency_ms,
                **run_facts(run),
            },
        )
    version = run.pipeline_version
    log.info(
        "task_run task=%s run_id=%s source=%s status=%s outcome=%s attempts=%d shrunk=%s model=%s "
        "task_version=%s schema_hash=%s candidates_version=%s stoplist_version=%s "
        "code_version=%s warnings=%d review_id=%s latency_ms=%s",
        run.task,
        run.run_id,
        shown_source(run),  # as the runs API shows it (`http`, not the engine's `api`)
        status,
        outcome,  # as the metric counts it (`review` for a `dead_letter`)
        len(run.attempts),
        str(any(a.shrunk for a in run.attempts)).lower(),
        version.model,
        version.task_version,
        version.schema_hash,
        version.candidates_version,
        version.stoplist_version,
        version.code_version,
        len(run.warnings),
        run.review_id or "-",
        run.latency_ms,
    )

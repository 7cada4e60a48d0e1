"""`/api/tasks`: structured tasks (validated JSON outputs), their batches and review queue."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from aircoach import messages
from aircoach.auth.tokens import Principal
from aircoach.bodies import max_body_bytes, read_json_body
from aircoach.deps import (
    CurrentUser,
    RequestLanguage,
    ServicesDep,
    UserJsonRoute,
    needs_permission,
)
from aircoach.errors import Conflict, ForbiddenError, NotFound
from aircoach.messages import Language, header_language
from aircoach.models import ErrorBody, ValidationErrorBody
from aircoach.routes.responses import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    TOO_LARGE,
    UNAUTHORIZED,
    UNPARSABLE_BODY,
    Responses,
    unavailable,
)
from aircoach.services import Services
from aircoach.tasks.batch import run_batch
from aircoach.tasks.definition import TaskCatalog, TaskDefinition
from aircoach.tasks.engine import AlreadyResolved, InvalidOutput, RunMissing, TaskFailed
from aircoach.tasks.once import MAX_KEY_CHARS, KeyBusy, KeyReused, http_key, run_once
from aircoach.tasks.ports import RunFilter, utc_time
from aircoach.tasks.records import ReviewItem, ReviewStatus, TaskRun
from aircoach.tasks.schemas import (
    MAX_BATCH,
    BatchResponse,
    DismissRequest,
    InvalidOutputBody,
    ResolveRequest,
    ReviewDetail,
    ReviewPage,
    ReviewSummary,
    RunPage,
    RunSummary,
    TaskFailedBody,
    TaskInfo,
    TaskResult,
    TaskStats,
)
from aircoach.tasks.stats import task_stats
from aircoach.tasks.triage import TriageInput

router = APIRouter(prefix="/api/tasks", tags=["tasks"], route_class=UserJsonRoute)

_FORBIDDEN: Responses = {
    403: {"model": ErrorBody, "description": "The token lacks the permission (`forbidden`)."}
}
_NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such task (`not_found`)."}}
_INVALID: Responses = {
    422: {
        "model": ValidationErrorBody,
        "description": "The input is not JSON or does not validate against the task's input "
        'schema; `detail` names each field (for a batch, `["body", "inputs", i, ...]`).',
    }
}
_UNAVAILABLE = unavailable("auth_unavailable", "prompt_unavailable", "store_unavailable")


# The triage task's input: the request body of the task routes (a task of another kind
# documents its own input in its folder).
def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$defs` inlined: it is embedded in the OpenAPI document, where a
    `#/$defs/...` reference would point at the document's root."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    inlined: dict[str, Any] = walk(schema)
    return inlined


_INPUT_SCHEMA = _inlined(TriageInput.model_json_schema(by_alias=True))
_INPUT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _INPUT_SCHEMA}},
    }
}
_BATCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["inputs"],
                    "properties": {
                        "inputs": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": MAX_BATCH,
                            "items": _INPUT_SCHEMA,
                        }
                    },
                }
            }
        },
    }
}


# A review item's or a run's id (ours are 24 hex digits): a longer one is a 422 before any
# store read (a 15 KB id was looked up, then logged whole).
ItemId = Annotated[str, Path(min_length=1, max_length=64)]


async def _catalog(services: Services) -> TaskCatalog:
    return services.tasks_for(await services.prompts.current())


async def _task(services: Services, name: str) -> TaskDefinition:
    catalog = await _catalog(services)
    definition = catalog.get(name)
    if definition is None:
        raise NotFound("unknown_task", task=name[:40], valid=", ".join(catalog.names))
    return definition


def _utc(value: str | None) -> str | None:
    """The ISO time `value` in UTC, as the stores compare `created_at`; naive means UTC."""
    if value is None:
        return None
    try:
        return utc_time(value)
    except ValueError:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", "since"), "msg": "not an ISO 8601 time"}]
        ) from None


def _require(user: Principal, permission: str) -> None:
    if permission not in user.permissions:
        raise ForbiddenError("permission_needed", permission=permission)


def _invalid(exc: ValidationError, *prefix: str | int) -> RequestValidationError:
    # The input is not echoed back: it may be a 200,000-character e-mail.
    return RequestValidationError(
        [
            {"type": e["type"], "loc": ("body", *prefix, *e["loc"]), "msg": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
    )


def _parse_input(definition: TaskDefinition, data: Any, *prefix: str | int) -> BaseModel:
    try:
        return definition.kind.input_model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, *prefix) from None


def _stored_input(definition: TaskDefinition, data: dict[str, Any]) -> BaseModel | None:
    """A queued input as the task reads it now; None when it no longer validates (it was
    queued under another version of the task's input)."""
    try:
        return definition.kind.input_model.model_validate(data)
    except ValidationError:
        return None


def _failed(exc: TaskFailed, language: Language) -> JSONResponse:
    body = TaskFailedBody(
        message=messages.text("task_failed", language),
        review_id=exc.run.review_id or "",
        run_id=exc.run.run_id,
    )
    return JSONResponse(body.model_dump(), status_code=503)


@router.get("", responses={**UNAUTHORIZED, **_UNAVAILABLE})
async def list_tasks(user: CurrentUser, services: ServicesDep) -> list[TaskInfo]:
    """The tasks of the current docs, their versions, and whether the caller may run them."""
    catalog = await _catalog(services)
    return [
        TaskInfo(
            name=d.name,
            title=d.manifest.title,
            description=d.manifest.description,
            version=d.version,
            permission=d.permission,
            allowed=d.permission in user.permissions,
        )
        for d in catalog.tasks.values()
    ]


@router.post(
    "/{task}",
    openapi_extra=_INPUT_BODY,
    responses={
        **UNAUTHORIZED,
        **_FORBIDDEN,
        **_NOT_FOUND,
        **TOO_LARGE,
        **_INVALID,
        409: {
            "model": ErrorBody,
            "description": "The `Idempotency-Key` ran another input (`conflict`), or its first "
            "request is still running.",
        },
        503: {
            "model": TaskFailedBody | ErrorBody,
            "description": "No valid output after the whole fallback chain (`task_failed`, "
            "with the `review_id` of the input kept for review), or a backend failed.",
        },
    },
)
@max_body_bytes("task_max_body_bytes")
async def run_task(
    task: str,
    request: Request,
    user: CurrentUser,
    services: ServicesDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_HEADER,
            min_length=1,
            max_length=MAX_KEY_CHARS,
            pattern=r"^[\x21-\x7e]+$",
            description="Send the same key again (after a timeout) to get the first run, not a "
            "second one; the same key with another input is a 409.",
        ),
    ] = None,
) -> TaskResult:
    """Run a task on one input (the triage task: `subject`, `from`, `body`, `attachments`).
    Needs the task's permission (`tasks:<name>`). The body may be up to
    `TASK_MAX_BODY_BYTES` (1 MB). A doubtful output (under the task's confidence threshold)
    is returned with `low_confidence: true` and a `review_id`: it is queued for a person."""
    definition = await _task(services, task)
    _require(user, definition.permission)
    data = await read_json_body(request)
    task_input = _parse_input(definition, data)
    replayed = False
    try:
        if idempotency_key is None:
            run = await services.task_engine.run(
                definition, task_input, caller=user.sub, source="api", origin="http"
            )
        else:
            run, replayed = await run_once(
                services.task_engine,
                definition,
                task_input,
                key=http_key(user.sub, definition.name, idempotency_key),
                caller=user.sub,
                source="api",
                origin="http",
                lease_s=services.settings.task_run_lease_s,
            )
    except TaskFailed as exc:
        return _failed(exc, header_language(request.headers))  # type: ignore[return-value]
    except KeyReused:
        raise Conflict("idempotency_key_reused") from None
    except KeyBusy:
        raise Conflict("idempotency_key_busy") from None
    result = TaskResult.from_run(run)
    if replayed:
        return JSONResponse(  # type: ignore[return-value]
            result.model_dump(mode="json"), headers={REPLAYED_HEADER: "true"}
        )
    return result


@router.post(
    "/{task}/batch",
    openapi_extra=_BATCH_BODY,
    responses={
        **UNAUTHORIZED,
        **_FORBIDDEN,
        **_NOT_FOUND,
        **TOO_LARGE,
        **_INVALID,
        **_UNAVAILABLE,
    },
)
@max_body_bytes("task_batch_max_body_bytes")
async def run_task_batch(
    task: str, request: Request, user: CurrentUser, services: ServicesDep
) -> BatchResponse:
    """Run a task on up to 50 inputs, a few at a time (`TASK_BATCH_CONCURRENCY`); each input
    has its own outcome. Every input is validated before any runs. A real inbox goes through
    SQS instead (`functions/tasks_worker.py`)."""
    definition = await _task(services, task)
    _require(user, definition.permission)
    data = await read_json_body(request)
    if (
        not isinstance(data, dict)
        or set(data) != {"inputs"}
        or not isinstance(data["inputs"], list)
    ):
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("body",), "msg": 'expected {"inputs": [...]}'}]
        )
    inputs = data["inputs"]
    if not 1 <= len(inputs) <= MAX_BATCH:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "inputs"),
                    "msg": f"between 1 and {MAX_BATCH} inputs, not {len(inputs)}",
                }
            ]
        )
    parsed = [_parse_input(definition, item, "inputs", i) for i, item in enumerate(inputs)]
    results = await run_batch(
        services.task_engine,
        definition,
        parsed,
        caller=user.sub,
        source="batch",
        concurrency=services.settings.task_batch_concurrency,
    )
    return BatchResponse(results=results)


@router.get("/review", responses={**UNAUTHORIZED, **_FORBIDDEN, **_UNAVAILABLE})
async def list_review_queue(
    user: CurrentUser,
    services: ServicesDep,
    status: ReviewStatus = "open",
    task: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[
        str | None, Query(max_length=64, description="`next_after` of the previous page")
    ] = None,
) -> ReviewPage:
    """Inputs no model could turn into a valid output, and doubtful outputs, oldest first;
    `status` `open` (the default), `resolved` or `dismissed`. Needs `tasks:review`."""
    _require(user, services.settings.task_review_permission)
    stores = services.task_stores
    # One more than the page tells whether another follows (none after a just-full last one).
    found = await stores.reviews.list_items(status=status, task=task, limit=limit + 1, after=after)
    items = found[:limit]
    stored = await stores.runs.stored([i.run_id for i in items])
    return ReviewPage(
        items=[ReviewSummary.of(i, run_stored=i.run_id in stored) for i in items],
        next_after=items[-1].review_id if len(found) > limit else None,
    )


@router.get(
    "/review/{review_id}", responses={**UNAUTHORIZED, **_FORBIDDEN, **_NOT_FOUND, **_UNAVAILABLE}
)
async def get_review_item(
    review_id: ItemId, user: CurrentUser, services: ServicesDep
) -> ReviewDetail:
    """One queued input: its attempts (raw answers and errors), its PipelineVersion, what
    the model reads for it now (the candidates a corrected output must pick from), and
    whether the run that queued it is stored."""
    _require(user, services.settings.task_review_permission)
    item = await services.task_stores.reviews.get_item(review_id)
    if item is None:
        raise NotFound("no_review_item", review_id=review_id[:64])
    run_stored = bool(await services.task_stores.runs.stored([item.run_id]))
    definition = (await _catalog(services)).get(item.task)
    model_input = None
    task_input = _stored_input(definition, item.input) if definition is not None else None
    if definition is not None and task_input is not None:
        prepared = await anyio.to_thread.run_sync(
            lambda: definition.kind.prepare(definition, task_input, shrink=False)
        )
        model_input = prepared.payload
    return ReviewDetail(**item.model_dump(), model_input=model_input, run_stored=run_stored)


@router.post(
    "/review/{review_id}/resolve",
    responses={
        **UNPARSABLE_BODY,
        **TOO_LARGE,
        **UNAUTHORIZED,
        **_FORBIDDEN,
        404: {"model": ErrorBody, "description": "No such item, or its task left the docs."},
        409: {
            "model": ErrorBody,
            "description": "The item is resolved or dismissed already, or it is a "
            "low-confidence item whose run was never stored (`run_stored: false`: dismiss it) "
            "(`conflict`).",
        },
        422: {
            "model": InvalidOutputBody | ValidationErrorBody,
            "description": "The output does not pass the task's stages (`invalid_output`), "
            "or the body does not validate.",
        },
        **_UNAVAILABLE,
    },
)
@needs_permission("task_review_permission")  # under @router.post: set before it registers
async def resolve_review_item(
    review_id: ItemId,
    body: ResolveRequest,
    user: CurrentUser,
    services: ServicesDep,
    language: RequestLanguage,
) -> TaskResult:
    """Submit the corrected output of a queued input (`output`), or confirm a low-confidence
    output as it is (`confirm: true`). It is validated by the task's stages and stored as a
    run with `source: "review"`, the verdict also with the run that queued the item (the
    eval set of `aircoach tasks export-reviews`); the item is then `resolved`. Needs
    `tasks:review` (checked before the body is read)."""
    item = await _open_item(services, review_id)
    definition = (await _catalog(services)).get(item.task)
    if definition is None:
        raise NotFound("task_gone", task=item.task)
    try:
        run = await services.task_engine.resolve_review(
            definition, item, None if body.confirm else body.output, reviewer=user.sub
        )
    except InvalidOutput as exc:
        failure = exc.failure
        invalid = InvalidOutputBody(
            message=messages.text("invalid_output", language, stage=failure.stage),
            stage=failure.stage,
            issues=failure.issues,
        )
        return JSONResponse(invalid.model_dump(), status_code=422)  # type: ignore[return-value]
    except AlreadyResolved:
        raise Conflict("review_item_resolved", review_id=review_id[:64]) from None
    except RunMissing:
        raise Conflict(
            "review_run_missing", review_id=review_id[:64], run_id=item.run_id[:64]
        ) from None
    return TaskResult.from_run(run)


@router.post(
    "/review/{review_id}/dismiss",
    responses={
        **UNPARSABLE_BODY,
        **TOO_LARGE,
        **UNAUTHORIZED,
        **_FORBIDDEN,
        404: {"model": ErrorBody, "description": "No such item (`not_found`)."},
        409: {
            "model": ErrorBody,
            "description": "The item is resolved or dismissed already (`conflict`).",
        },
        422: {"model": ValidationErrorBody, "description": "The body does not validate."},
        **_UNAVAILABLE,
    },
)
@needs_permission("task_review_permission")  # under @router.post: set before it registers
async def dismiss_review_item(
    review_id: ItemId, body: DismissRequest, user: CurrentUser, services: ServicesDep
) -> ReviewItem:
    """Close a queued item with no run and no verdict, with a `note` saying why: for an item
    that cannot be resolved (its input queued under an older version of the task, which
    `resolve` refuses as `input_outdated`; its task gone from the docs; a low-confidence item
    whose run was never stored) or that needs no output. The item is then `dismissed` (listed
    with `status=dismissed`). Needs `tasks:review` (checked before the body is read)."""
    item = await _open_item(services, review_id)
    try:
        return await services.task_engine.dismiss_review(item, reviewer=user.sub, note=body.note)
    except AlreadyResolved:
        raise Conflict("review_item_resolved", review_id=review_id[:64]) from None


async def _open_item(services: Services, review_id: str) -> ReviewItem:
    item = await services.task_stores.reviews.get_item(review_id)
    if item is None:
        raise NotFound("no_review_item", review_id=review_id[:64])
    if item.status == "dismissed":
        raise Conflict("review_item_dismissed", review_id=review_id[:64])
    if item.status != "open":
        raise Conflict("review_item_resolved", review_id=review_id[:64])
    return item


@router.get("/runs", responses={**UNAUTHORIZED, **_FORBIDDEN, **_UNAVAILABLE})
async def list_runs(
    user: CurrentUser,
    services: ServicesDep,
    task: Annotated[str | None, Query(max_length=40)] = None,
    source: Annotated[
        str | None,
        Query(
            max_length=240,
            description="`http`, `sqs`, `batch`, `review`, `eval`, or `sqs:<message id>`",
        ),
    ] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=64,
            json_schema_extra={"format": "date-time"},
            description="Runs created at or after this time (RFC 3339, e.g. 2026-11-25T08:00:00Z).",
        ),
    ] = None,
    cursor: Annotated[
        str | None, Query(max_length=64, description="`next_cursor` of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> RunPage:
    """The runs, newest first, each with its source (`http`, `sqs:<message id>`...), outcome
    and PipelineVersion. Needs `tasks:review`."""
    _require(user, services.settings.task_review_permission)
    after = _utc(since)
    where = RunFilter(task=task, source=source, since=after)
    found = await services.task_stores.runs.list_runs(where, limit=limit + 1, before=cursor)
    runs = found[:limit]
    return RunPage(
        items=[RunSummary.of(r) for r in runs],
        next_cursor=runs[-1].run_id if len(found) > limit else None,
    )


@router.get("/stats", responses={**UNAUTHORIZED, **_FORBIDDEN, **_UNAVAILABLE})
async def get_stats(
    user: CurrentUser,
    services: ServicesDep,
    task: Annotated[str | None, Query(max_length=40)] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=64,
            json_schema_extra={"format": "date-time"},
            description="Count the runs created since (RFC 3339).",
        ),
    ] = None,
) -> list[TaskStats]:
    """Per task: runs by outcome (`ok`, `low_confidence`, `review`), attempts per run, shrunk
    and fallback runs, p50/p95 time, the review queue's size and its oldest item's age, and
    tokens when the model reports them. Counted by the store. Needs `tasks:review`."""
    _require(user, services.settings.task_review_permission)
    after = _utc(since)
    return await task_stats(services.task_stores, task=task, since=after, now=datetime.now(UTC))


@router.get(
    "/runs/{run_id}", responses={**UNAUTHORIZED, **_FORBIDDEN, **_NOT_FOUND, **_UNAVAILABLE}
)
async def get_run(run_id: ItemId, user: CurrentUser, services: ServicesDep) -> TaskRun:
    """One stored run, as audited: input, output, every attempt with its raw answer, and the
    PipelineVersion. Needs `tasks:review`."""
    _require(user, services.settings.task_review_permission)
    run = await services.task_stores.runs.get_run(run_id)
    if run is None:
        raise NotFound("no_run", run_id=run_id[:64])
    return run

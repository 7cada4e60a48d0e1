"""POST /api/update_docs: reload the prompt docs now."""

from __future__ import annotations

import logging

from fastapi import APIRouter

from aircoach.deps import DocsReloader, ServicesDep
from aircoach.knowledge.manual import manual_version
from aircoach.models import DocDetail, ErrorBody, UpdateDocsResponse
from aircoach.routes.responses import TOO_LARGE

router = APIRouter(prefix="/api", tags=["admin"])
log = logging.getLogger(__name__)


@router.post(
    "/update_docs",
    responses={
        401: {"model": ErrorBody, "description": "No, stale or invalid signature or token."},
        403: {
            "model": ErrorBody,
            "description": "A valid token without the admin permission (`ADMIN_PERMISSION`).",
        },
        **TOO_LARGE,
        422: {
            "model": ErrorBody,
            "description": "The docs are invalid (`invalid_docs`); the previous ones keep serving.",
        },
        503: {
            "model": ErrorBody,
            "description": "The prompt source failed (`prompt_unavailable`), or the token "
            "could not be checked (`auth_unavailable`).",
        },
    },
)
async def update_docs(caller: DocsReloader, services: ServicesDep) -> UpdateDocsResponse:
    """Reload the docs from their source and rebuild the system prompt on this instance;
    the other instances pick the new version up within `PROMPT_TTL_S`.

    Authorise with either an HMAC-SHA256 signature of `"{timestamp}.{raw body}"` keyed with
    `UPDATE_DOCS_SECRET` (headers `X-Aircoach-Timestamp: <unix seconds>` and
    `X-Aircoach-Signature: sha256=<hex>`, at most `UPDATE_DOCS_MAX_SKEW_S` seconds off) or a
    bearer token with the `ADMIN_PERMISSION` permission (default `admin:docs`)."""
    snapshot, previous = await services.prompts.reload()
    changed = previous != snapshot.version
    manual = manual_version(snapshot.contents)
    log.info(
        "update_docs by %s: prompt version %s -> %s, manual %s",
        caller,
        previous,
        snapshot.version,
        manual,
    )
    # The course index follows the manual: built now (in a worker thread) rather than by the
    # first student who searches. The docs are reloaded whatever happens to it: a search
    # builds it again, or fails as a tool failure the model explains.
    try:
        await services.knowledge.index_for(snapshot.contents)
    except Exception:
        log.exception("course index for manual %s could not be built", manual)
    return UpdateDocsResponse(
        message="prompt updated" if changed else "prompt unchanged",
        docs_count=len(snapshot.docs),
        docs_details=[
            DocDetail(
                key=d.key,
                version_id=d.version_id,
                etag=d.etag,
                size=d.size,
                last_modified=d.last_modified,
            )
            for d in snapshot.docs
        ],
        prompt_version=snapshot.version,
        previous_version=previous,
        system_prompt=snapshot.text,
        manual_version=manual,
    )

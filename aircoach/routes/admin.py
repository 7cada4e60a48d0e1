"""POST /api/update_docs: reload the prompt docs now."""

from __future__ import annotations

from fastapi import APIRouter

from aircoach.deps import DocsAdmin, RuntimeDep
from aircoach.models import DocDetail, UpdateDocsResponse

router = APIRouter(prefix="/api", tags=["admin"])


@router.post("/update_docs")
async def update_docs(admin: DocsAdmin, runtime: RuntimeDep) -> UpdateDocsResponse:
    """Reload the docs from their source and rebuild the system prompt on this instance;
    the other instances pick the new version up within `PROMPT_TTL_S`."""
    snapshot, previous = await runtime.prompts.reload()
    changed = previous != snapshot.version
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
    )

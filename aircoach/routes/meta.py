"""Health, tool list and history: the routes that never run the agent."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from aircoach.deps import CurrentUser, RuntimeDep
from aircoach.models import HistoryPage, ToolInfo
from aircoach.routes.responses import UNAUTHORIZED, unavailable

router = APIRouter(prefix="/api", tags=["meta"])


@router.get("/health")
async def health(runtime: RuntimeDep) -> dict[str, Any]:
    """Liveness and which backends are configured. Touches no backend, imports no agent code."""
    settings = runtime.settings
    prompt = runtime.prompts.health()
    return {
        # Still 200: the process is alive; "degraded" says a backend is failing.
        "status": "degraded" if prompt["status"] in ("degraded", "unavailable") else "ok",
        "auth": "auth0" if settings.auth0_domain else "dev-issuer",
        "store": "mongodb" if settings.mongodb_uri else "sqlite",
        "model": settings.resolved_model_provider,
        "prompt": prompt,
    }


@router.get(
    "/tools", responses={**UNAUTHORIZED, **unavailable("auth_unavailable", "prompt_unavailable")}
)
async def list_tools(user: CurrentUser, runtime: RuntimeDep) -> list[ToolInfo]:
    """The tools a client may switch on and off in `MessageRequest.tools`, as declared by
    the current prompt docs. An unavailable tool (its service is not configured) stays off
    even when a request switches it on."""
    registry = runtime.tools_for(await runtime.prompts.current())
    return [
        ToolInfo(
            name=spec.name,
            description=spec.description,
            default_enabled=spec.default_enabled,
            source=spec.source,
            return_direct=spec.return_direct,
            available=spec.available,
        )
        for spec in registry.specs.values()
    ]


@router.get(
    "/history", responses={**UNAUTHORIZED, **unavailable("auth_unavailable", "store_unavailable")}
)
async def history(
    user: CurrentUser,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    before: Annotated[
        str | None, Query(max_length=64, description="`next_before` of the previous page")
    ] = None,
) -> HistoryPage:
    """The caller's stored turns, newest first."""
    turns = await runtime.chats.history(user.sub, limit=limit, before=before)
    next_before = turns[-1].timestamp if len(turns) == limit else None
    return HistoryPage(turns=turns, next_before=next_before)

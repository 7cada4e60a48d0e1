"""GET /api/health: liveness and which backends are configured."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from aircoach.deps import ServicesDep

router = APIRouter(prefix="/api", tags=["meta"])


@router.get("/health")
async def health(services: ServicesDep) -> dict[str, Any]:
    """Liveness and which backends are configured. Touches no backend, imports no agent code."""
    settings = services.settings
    prompt = services.prompts.health()
    return {
        # Still 200: the process is alive; "degraded" says a backend is failing.
        "status": "degraded" if prompt["status"] in ("degraded", "unavailable") else "ok",
        "auth": "auth0" if settings.auth0_domain else "dev-issuer",
        "store": settings.store_kind,
        "model": settings.resolved_model_provider,
        "prompt": prompt,
    }

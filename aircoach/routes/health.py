"""GET /api/health: liveness, and the state of every dependency."""

from __future__ import annotations

import time
from typing import Any

import anyio
from fastapi import APIRouter

from aircoach.deps import ServicesDep
from aircoach.services import Services

router = APIRouter(prefix="/api", tags=["meta"])

# The store probe is one indexed read that finds nothing.
_PROBE_USER = "__health__"


@router.get("/health")
async def health(services: ServicesDep) -> dict[str, Any]:
    """Liveness, and the state of every dependency: the token keys (Auth0's cache: fresh, age,
    last error), the store (one cheap read), the prompt, the model configured, the dead-letter
    spool (as this instance last used it). Imports no agent code and shows no secret (no URI,
    key or token; a failure is named by its class)."""
    settings = services.settings
    auth = services.verifier.keys.health()
    prompt = services.prompts.health()
    store = await _probe_store(services)
    dead_letters = services.dead_letters.health()
    failing = (
        auth["status"] in ("degraded", "unavailable")
        or prompt["status"] in ("degraded", "unavailable")
        or store["status"] != "ok"
        or dead_letters["status"] != "ok"
    )
    offline = settings.resolved_model_provider == "offline"
    return {
        # Still 200: the process is alive; "degraded" says a dependency is failing.
        "status": "degraded" if failing else "ok",
        "auth": auth,
        "store": store,
        "prompt": prompt,
        "model": {
            "provider": settings.resolved_model_provider,
            "name": None if offline else settings.model_name,
            "fallback": settings.model_fallback,
        },
        "dead_letters": dead_letters,
    }


async def _probe_store(services: Services) -> dict[str, Any]:
    started = time.monotonic()
    error: str | None = None
    with anyio.move_on_after(services.settings.store_timeout_s) as probe:
        try:
            await services.chats.latest_turn_ids(_PROBE_USER, 1)
        except Exception as exc:
            # The class names the failure; its text may carry a host or a URI.
            cause = exc.__cause__ or exc
            error = type(cause).__name__
    if probe.cancelled_caught:
        error = "timeout"
    return {
        "backend": services.settings.store_kind,
        "status": "unavailable" if error else "ok",
        "latency_ms": round((time.monotonic() - started) * 1000, 1),
        "error": error,
    }

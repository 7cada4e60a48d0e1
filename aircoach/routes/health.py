"""GET /api/health: liveness, and the state of every dependency."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from fastapi import APIRouter, Request

from aircoach.deps import ServicesDep
from aircoach.services import Services

router = APIRouter(prefix="/api", tags=["meta"])

# Each store probe is one indexed read that finds nothing.
_PROBE_USER = "__health__"
# How long a request refused for the store (503 `store_unavailable`) keeps the store degraded.
REFUSAL_WINDOW_S = 60.0


class StoreRefusals:
    """The last request this instance answered 503 `store_unavailable`, and the class of its
    cause: a store that reads but refuses writes (a full disk, a lock another process holds)
    passes the probe's read while every turn fails."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.error: str | None = None

    def note(self, error: str) -> None:
        self.at, self.error = time.monotonic(), error

    def recent(self) -> dict[str, Any] | None:
        """`{"age_s", "error"}` of a refusal within `REFUSAL_WINDOW_S`, else None."""
        if self.at is None or (age := time.monotonic() - self.at) > REFUSAL_WINDOW_S:
            return None
        return {"age_s": round(age, 1), "error": self.error}


@router.get("/health")
async def health(request: Request, services: ServicesDep) -> dict[str, Any]:
    """Liveness, and the state of every dependency: the token keys (Auth0's cache: fresh, age,
    last error), the store and the turn log (one cheap read each, at the same time), the
    prompt, the model configured, the dead-letter spool (as this instance last used it), and
    `store_refused`: a request this instance refused for a store in the last minute.
    Imports no agent code and shows no secret (no URI, key or token; a failure is named by its
    class)."""
    settings = services.settings
    auth = services.verifier.keys.health()
    prompt = services.prompts.health()
    probes: dict[str, dict[str, Any]] = {}

    async def probe(name: str, read: Callable[[], Awaitable[object]]) -> None:
        probes[name] = await _probe(services, read)

    # The turn log is a store of its own (a file of its own on SQLite): every turn claims its
    # thread there, so a turn log that fails fails every turn while the chats read fine.
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe, "store", lambda: services.chats.latest_turn_ids(_PROBE_USER, 1))
        tg.start_soon(
            probe, "turn_log", lambda: services.turn_log.read(_PROBE_USER, _PROBE_USER, limit=1)
        )
    store, turn_log = probes["store"], probes["turn_log"]
    # A store that reads but refuses writes (a full disk) passes the probes: the requests
    # this instance refused for a store (the chats' or the turn log's) say so.
    refused = request.app.state.store_refusals.recent()
    dead_letters = services.dead_letters.health()
    failing = (
        auth["status"] in ("degraded", "unavailable")
        or prompt["status"] in ("degraded", "unavailable")
        or store["status"] != "ok"
        or turn_log["status"] != "ok"
        or dead_letters["status"] != "ok"
        or refused is not None
    )
    offline = settings.resolved_model_provider == "offline"
    return {
        # Still 200: the process is alive; "degraded" says a dependency is failing.
        "status": "degraded" if failing else "ok",
        "auth": auth,
        "store": store,
        "turn_log": turn_log,
        "prompt": prompt,
        "model": {
            "provider": settings.resolved_model_provider,
            "name": None if offline else settings.model_name,
            "fallback": settings.model_fallback,
        },
        "dead_letters": dead_letters,
        "store_refused": refused,
    }


async def _probe(services: Services, read: Callable[[], Awaitable[object]]) -> dict[str, Any]:
    started = time.monotonic()
    error: str | None = None
    with anyio.move_on_after(services.settings.store_timeout_s) as probe:
        try:
            await read()
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

"""GET /api/tools: the tools a client may switch on and off."""

from __future__ import annotations

from fastapi import APIRouter

from aircoach.deps import CurrentUser, ServicesDep
from aircoach.models import ToolInfo
from aircoach.routes.responses import UNAUTHORIZED, unavailable

router = APIRouter(prefix="/api", tags=["meta"])

# The only reason a tool is unavailable today: its service's variable is unset. A student
# reads it; which variable is missing is for the operator (README, Tools).
UNAVAILABLE_REASON = "Non disponibile: il servizio non è configurato su questo server."


@router.get(
    "/tools", responses={**UNAUTHORIZED, **unavailable("auth_unavailable", "prompt_unavailable")}
)
async def list_tools(user: CurrentUser, services: ServicesDep) -> list[ToolInfo]:
    """The tools a client may switch on and off in `MessageRequest.tools`, as declared by
    the current prompt docs. An unavailable tool (its service is not configured) stays off
    even when a request switches it on."""
    registry = services.tools_for(await services.prompts.current())
    tools = []
    for spec in registry.specs.values():
        available = registry.available(spec)
        tools.append(
            ToolInfo(
                name=spec.name,
                label=spec.display_label,
                description=spec.description,
                default_enabled=spec.default_enabled,
                source=spec.source,
                return_direct=spec.return_direct,
                available=available,
                unavailable_reason=None if available else UNAVAILABLE_REASON,
            )
        )
    return tools

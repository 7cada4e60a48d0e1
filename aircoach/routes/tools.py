"""GET /api/tools: the tools a client may switch on and off."""

from __future__ import annotations

from fastapi import APIRouter

from aircoach import messages
from aircoach.deps import CurrentUser, RequestLanguage, ServicesDep
from aircoach.models import ToolInfo
from aircoach.routes.responses import UNAUTHORIZED, unavailable

router = APIRouter(prefix="/api", tags=["meta"])


@router.get(
    "/tools", responses={**UNAUTHORIZED, **unavailable("auth_unavailable", "prompt_unavailable")}
)
async def list_tools(
    user: CurrentUser, services: ServicesDep, language: RequestLanguage
) -> list[ToolInfo]:
    """The tools a client may switch on and off in `MessageRequest.tools`, as declared by
    the current prompt docs, with the `backend` that runs each now. An unavailable tool (its
    service is not configured and it has no embedded backend) stays off even when a request
    switches it on."""
    registry = services.tools_for(await services.prompts.current())
    # The only reason today: its service's variable is unset (and it has no embedded
    # backend). A student reads it; which variable is missing is for the operator (README).
    reason = messages.text("tool_unavailable", language)
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
                backend=spec.backend(registry.env),
                unavailable_reason=None if available else reason,
            )
        )
    return tools

"""Everything a turn needs before its stream starts, and everything that can still fail with
an HTTP status: the tools switched on, the system prompt, the models, the agent, the history.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import anyio

from aircoach.auth.tokens import Principal
from aircoach.auth.userdata import user_data_section
from aircoach.errors import StoreUnavailable
from aircoach.grounding.context import ThreadView, TurnGrounding, with_citation_rule
from aircoach.logs import current_stages
from aircoach.messages import DEFAULT_LANGUAGE, Language
from aircoach.models import MessageRequest
from aircoach.prompts.store import PromptSnapshot
from aircoach.quiz.service import progress_section
from aircoach.services import Services
from aircoach.tools.registry import ToolContext, ToolRegistry, ToolSpec
from aircoach.turn.agent import TurnAgent, build_agent
from aircoach.turn.chat_models import TurnModels
from aircoach.turn.recorder import TurnRecorder
from aircoach.turn.turn import ChatTurn, new_turn_id

log = logging.getLogger(__name__)

QUIZ_TOOLS = frozenset({"domanda_teoria", "verifica_risposta"})


async def prepare_turn(
    services: Services,
    principal: Principal,
    request: MessageRequest,
    snapshot: PromptSnapshot,
    *,
    language: Language = DEFAULT_LANGUAGE,
    turn_id: str | None = None,
) -> ChatTurn:
    """A turn ready to stream. `snapshot`: the prompt the route validated the switches on;
    `language`: of the stream's `error` messages."""
    settings = services.settings
    stages = current_stages()
    registry = services.tools_for(snapshot)
    enabled = registry.enabled(request.tools)
    log.info("%s", registry.log_line(request.tools))
    system_prompt = await _system_prompt(services, principal, request, registry, snapshot, enabled)
    turn_id = turn_id or new_turn_id()
    ctx = ToolContext(
        quiz=await services.quiz_service(),
        user_id=principal.sub,
        env=settings.tool_env,
        turn_id=turn_id,
        client_max_bytes=settings.tool_client_max_bytes,
        knowledge=services.knowledge.search_in(snapshot.contents),
    )
    with stages.timed("agent_build"):
        models = await TurnModels.open(services.models, enabled, streamed=request.stream)

    def agent_for(prompt: str, topic: tuple[str, ...] = ()) -> TurnAgent:
        with stages.timed("agent_build"):
            return build_agent(
                model=models.primary,
                tools=enabled,
                ctx=replace(ctx, topic=topic),
                system_prompt=prompt,
                checkpointer=services.memory.checkpointer,
                history_limit=settings.history_limit,
                failover=models.failover,
                shapes=services.agent_shapes,
                version=snapshot.version,
            )

    try:
        agent = agent_for(system_prompt)
        thread_id = f"{principal.sub}:v{snapshot.version}"
        thread = ThreadView()
        if request.chat_history:
            with stages.timed("history"):
                held = await _load_history(services, agent, thread_id, principal.sub)
            memory_thread, context_turns = thread_id, min(held, settings.history_limit)
            state = await agent.aget_state(services.memory.config(thread_id))
            thread = ThreadView.of(state.values.get("messages", []), settings.history_limit)
        else:
            memory_thread, context_turns = f"{thread_id}:once:{turn_id}", 0
        grounding = TurnGrounding(
            docs=snapshot.contents,
            thread=thread,
            question=request.query,
            caveat=settings.grounding_caveat,
            regenerate=settings.grounding_regenerate,
            history_limit=settings.history_limit,
            base_prompt=system_prompt,
        )
        if grounding.followup:
            # Same thread, a prompt that asks for a concise answer, and retrieval tools that
            # search the conversation's topic first.
            agent = agent_for(grounding.prompt, tuple(grounding.topic))
    except BaseException:
        await models.aclose()
        raise
    return ChatTurn(
        principal=principal,
        request=request,
        agent=agent,
        models=models,
        recorder=TurnRecorder(
            services.chats,
            services.memory,
            services.dead_letters,
            thread_id=thread_id,
            memory_thread=memory_thread,
        ),
        prompt_version=snapshot.version,
        context_turns=context_turns,
        timeout_s=settings.turn_timeout_s,
        language=language,
        turn_id=turn_id,
        grounding=grounding,
    )


async def _system_prompt(
    services: Services,
    principal: Principal,
    request: MessageRequest,
    registry: ToolRegistry,
    snapshot: PromptSnapshot,
    enabled: list[ToolSpec],
) -> str:
    """The docs' prompt, the sources-off warning when it applies, the user's profile and
    their quiz progress (fetched side by side). Neither section ever fails the turn; the
    version (and thread) stays the docs' one."""
    with current_stages().timed("prompt"):
        prompt = registry.system_prompt(with_citation_rule(snapshot.text), enabled)
    if not request.user_data:
        return prompt
    settings = services.settings
    sections = ["", ""]

    async def profile() -> None:
        sections[0] = await user_data_section(
            services.user_data,
            principal.sub,
            fields=settings.user_data_fields,
            timeout_s=settings.user_data_timeout_s,
        )

    async def progress() -> None:
        sections[1] = await _progress_section(services, principal.sub, enabled)

    with current_stages().timed("user_data"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(profile)
            tg.start_soon(progress)
    return "\n\n".join([prompt, *(section for section in sections if section)])


async def _progress_section(services: Services, user_id: str, enabled: list[ToolSpec]) -> str:
    """The student's quiz progress, when a quiz tool is on for this turn (else it is noise)."""
    if not any(spec.name in QUIZ_TOOLS for spec in enabled):
        return ""
    try:
        quiz = await services.quiz_service()
        return progress_section(await quiz.prompt_progress(user_id))
    except Exception as exc:
        reason = exc.__cause__ or exc
        log.warning(
            "quiz progress unavailable for %r: no progress section (%s: %s)",
            user_id,
            type(reason).__name__,
            reason,
        )
        return ""


async def _load_history(services: Services, agent: TurnAgent, thread_id: str, user_id: str) -> int:
    """Make the thread hold the user's stored history; how many turns it holds. A store that
    cannot be read fails the request before anything streams."""
    try:
        return await services.memory.ensure_thread(agent, thread_id, user_id, services.chats)
    except StoreUnavailable:
        raise
    except Exception as exc:
        raise StoreUnavailable() from exc

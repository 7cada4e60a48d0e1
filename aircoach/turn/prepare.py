"""Everything a turn needs before its stream starts, and everything that can still fail with
an HTTP status: the tools switched on, the system prompt, the models, the agent, the history.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio

from aircoach.auth.tokens import Principal
from aircoach.auth.userdata import UserDataSource, user_data_section
from aircoach.errors import StoreUnavailable
from aircoach.grounding.context import ThreadView, TurnGrounding, with_citation_rule
from aircoach.grounding.style import resolved_style
from aircoach.logs import current_stages
from aircoach.memory.extract import ForgetRequest
from aircoach.memory.ports import DEFAULT_CONVERSATION
from aircoach.memory.service import UserMemory
from aircoach.messages import DEFAULT_LANGUAGE, Language
from aircoach.prompts.store import PromptSnapshot
from aircoach.settings import Settings
from aircoach.tools.registry import ToolContext, ToolRegistry, ToolSpec
from aircoach.turn.agent import AgentShapes, TurnAgent, build_agent
from aircoach.turn.chat_models import TurnModels
from aircoach.turn.conversations import thread_owner
from aircoach.turn.dead_letters import DeadLetters
from aircoach.turn.memory import Memory
from aircoach.turn.ports import ChatStore
from aircoach.turn.providers import ModelProvider
from aircoach.turn.recorder import TurnRecorder
from aircoach.turn.turn import ChatTurn, TurnRequest, new_turn_id

log = logging.getLogger(__name__)

# A section a feature adds to the system prompt for this user and these tools ("" for none);
# it must not fail the turn.
PromptSection = Callable[[str, Sequence[ToolSpec]], Awaitable[str]]


@dataclass(frozen=True)
class TurnParts:
    """What a turn is built from, given by the composition root (`Services.turn_parts`):
    `tool_deps(snapshot)` the services the tools of this snapshot may `need` (the quiz, the
    course search), `sections` the features' extra prompt sections (the quiz progress)."""

    settings: Settings
    models: ModelProvider
    memory: Memory
    shapes: AgentShapes
    chats: ChatStore
    dead_letters: DeadLetters
    user_data: UserDataSource | None
    tool_deps: Callable[[PromptSnapshot], Awaitable[Mapping[type, object]]]
    sections: Sequence[PromptSection] = ()
    recall: UserMemory | None = None  # the students' long-term memory; None: none kept


async def prepare_turn(
    parts: TurnParts,
    principal: Principal,
    request: TurnRequest,
    snapshot: PromptSnapshot,
    registry: ToolRegistry,
    *,
    language: Language = DEFAULT_LANGUAGE,
    turn_id: str | None = None,
) -> ChatTurn:
    """A turn ready to stream. `snapshot`: the prompt the route validated the switches on;
    `registry`: the snapshot's tools; `language`: of the stream's `error` messages."""
    settings = parts.settings
    stages = current_stages()
    enabled = registry.enabled(request.tools)
    log.info("%s", registry.log_line(request.tools))
    system_prompt, profile = await _system_prompt(
        parts, principal, request, registry, snapshot, enabled
    )
    turn_id = turn_id or new_turn_id()
    forgetting = parts.recall.forget_request(request.query) if parts.recall else None
    ctx = ToolContext(
        user_id=principal.sub,
        env=settings.tool_env,
        turn_id=turn_id,
        client_max_bytes=settings.tool_client_max_bytes,
        deps=await parts.tool_deps(snapshot),
    )
    with stages.timed("agent_build"):
        models = await TurnModels.open(parts.models, enabled, streamed=request.stream)

    def agent_for(prompt: str, topic: tuple[str, ...] = ()) -> TurnAgent:
        with stages.timed("agent_build"):
            return build_agent(
                model=models.primary,
                tools=enabled,
                ctx=replace(ctx, topic=topic),
                system_prompt=prompt,
                checkpointer=parts.memory.checkpointer,
                history_limit=settings.history_limit,
                failover=models.failover,
                shapes=parts.shapes,
                version=snapshot.version,
            )

    try:
        agent = agent_for(system_prompt)  # to read the thread; the prompt is built on it
        thread_id = memory_thread_id(principal.sub, request.conversation_id, snapshot.version)
        thread = ThreadView()
        if request.chat_history and not forgetting:
            with stages.timed("history"):
                held = await _load_history(
                    parts, agent, thread_id, principal.sub, request.conversation_id
                )
            memory_thread, context_turns = thread_id, min(held, settings.history_limit)
            state = await agent.aget_state(parts.memory.config(thread_id))
            thread = ThreadView.of(state.values.get("messages", []), settings.history_limit)
        else:
            memory_thread, context_turns = f"{thread_id}:once:{turn_id}", 0
        remembered = "" if forgetting else await _recall(parts, principal, request, thread)
        if remembered:
            system_prompt = f"{system_prompt}\n\n{remembered}"
        grounding = TurnGrounding(
            docs=snapshot.contents,
            thread=thread,
            question=request.query,
            caveat=settings.grounding_caveat,
            policy=settings.grounding_mode,
            history_limit=settings.history_limit,
            base_prompt=system_prompt,
            style=resolved_style(request.stile, profile),
            web_search_url=f"{settings.tool_env['SEARXNG_URL'].rstrip('/')}/search"
            if settings.grounding_web_check and settings.tool_env.get("SEARXNG_URL")
            else None,
        )
        if grounding.shaped or remembered:
            # Same thread, a prompt with the memory section, the style asked for and, on a
            # follow-up, the concise prefix, what was covered, and tools that search the
            # conversation's topic first.
            agent = agent_for(
                grounding.prompt, tuple(grounding.topic) if grounding.followup else ()
            )
    except BaseException:
        await models.aclose()
        raise
    return ChatTurn(
        principal=principal,
        request=request,
        agent=agent,
        models=models,
        recorder=TurnRecorder(
            parts.chats,
            parts.memory,
            parts.dead_letters,
            thread_id=thread_id,
            memory_thread=memory_thread,
        ),
        prompt_version=snapshot.version,
        context_turns=context_turns,
        timeout_s=settings.turn_timeout_s,
        language=language,
        turn_id=turn_id,
        grounding=grounding,
        begin=partial(_memory_step, parts, principal, request, turn_id, forgetting=forgetting),
    )


async def _recall(
    parts: TurnParts, principal: Principal, request: TurnRequest, thread: ThreadView
) -> str:
    """The "Memoria dell'utente" section for this question ("" when `use_memory_retrieval` is
    false or no memory is kept), without the topics of the turns the model sees in its history
    (`thread`). A memory that fails never fails the turn."""
    if parts.recall is None or not getattr(request, "use_memory_retrieval", True):
        return ""
    with current_stages().timed("memory"):
        return await parts.recall.section(
            principal.sub, request.query, shown_turns=frozenset(thread.turn_ids)
        )


async def _memory_step(
    parts: TurnParts,
    principal: Principal,
    request: TurnRequest,
    turn_id: str,
    *,
    forgetting: ForgetRequest | None,
) -> str | None:
    """What the turn does to the memory, first thing once it runs (it holds its thread then,
    so a request refused as busy changes nothing): keep what the message says, before
    anything streams, so it is stored whatever happens to the answer; or, for a request to
    forget, clear the memory and return the coach's reply, which is then the answer (a turn
    apart from the thread, which the next turn reseeds from the store)."""
    if forgetting is not None and parts.recall is not None:
        with current_stages().timed("memory"):
            return await parts.recall.forget(principal.sub, forgetting.about)
    await _remember(parts, principal, request, turn_id)
    return None


async def _remember(
    parts: TurnParts, principal: Principal, request: TurnRequest, turn_id: str
) -> None:
    """Keep what the message says about the student."""
    if parts.recall is None:
        return
    conversation = getattr(request, "conversation_id", None) or DEFAULT_CONVERSATION
    with current_stages().timed("memory"):
        await parts.recall.remember(
            principal.sub, request.query, turn_id=turn_id, conversation_id=conversation
        )


async def _system_prompt(
    parts: TurnParts,
    principal: Principal,
    request: TurnRequest,
    registry: ToolRegistry,
    snapshot: PromptSnapshot,
    enabled: list[ToolSpec],
) -> tuple[str, str]:
    """The docs' prompt, the sources-off warning when it applies, the user's profile and the
    features' sections (the quiz progress), fetched side by side when there are several; and
    the profile's section alone (where a student's `stile` is). None of them ever fails the
    turn; the version (and thread) stays the docs' one."""
    with current_stages().timed("prompt"):
        prompt = registry.system_prompt(with_citation_rule(snapshot.text), enabled)
    if not request.user_data:
        return prompt, ""
    settings = parts.settings
    sections = [""] * (1 + len(parts.sections))

    async def profile() -> None:
        sections[0] = await user_data_section(
            parts.user_data,
            principal.sub,
            fields=settings.user_data_fields,
            timeout_s=settings.user_data_timeout_s,
        )

    async def feature(n: int, section: PromptSection) -> None:
        sections[n] = await section(principal.sub, enabled)

    fetches: list[Callable[[], Coroutine[Any, Any, None]]] = [
        partial(feature, n, section) for n, section in enumerate(parts.sections, 1)
    ]
    if parts.user_data is not None:  # no source (no Management API): no profile to fetch
        fetches.append(profile)
    with current_stages().timed("user_data"):
        if len(fetches) <= 1:
            for fetch in fetches:  # a task group and its tasks cost about 40 us a turn
                await fetch()
        else:
            async with anyio.create_task_group() as tg:
                for fetch in fetches:
                    tg.start_soon(fetch)
    return "\n\n".join([prompt, *(section for section in sections if section)]), sections[0]


def memory_thread_id(user_id: str, conversation_id: str | None, version: str) -> str:
    """The checkpointer's thread of a conversation under one prompt version: `sub:vVERSION`
    for the user's default conversation (as before conversations existed, so its history
    stays), `sub:conversation:vVERSION` for another. No `:` in a conversation id, nor in the
    subject as written here (`thread_owner`): no two users' threads can meet."""
    if conversation_id is None:
        return f"{thread_owner(user_id)}:v{version}"
    return f"{thread_owner(user_id)}:{conversation_id}:v{version}"


async def _load_history(
    parts: TurnParts,
    agent: TurnAgent,
    thread_id: str,
    user_id: str,
    conversation_id: str | None,
) -> int:
    """Make the thread hold the conversation's stored history; how many turns it holds. A
    store that cannot be read fails the request before anything streams."""
    try:
        return await parts.memory.ensure_thread(
            agent, thread_id, user_id, parts.chats, conversation_id=conversation_id
        )
    except StoreUnavailable:
        raise
    except Exception as exc:
        raise StoreUnavailable() from exc

"""Per-app runtime: the parts a request needs, wired from settings. Creates no client:
everything that talks to a backend connects lazily, inside the request's event loop."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aircoach.auth import TokenVerifier, build_verifier
from aircoach.prompts import LocalDocSource, PromptSnapshot, PromptSource, PromptStore
from aircoach.settings import Settings
from aircoach.store import ChatStore, QuizStore, build_stores
from aircoach.tools import ToolRegistry, ToolSpec, check_tools_doc
from aircoach.userdata import UserDataSource, build_user_data_source

if TYPE_CHECKING:
    from aircoach.memory import Memory


def build_prompt_source(settings: Settings) -> PromptSource:
    if settings.prompt_bucket:
        from aircoach.s3docs import S3DocSource

        return S3DocSource(settings)
    return LocalDocSource(settings.prompt_docs_dir)


ModelFactory = Callable[[Settings, list[ToolSpec]], Any]


class Runtime:
    def __init__(self, settings: Settings):
        self.settings = settings
        # Replaceable, so tests can hand the app a scripted model.
        self.model_factory: ModelFactory | None = None
        self.verifier: TokenVerifier = build_verifier(settings)
        self.prompts = PromptStore(
            build_prompt_source(settings), ttl_s=settings.prompt_ttl_s, validate=check_tools_doc
        )
        self.chats: ChatStore
        self.quiz: QuizStore
        self.chats, self.quiz = build_stores(settings)
        self._tools: tuple[str, ToolRegistry] | None = None
        self.user_data: UserDataSource | None = build_user_data_source(settings)
        self._quiz_ready = False

    @cached_property
    def memory(self) -> Memory:
        # Imported here so that routes which never chat (health) never import LangGraph.
        from aircoach.memory import Memory

        return Memory(
            max_threads=self.settings.memory_max_threads,
            reseed_turns=self.settings.history_limit,
        )

    def tools_for(self, snapshot: PromptSnapshot) -> ToolRegistry:
        """The tool registry declared by this prompt snapshot's `tools.json` (built once per
        version; the prompt store never accepts a snapshot whose tools.json is invalid)."""
        cached = self._tools
        if cached is None or cached[0] != snapshot.version:
            cached = (snapshot.version, ToolRegistry.from_docs(snapshot.contents))
            self._tools = cached
        return cached[1]

    def build_model(self, tools: list[ToolSpec]) -> Any:
        """A chat model for one request (created in the request's event loop)."""
        if self.model_factory is not None:
            return self.model_factory(self.settings, tools)
        from aircoach.llm import build_model

        return build_model(self.settings, tools)

    def build_fallback_model(self, tools: list[ToolSpec]) -> Any:
        """The `MODEL_FALLBACK` model for one request, or None."""
        if self.model_factory is not None:
            return None  # a test's scripted model stands alone
        from aircoach.llm import build_fallback_model

        return build_fallback_model(self.settings, tools)

    async def quiz_store(self) -> QuizStore:
        """The quiz store, loaded with the demo questions on first use when it is empty."""
        if not self._quiz_ready:
            from aircoach.quiz import seed_demo_questions

            await seed_demo_questions(self.quiz)
            self._quiz_ready = True
        return self.quiz

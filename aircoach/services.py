"""The composition root: every part the routes use, built from settings in one place.

`Services.build(settings)` wires the defaults; a test (or another entry point) passes the
parts it wants instead, e.g. `Services.build(settings, models=ScriptedModels(...))`. Nothing
here creates a client: everything that talks to a backend connects lazily, inside the
request's event loop.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aircoach.auth.tokens import DevIssuer, TokenVerifier
from aircoach.auth.userdata import UserDataSource
from aircoach.knowledge.manual import check_manual
from aircoach.llm.factory import ConfiguredModels
from aircoach.memory.ports import MemoryStore
from aircoach.prompts.sources import LocalDocSource, PromptSource
from aircoach.prompts.store import PromptSnapshot, PromptStore
from aircoach.quiz.ports import AttemptStore, ExamStore, QuizStore, ReviewStore
from aircoach.settings import DEV_ISSUER, AuthSettings, PromptSettings, Settings, StoreSettings
from aircoach.store.spool import FileSpool, S3Spool
from aircoach.tasks.catalog import check_task_docs, load_tasks
from aircoach.tasks.definition import TaskCatalog
from aircoach.tasks.ports import TaskStores
from aircoach.tools.registry import ToolRegistry, check_tools_doc
from aircoach.turn.conversations import ConversationEraser, ConversationForgetter
from aircoach.turn.dead_letters import DeadLetters, TurnSpool
from aircoach.turn.guards import GuardStores
from aircoach.turn.log import TurnLogStore
from aircoach.turn.ports import ChatStore
from aircoach.turn.providers import ModelProvider
from aircoach.turn.run import RunningTurns

if TYPE_CHECKING:
    from aircoach.knowledge.library import CourseKnowledge
    from aircoach.memory.service import UserMemory
    from aircoach.quiz.exams import ExamService
    from aircoach.quiz.service import QuizService
    from aircoach.store.mongo import MongoClients
    from aircoach.tasks.engine import TaskEngine
    from aircoach.tasks.models import TaskModels
    from aircoach.turn.admission import Gate
    from aircoach.turn.agent import AgentShapes
    from aircoach.turn.memory import Memory
    from aircoach.turn.prepare import TurnParts

_UNSET: Any = object()


def build_verifier(settings: AuthSettings) -> TokenVerifier:
    """Auth0 when `AUTH0_DOMAIN` is set, else the dev issuer; no network here (keys load lazily)."""
    if settings.auth0_domain:
        from aircoach.auth.auth0 import Auth0KeySource

        return TokenVerifier(
            Auth0KeySource(settings),
            issuer=f"https://{settings.auth0_domain}/",
            audience=settings.auth0_audience,
            leeway_s=settings.auth_leeway_s,
            cache_ttl_s=settings.auth_cache_ttl_s,
        )
    return TokenVerifier(
        DevIssuer(settings.data_dir),
        issuer=DEV_ISSUER,
        audience=settings.auth0_audience,
        leeway_s=settings.auth_leeway_s,
        cache_ttl_s=settings.auth_cache_ttl_s,
    )


def build_user_data_source(settings: AuthSettings) -> UserDataSource | None:
    """The Management API client when its credentials are set; else no user data at all."""
    if not settings.auth0_management_enabled:
        return None
    from aircoach.auth.auth0 import Auth0Management

    return Auth0Management(settings)


@dataclass(frozen=True)
class Stores:
    chats: ChatStore
    quiz: QuizStore
    attempts: AttemptStore


def mongo_clients(settings: StoreSettings) -> MongoClients | None:
    """The one MongoDB client (pool) every store of a process shares; None without MongoDB.
    Creates no client: it connects on first use, in the running loop."""
    if settings.store_kind != "mongodb":
        return None
    from aircoach.store.mongo import MongoClients

    return MongoClients(settings)


def open_stores(settings: StoreSettings, *, clients: MongoClients | None = None) -> Stores:
    """MongoDB or SQLite, as `STORE` (or `MONGODB_URI`) says: one connection for every
    collection. Creates no client."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import (
            MongoAttemptStore,
            MongoChatStore,
            MongoConnection,
            MongoQuizStore,
        )

        connection = MongoConnection(settings, clients=clients)
        return Stores(
            MongoChatStore(connection), MongoQuizStore(connection), MongoAttemptStore(connection)
        )
    from aircoach.store.sqlite import SqliteAttemptStore, SqliteChatStore, SqliteQuizStore

    path = settings.sqlite_file
    wait = settings.store_timeout_s
    return Stores(
        SqliteChatStore(path, timeout_s=wait),
        SqliteQuizStore(path, timeout_s=wait),
        SqliteAttemptStore(path, timeout_s=wait),
    )


def build_stores(settings: StoreSettings) -> tuple[ChatStore, QuizStore]:
    """The chat and quiz stores of `open_stores`."""
    stores = open_stores(settings)
    return stores.chats, stores.quiz


def build_task_stores(
    settings: StoreSettings, *, clients: MongoClients | None = None
) -> TaskStores:
    """The task collections on the same backend as the chats (creates no client)."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoConnection
        from aircoach.store.mongo_tasks import (
            MongoContactStore,
            MongoReviewQueue,
            MongoTaskRunStore,
            create_task_indexes,
        )

        connection = MongoConnection(settings, create_indexes=create_task_indexes, clients=clients)
        return TaskStores(
            MongoTaskRunStore(connection),
            MongoReviewQueue(connection),
            MongoContactStore(connection),
        )
    from aircoach.store.sqlite_tasks import (
        SqliteContactStore,
        SqliteReviewQueue,
        SqliteTaskRunStore,
    )

    path = settings.sqlite_file
    wait = settings.store_timeout_s
    return TaskStores(
        SqliteTaskRunStore(path, timeout_s=wait),
        SqliteReviewQueue(path, timeout_s=wait),
        SqliteContactStore(path, timeout_s=wait),
    )


def build_guard_stores(
    settings: StoreSettings, *, clients: MongoClients | None = None
) -> GuardStores:
    """Reservations and quota counters on the same backend as the chats (creates no
    client)."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoConnection
        from aircoach.store.mongo_guards import (
            MongoQuotaStore,
            MongoReservationStore,
            create_guard_indexes,
        )

        connection = MongoConnection(settings, create_indexes=create_guard_indexes, clients=clients)
        return GuardStores(MongoReservationStore(connection), MongoQuotaStore(connection))
    from aircoach.store.sqlite_guards import SqliteQuotaStore, SqliteReservationStore

    path = settings.sqlite_file
    wait = settings.store_timeout_s
    return GuardStores(
        SqliteReservationStore(path, timeout_s=wait), SqliteQuotaStore(path, timeout_s=wait)
    )


def build_review_store(
    settings: StoreSettings, *, clients: MongoClients | None = None
) -> ReviewStore:
    """The quiz's review records on the same backend as the chats (creates no client)."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoConnection
        from aircoach.store.mongo_review import MongoReviewStore, create_review_indexes

        return MongoReviewStore(
            MongoConnection(settings, create_indexes=create_review_indexes, clients=clients)
        )
    from aircoach.store.sqlite_review import SqliteReviewStore

    return SqliteReviewStore(settings.sqlite_file, timeout_s=settings.store_timeout_s)


def build_exam_store(settings: StoreSettings, *, clients: MongoClients | None = None) -> ExamStore:
    """Mock exams on the same backend as the chats (creates no client)."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoConnection
        from aircoach.store.mongo_exams import MongoExamStore, create_exam_indexes

        return MongoExamStore(
            MongoConnection(settings, create_indexes=create_exam_indexes, clients=clients)
        )
    from aircoach.store.sqlite_exams import SqliteExamStore

    return SqliteExamStore(settings.sqlite_file, timeout_s=settings.store_timeout_s)


def build_turn_log(settings: StoreSettings, *, clients: MongoClients | None = None) -> TurnLogStore:
    """The turn log on the same backend as the chats (creates no client)."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoConnection
        from aircoach.store.mongo_turnlog import MongoTurnLog, create_turn_log_indexes

        return MongoTurnLog(
            MongoConnection(settings, create_indexes=create_turn_log_indexes, clients=clients)
        )
    from aircoach.store.sqlite_turnlog import SqliteTurnLog

    # A file of its own beside the chats': a turn writes its log three or four times, and
    # SQLite has one writer per file, so the log does not queue behind the turns' own writes.
    path = settings.sqlite_file
    log_file = path.with_name(f"{path.stem}-turns{path.suffix}")
    return SqliteTurnLog(log_file, timeout_s=settings.store_timeout_s)


def build_memory_store(
    settings: StoreSettings, *, clients: MongoClients | None = None
) -> MemoryStore:
    """The students' long-term memory on the same backend as the chats (creates no client)."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoConnection
        from aircoach.store.mongo_memory import MongoMemoryStore, create_memory_indexes

        return MongoMemoryStore(
            MongoConnection(settings, create_indexes=create_memory_indexes, clients=clients)
        )
    from aircoach.store.sqlite_memory import SqliteMemoryStore

    return SqliteMemoryStore(settings.sqlite_file, timeout_s=settings.store_timeout_s)


def build_prompt_source(settings: PromptSettings) -> PromptSource:
    if settings.prompt_bucket:
        from aircoach.prompts.s3 import S3DocSource

        return S3DocSource(settings)
    return LocalDocSource(settings.prompt_docs_dir)


def check_docs(contents: Mapping[str, str], *, python_tool_modules: tuple[str, ...]) -> None:
    """Docs that must not be served raise `ConfigError`: a bad `tools.json` (under these
    settings' module allowlist), a bad task, or a manual whose citations would be ambiguous."""
    check_tools_doc(contents, python_tool_modules=python_tool_modules)
    check_task_docs(contents)
    check_manual(contents)


def build_prompt_store(settings: Settings, **options: Any) -> PromptStore:
    """The prompt store of the settings' source (`options`: e.g. a `clock`); docs that do not
    validate under these settings are never served."""
    return PromptStore(
        build_prompt_source(settings),
        ttl_s=settings.prompt_ttl_s,
        validate=functools.partial(check_docs, python_tool_modules=settings.python_tool_modules),
        **options,
    )


def build_dead_letters(settings: Settings) -> DeadLetters:
    """S3 under DEADLETTER_BUCKET when set, else files under the data dir."""
    spool: TurnSpool
    if settings.deadletter_bucket:
        from aircoach.prompts.s3 import make_s3_client

        spool = S3Spool(
            settings.deadletter_bucket,
            settings.deadletter_prefix,
            client=lambda: make_s3_client(settings),
        )
    else:
        spool = FileSpool(settings.deadletter_folder)
    return DeadLetters(spool)


def _configured_task_models(settings: Settings) -> TaskModels:
    from aircoach.llm.task_models import ConfiguredTaskModels

    return ConfiguredTaskModels(settings)


@dataclass
class Services:
    settings: Settings
    verifier: TokenVerifier
    prompts: PromptStore
    chats: ChatStore
    quiz: QuizStore
    attempts: AttemptStore
    models: ModelProvider
    user_data: UserDataSource | None
    dead_letters: DeadLetters
    task_stores: TaskStores
    task_models: TaskModels
    guards: GuardStores  # client_message_id reservations and quota counters
    turn_log: TurnLogStore  # running turns' events, claims and cancel flags
    reviews: ReviewStore  # the quiz's per-user schedule of each question
    exams: ExamStore  # mock exams
    clock: Callable[[], float] = time.time  # wall-clock seconds: quota windows, reservations
    memory_items: MemoryStore | None = None  # long-term memory; None: none kept
    _knowledge: CourseKnowledge | None = field(default=None, repr=False)
    _tools: tuple[str, ToolRegistry] | None = field(default=None, repr=False)
    _tasks: tuple[tuple[Any, ...], TaskCatalog] | None = field(default=None, repr=False)
    _quiz_service: QuizService | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        verifier: TokenVerifier | None = None,
        prompts: PromptStore | None = None,
        chats: ChatStore | None = None,
        quiz: QuizStore | None = None,
        attempts: AttemptStore | None = None,
        models: ModelProvider | None = None,
        user_data: UserDataSource | None = _UNSET,
        dead_letters: DeadLetters | None = None,
        task_stores: TaskStores | None = None,
        task_models: TaskModels | None = None,
        guards: GuardStores | None = None,
        turn_log: TurnLogStore | None = None,
        reviews: ReviewStore | None = None,
        exams: ExamStore | None = None,
        clock: Callable[[], float] = time.time,
        memory_items: MemoryStore | None = None,
        knowledge: CourseKnowledge | None = None,
    ) -> Services:
        """The parts the settings say, except those given. Every MongoDB store shares one
        client."""
        clients = mongo_clients(settings)
        if chats is None or quiz is None or attempts is None:
            stores = open_stores(settings, clients=clients)
            chats = stores.chats if chats is None else chats
            quiz = stores.quiz if quiz is None else quiz
            attempts = stores.attempts if attempts is None else attempts
        return cls(
            settings=settings,
            verifier=verifier or build_verifier(settings),
            prompts=prompts or build_prompt_store(settings),
            chats=chats,
            quiz=quiz,
            attempts=attempts,
            models=models or ConfiguredModels(settings),
            user_data=build_user_data_source(settings) if user_data is _UNSET else user_data,
            dead_letters=dead_letters or build_dead_letters(settings),
            task_stores=task_stores or build_task_stores(settings, clients=clients),
            task_models=task_models or _configured_task_models(settings),
            guards=guards or build_guard_stores(settings, clients=clients),
            turn_log=turn_log or build_turn_log(settings, clients=clients),
            reviews=reviews or build_review_store(settings, clients=clients),
            exams=exams or build_exam_store(settings, clients=clients),
            clock=clock,
            memory_items=memory_items or build_memory_store(settings, clients=clients),
            _knowledge=knowledge,
        )

    @cached_property
    def task_engine(self) -> TaskEngine:
        from aircoach.tasks.engine import TaskEngine

        return TaskEngine(
            self.task_stores,
            self.task_models,
            self.settings.code_version,
            review_below=self.settings.task_review_below,
        )

    @property
    def knowledge(self) -> CourseKnowledge:
        """The course index (manual and quiz explanations) behind the embedded `kb_search`:
        the one given to `build`, else made on first use (a process that never searches
        never imports it)."""
        if self._knowledge is None:
            from aircoach.knowledge.library import CourseKnowledge

            self._knowledge = CourseKnowledge()
        return self._knowledge

    @cached_property
    def memory(self) -> Memory:
        # Imported here so that routes which never chat (health) never import LangGraph.
        from aircoach.turn.memory import Memory

        return Memory(
            max_threads=self.settings.memory_max_threads,
            reseed_turns=self.settings.history_limit,
        )

    @cached_property
    def agent_shapes(self) -> AgentShapes:
        """The compiled agent structures, one per prompt version and tool set (pure data,
        shared by the requests; each binds its own model, prompt and tools' context)."""
        from aircoach.turn.agent import AgentShapes

        return AgentShapes(
            checkpointer=self.memory.checkpointer, history_limit=self.settings.history_limit
        )

    def tools_for(self, snapshot: PromptSnapshot) -> ToolRegistry:
        """The tool registry declared by this prompt snapshot's `tools.json` (built once per
        version; the prompt store never accepts a snapshot whose tools.json is invalid)."""
        cached = self._tools
        if cached is None or cached[0] != snapshot.version:
            registry = ToolRegistry.from_docs(
                snapshot.contents,
                env=self.settings.tool_env,
                python_tool_modules=self.settings.python_tool_modules,
            )
            cached = self._tools = (snapshot.version, registry)
        return cached[1]

    def tasks_for(self, snapshot: PromptSnapshot) -> TaskCatalog:
        """The tasks of this prompt snapshot (`tasks/<name>/`), parsed once per set of docs.
        Keyed by the docs, not `snapshot.version`: a task edit leaves the prompt version."""
        cached = self._tasks
        if cached is None or cached[0] != snapshot.docs:
            cached = self._tasks = (snapshot.docs, load_tasks(snapshot.contents))
        return cached[1]

    async def quiz_service(self) -> QuizService:
        """The quiz service; its store is loaded with the demo questions when it is empty,
        the first time a question is read (`SeededBank`)."""
        if self._quiz_service is None:
            from aircoach.quiz.bank import SeededBank, chapter_titles
            from aircoach.quiz.service import QuizService

            self._quiz_service = QuizService(
                SeededBank(self.quiz),
                self.attempts,
                await chapter_titles(),
                reviews=self.reviews,
                settings=self.settings,
            )
        return self._quiz_service

    async def exam_service(self) -> ExamService:
        from aircoach.quiz.exams import ExamService

        return ExamService(await self.quiz_service(), self.exams)

    async def tool_deps(self, snapshot: PromptSnapshot) -> dict[type, object]:
        """What the coach's tools `need` in a turn on this snapshot: the quiz service and the
        course search of its docs."""
        from aircoach.knowledge.library import CourseSearch
        from aircoach.quiz.exams import ExamService
        from aircoach.quiz.service import QuizService

        return {
            QuizService: await self.quiz_service(),
            ExamService: await self.exam_service(),
            CourseSearch: self.knowledge.search_in(snapshot.contents),
        }

    @property
    def conversation_eraser(self) -> ConversationEraser:
        """What `DELETE /api/conversations/{id}` removes, and from where: the turns, their log,
        idempotency records and threads, and, feature by feature, the long-term memory derived
        from the conversation (see `aircoach.turn.conversations`)."""
        forgetters: list[ConversationForgetter] = []
        if (memory := self.memory_items) is not None:

            async def forget_memory(user_id: str, conversation_id: str) -> None:
                await memory.forget_conversation(user_id, conversation_id)

            forgetters.append(forget_memory)
        return ConversationEraser(
            chats=self.chats,
            dead_letters=self.dead_letters,
            turn_log=self.turn_log,
            reservations=self.guards.reservations,
            memory=self.memory,
            clock=self.clock,
            running=self.running_turns,
            forgetters=tuple(forgetters),
        )

    @cached_property
    def user_memory(self) -> UserMemory | None:
        """The students' long-term memory (`GET /api/memory`, the turn's memory section)."""
        from aircoach.memory.service import UserMemory

        if self.memory_items is None:
            return None
        return UserMemory(
            self.memory_items,
            max_items=self.settings.memory_max_items,
            prompt_items=self.settings.memory_prompt_items,
            prompt_chars=self.settings.memory_prompt_chars,
        )

    @cached_property
    def gate(self) -> Gate:
        """What a chat request passes before its turn runs (`aircoach.turn.admission`)."""
        from aircoach.turn.admission import Gate

        return Gate(
            guards=self.guards,
            chats=self.chats,
            dead_letters=self.dead_letters,
            turn_log=self.turn_log,
            running=self.running_turns,
            settings=self.settings,
            clock=self.clock,
        )

    @cached_property
    def running_turns(self) -> RunningTurns:
        """The turns this process runs: a cancel made here reaches its turn at once."""
        return RunningTurns()

    @cached_property
    def turn_parts(self) -> TurnParts:
        """What every chat turn is built from (`aircoach.turn.prepare.prepare_turn`)."""
        from aircoach.quiz.tools import progress_prompt_section
        from aircoach.turn.prepare import TurnParts

        return TurnParts(
            settings=self.settings,
            models=self.models,
            memory=self.memory,
            shapes=self.agent_shapes,
            chats=self.chats,
            dead_letters=self.dead_letters,
            user_data=self.user_data,
            tool_deps=self.tool_deps,
            sections=(functools.partial(progress_prompt_section, self.quiz_service),),
            recall=self.user_memory,
        )

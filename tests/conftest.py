"""Shared fixtures. No test reaches the internet or a real model: the guard below fails any
connection that is not to loopback, and any DNS lookup of a public name."""

from __future__ import annotations

import functools
import gc
import ipaddress
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvloop

from tests.clock import FakeClock
from tests.mongo_server import (  # noqa: F401 (fixtures)
    bank_settings,
    mongo_server,
    restartable_mongo,
    store_settings,
)

# The app, its models, the auth issuer and the settings are imported in the fixtures that use
# them, not here (nor in `tests.mongo_server` and the `pytest_plugins`): under xdist the
# controlling process loads these files before it starts the workers and never runs a test,
# and these imports (FastAPI, LangChain, the app: about 2.5 s) made every worker start that
# much later.
if TYPE_CHECKING:
    import httpx
    from fastapi import FastAPI

    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings
    from tests.scripted_model import Script

# Fixtures of fake backends: Auth0 tenant (`tests.fake_auth0`); S3 via moto: `aws_env`, `s3`,
# `moto_server`, `s3_server` (`tests.s3`).
pytest_plugins = ["tests.fake_auth0", "tests.s3"]

# The cyclic garbage collector, tuned for a test process: it imports the app once (FastAPI,
# LangChain, pydantic: about 230,000 objects that live as long as the process), then builds
# and drops hundreds of apps. At the default threshold (700 allocations) it ran about 2,700
# times in a unit run on one process, 2.4 s of its 42 s of CPU, re-scanning the imported
# objects at every full pass. Ten times fewer young collections, and the objects alive after
# collection moved out of its reach (`gc.freeze`): about 1 s. Garbage is still collected,
# only in larger batches.
# Collection only imports, so the collector is off until the tests run, as the app's entries
# do at start-up (aircoach/startup.py): 0.3 s of each worker's 4.8 s of collection.
gc.set_threshold(7000, 10, 10)
gc.disable()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    # Every process runs this hook after collecting, xdist's controller (which collects
    # nothing) included.
    gc.freeze()
    gc.enable()


_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "testserver", "t"}


class NetworkBlocked(AssertionError):
    pass


def _is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host is None or host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def unit_tests_start_nothing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test that starts a server or a subprocess is an integration test: `make test-unit`
    must stay fast and self-contained. A unit test that does either fails here."""
    if request.node.get_closest_marker("integration"):
        return

    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"a unit test {what}: mark it integration")

        return refused

    monkeypatch.setattr(socket.socket, "listen", refuse("listens on a socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("starts a subprocess"))
    # uvloop listens in C, past `socket.listen`; uvicorn (`serve`, `helpers.served`) runs on
    # it, as does every loop `uvloop.run` makes.
    monkeypatch.setattr(uvloop, "new_event_loop", refuse("runs a uvloop loop (a server's)"))


@pytest.fixture(autouse=True)
def no_internet(monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            raise NetworkBlocked(f"test tried to reach {address!r}: tests stay on loopback")

    def connect(self: socket.socket, address: Any) -> Any:
        check(self, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        check(self, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_loopback(host):
            raise NetworkBlocked(f"test tried to resolve {host!r}: tests stay on loopback")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for name in (
        "GOOGLE_API_KEY",
        "GEMINI_BASE_URL",
        "MODEL_BASE_URL",
        "MODEL_FALLBACK",
        "MODEL_NAME",
        "OPENAI_BASE_URL",
        "GEMINI_API_KEY",
        "OPENAI_API_KEY",
        "MODEL_PROVIDER",
        "AUTH0_DOMAIN",
        "MONGODB_URI",
        "PROMPT_BUCKET",
        "AWS_LAMBDA_FUNCTION_NAME",
        "VERCEL",
        "STORE",
        "LOG_FORMAT",
        "DEADLETTER_BUCKET",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand (TTLs, cooldowns, caches)."""
    return FakeClock()


@pytest.fixture(scope="session")
def _dev_key(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """One dev issuer key for the session: generating RSA keys is the slowest part of setup."""
    from aircoach.auth.tokens import DevIssuer

    issuer = DevIssuer(tmp_path_factory.mktemp("dev-key"))
    issuer.private_key  # noqa: B018 - generates and writes the key
    return issuer.key_path.read_bytes()


@pytest.fixture(scope="session")
def _seeded_bank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store file holding the demo question bank, seeded once per session: loading it (373
    questions and their search terms) into a new file takes about 11 ms, and about a hundred
    tests read questions."""
    import asyncio
    import sqlite3
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import closing

    from aircoach.quiz.bank import seed_demo_questions
    from aircoach.store.sqlite import SqliteQuizStore

    path = tmp_path_factory.mktemp("bank") / "quiz.sqlite3"
    # In a thread of its own: an async test may be the first to ask, with its loop running.
    with ThreadPoolExecutor(1) as thread:
        seeded = thread.submit(asyncio.run, seed_demo_questions(SqliteQuizStore(path)))
        assert seeded.result() == 373
    with closing(sqlite3.connect(path)) as conn:  # everything into the main file, the copied one
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture
def bank_file(_seeded_bank: Path, tmp_path: Path) -> Path:
    """A SQLite file of this test's own holding the 373 demo questions."""
    copy = tmp_path / "quiz.sqlite3"
    shutil.copy(_seeded_bank, copy)
    return copy


@pytest.fixture
def data_dir(tmp_path: Path, _dev_key: bytes) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "dev_issuer_key.pem").write_bytes(_dev_key)
    return folder


@functools.lru_cache(maxsize=16)
def _settings_for(environment: tuple[tuple[str, str], ...]) -> Settings:
    """The settings this environment gives (it is the cache key: every variable but pytest's
    own). Building them reads a variable per field, about 8 ms; most tests share one."""
    from aircoach.settings import ROOT, Settings

    return Settings(
        _env_file=None, data_dir=ROOT / ".unused", prompt_docs_dir=ROOT / "prompt_docs", tool_env={}
    )


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    environment = tuple(sorted(i for i in os.environ.items() if i[0] != "PYTEST_CURRENT_TEST"))
    return _settings_for(environment).model_copy(update={"data_dir": data_dir}, deep=True)


@functools.lru_cache(maxsize=4)
def _openapi_for(environment: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    from aircoach.app import create_app

    return create_app(_settings_for(environment)).openapi()


@pytest.fixture
def openapi_schema(settings: Settings) -> dict[str, Any]:
    """The OpenAPI document of an app on these settings, built once per process and
    environment (about 150 ms each time otherwise). Read it; do not change it."""
    environment = tuple(sorted(i for i in os.environ.items() if i[0] != "PYTEST_CURRENT_TEST"))
    return _openapi_for(environment)


@pytest.fixture
def issuer(data_dir: Path) -> DevIssuer:
    from aircoach.auth.tokens import DevIssuer

    return DevIssuer(data_dir)


@pytest.fixture
def token(issuer: DevIssuer, settings: Settings) -> Callable[..., str]:
    """A dev issuer token; the same arguments in one test give the same token, minted once
    (an RS256 signature costs about a millisecond, and the app verifies each new token)."""
    minted: dict[str, str] = {}

    def mint(sub: str = "user-1", **kwargs: Any) -> str:
        key = repr((sub, sorted(kwargs.items())))
        if key not in minted:
            minted[key] = issuer.mint(sub, audience=settings.auth0_audience, **kwargs)
        return minted[key]

    return mint


@pytest.fixture
def auth(token: Callable[..., str]) -> Callable[..., dict[str, str]]:
    def headers(sub: str = "user-1", **kwargs: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {token(sub, **kwargs)}"}

    return headers


class ModelSlot:
    """The app's model provider in tests: the configured models until a test scripts one."""

    def __init__(self, provider: Any):
        self.provider = provider

    async def models_for(self, tools: list[Any]) -> list[Any]:
        return await self.provider.models_for(tools)


@pytest.fixture
def models(settings: Settings) -> ModelSlot:
    from aircoach.llm.factory import ConfiguredModels

    return ModelSlot(ConfiguredModels(settings))


@pytest.fixture
def app(settings: Settings, models: ModelSlot) -> FastAPI:
    from tests.helpers import app_with

    return app_with(settings, models=models)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    from tests.helpers import asgi_client

    async with asgi_client(app) as c:
        yield c


@pytest.fixture
def script(models: ModelSlot) -> Iterator[Callable[[list[Any]], Script]]:
    """Give the app a scripted model: `script([call(...), text(...)])`. Fails the test if a
    reply is left unused."""
    from tests.scripted_model import Script, ScriptedModels

    scripts: list[Script] = []

    def use(replies: list[Any]) -> Script:
        s = Script(replies)
        scripts.append(s)
        models.provider = ScriptedModels(s)
        return s

    yield use
    for s in scripts:
        s.assert_used()


# Tests that need a backend fake beside them (moto, nx-27017, a loopback server) are
# integration tests: `make test` runs them, `make test-unit` leaves them out.
_BACKEND_FIXTURES = {
    "aws_env",
    "s3",
    "s3_server",
    "sqs",
    "moto_server",
    "mongo_server",
    "restartable_mongo",
    "tenant",
    "tool_service",
    "gemini_api",
    "openai_api",
}


# Folders and modules whose every test carries exactly these of our markers (by their
# `pytestmark`, or `integration` by a backend fixture above), by path under tests/. When `-m`
# deselects those markers they are not even imported: `make test-unit` never loads Hypothesis,
# schemathesis, Playwright, the servers' harness or the modules of integration tests alone. A
# run that collects them (`make test`) checks that each of their tests carries these markers
# and no other of ours, so `-m` selects a file's tests all or none.
_MARKED_PATHS = {
    "load": ("load", "integration"),
    "browser": ("browser", "integration"),
    "abuse": ("integration",),
    "ai_sdk": ("integration",),
    "clients": ("integration",),
    "deploy": ("integration",),
    "grounding/test_end_to_end.py": ("integration",),
    "grounding/test_guard_cost.py": ("integration",),
    "grounding/test_web_check.py": ("integration",),
    "knowledge/test_conversations.py": ("integration",),
    "llm/test_disconnect.py": ("integration",),
    "llm/test_failures.py": ("integration",),
    "llm/test_gemini.py": ("integration",),
    "llm/test_lambda.py": ("integration",),
    "llm/test_offline_course.py": ("integration",),
    "llm/test_openai.py": ("integration",),
    "llm/test_turn_timeout.py": ("integration",),
    "memory/test_memory_across_instances.py": ("integration",),
    "prompts/test_publish.py": ("integration",),
    "prompts/test_reload.py": ("integration",),
    "prompts/test_s3.py": ("integration",),
    "quiz/test_chat_exam.py": ("integration",),
    "quiz/test_chat_phrases.py": ("integration",),
    "store/test_one_client.py": ("integration",),
    "store/test_sqlite_sharing.py": ("integration",),
    "tasks/test_callback.py": ("integration",),
    "tasks/test_providers.py": ("integration",),
    "telemetry/test_export.py": ("integration",),
    "test_server.py": ("integration",),
    "tools/test_http_tools.py": ("integration",),
    "turn/test_conversations.py": ("integration",),
    "turn/test_quiz_loop.py": ("integration",),
    "turn/test_regenerate_grading.py": ("integration",),
    "turn/test_streams_across_instances.py": ("integration",),
    "turn/test_user_data.py": ("integration",),
    "turn/test_warm_cold.py": ("integration",),
}
_OUR_MARKERS = ("integration", "load", "browser")
_TESTS = Path(__file__).resolve().parent


def _marked_path(path: Path) -> str | None:
    """The `_MARKED_PATHS` key that holds `path`, if any."""
    try:
        relative = path.resolve().relative_to(_TESTS).as_posix()
    except ValueError:
        return None
    return next(
        (key for key in _MARKED_PATHS if relative == key or relative.startswith(key + "/")),
        None,
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    expression = config.option.markexpr
    key = _marked_path(collection_path)
    if not expression or key is None:
        return None
    # pytest's own `-m` grammar (the module is private, stable since pytest 6).
    from _pytest.mark.expression import Expression

    markers = _MARKED_PATHS[key]
    selected = Expression.compile(expression).evaluate(lambda name, **_: name in markers)
    return True if not selected else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        uses_backend = _BACKEND_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses_backend or "mongo" in params.values():
            item.add_marker(pytest.mark.integration)
        key = _marked_path(item.path)
        if key is not None:
            marked = {m for m in _OUR_MARKERS if item.get_closest_marker(m) is not None}
            if marked != set(_MARKED_PATHS[key]):
                raise pytest.UsageError(
                    f"{item.nodeid} is marked {sorted(marked)}, yet tests/conftest.py "
                    f"_MARKED_PATHS[{key!r}] says every test there is {_MARKED_PATHS[key]}"
                )

"""Helpers the test modules share: apps built from explicit parts, ASGI clients, a chat turn
as a client sees it, and a private copy of the prompt docs."""

from __future__ import annotations

import asyncio
import copy
import functools
import socket
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from aircoach.app import create_app
from aircoach.knowledge.library import CourseKnowledge
from aircoach.prompts.sources import DocInfo, LocalDocSource
from aircoach.prompts.store import PromptSnapshot, PromptStore
from aircoach.services import Services, check_docs
from aircoach.settings import ROOT, Settings
from tests.sse import parse_sse

# One course index per test process, as one per server process: it is built for a manual's
# version and rebuilt when that changes, so apps with other docs still get theirs.
_KNOWLEDGE = CourseKnowledge()


def app_with(settings: Settings, **parts: Any) -> FastAPI:
    """An app whose services are the settings' defaults except `parts` (see `Services.build`).
    Its course index is the process's; on the shipped docs, its prompt store starts from the
    process's checked copy of them (`ShippedDocs`)."""
    parts.setdefault("knowledge", _KNOWLEDGE)
    if "prompts" not in parts and _on_shipped_docs(settings):
        parts["prompts"] = PromptStore(
            ShippedDocs(_shipped_snapshot(settings.python_tool_modules)),
            ttl_s=settings.prompt_ttl_s,
        )
    return create_app(services=Services.build(settings, **parts))


def _on_shipped_docs(settings: Settings) -> bool:
    return not settings.prompt_bucket and settings.prompt_docs_dir == ROOT / "prompt_docs"


class ShippedDocs:
    """The shipped prompt docs as a prompt source, from one snapshot per test process. A
    `LocalDocSource` of `prompt_docs/` lists, hashes, reads and checks the twenty docs again
    for each app (about 4 ms of CPU; some 300 apps a run); this one serves the docs the
    process loaded and checked once (`_shipped_snapshot`). Tests of loading docs use their
    own folder or bucket, and get the real sources."""

    name = "local"

    def __init__(self, snapshot: PromptSnapshot):
        self.snapshot = snapshot

    async def list_docs(self) -> list[DocInfo]:
        return list(self.snapshot.docs)

    async def read_doc(self, info: DocInfo) -> tuple[str, DocInfo]:
        return self.snapshot.contents[info.key], info


@functools.cache
def _shipped_snapshot(python_tool_modules: tuple[str, ...]) -> PromptSnapshot:
    """`prompt_docs/` loaded and checked by a real prompt store, as an app on these modules
    would (in a thread of its own: the caller may be inside an event loop)."""
    store = PromptStore(
        LocalDocSource(ROOT / "prompt_docs"),
        ttl_s=0,
        validate=functools.partial(check_docs, python_tool_modules=python_tool_modules),
    )
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, store.current()).result()


def services_of(app: FastAPI) -> Services:
    return app.state.services


@asynccontextmanager
async def asgi_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        yield c


async def chat(
    client: httpx.AsyncClient, headers: dict[str, str], query: str, **body: Any
) -> list[dict[str, Any]]:
    """One streamed turn; the events as a client parses them."""
    response = await client.post(
        "/api/stream_query", json={"query": query, **body}, headers=headers
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


async def prepared_turn(app: FastAPI, sub: str, query: str) -> Any:
    """A turn of `sub` prepared as the chat route prepares it, not yet run: a test runs (or
    stops) its `events()` itself."""
    from aircoach.auth.tokens import Principal
    from aircoach.models import MessageRequest
    from aircoach.turn.prepare import prepare_turn

    services = services_of(app)
    snapshot = await services.prompts.current()
    return await prepare_turn(
        services.turn_parts,
        Principal(sub),
        MessageRequest(query=query),
        snapshot,
        services.tools_for(snapshot),
    )


def shipped_docs() -> dict[str, str]:
    """The shipped prompt docs by key, sub-folders included (`tasks/email_triage/task.json`)."""
    root = ROOT / "prompt_docs"
    return {
        path.relative_to(root).as_posix(): path.read_text("utf-8")
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def copy_prompt_docs(folder: Path, *, markdown_only: bool = False) -> Path:
    """A private copy of the shipped prompt docs, for a test that edits them (`markdown_only`:
    the top-level Markdown docs alone, so no tools and no tasks)."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, text in shipped_docs().items():
        if markdown_only and ("/" in key or not key.endswith(".md")):
            continue
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        (folder / key).write_text(text, "utf-8")
    return folder


class ObservedChats:
    """A chat store that counts the calls made to it and signals each stored turn (thread-safe:
    a server under test may run its own event loop in another thread)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.stored = threading.Event()
        self.turns: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not callable(method):
            return method

        async def observed(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            result = await method(*args, **kwargs)
            if name == "append_turn":
                self.turns.append(args[0])
                self.stored.set()
            return result

        return observed

    @property
    def reseeds(self) -> int:
        """Threads rebuilt from the store: each one reads the user's recent turns."""
        return self.calls["recent_turns"]


@contextmanager
def served(
    app: FastAPI, *, receipt_timeout_s: float = 30.0, log_level: str = "warning"
) -> Iterator[str]:
    """`app` behind a real uvicorn server on a free loopback port, in a thread, configured
    as `serve` configures it (receipt deadline, header limit); its URL. uvicorn is imported
    here: only integration tests serve."""
    import uvicorn

    from aircoach.entry.server import server_config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        server_config(
            app,
            receipt_timeout_s=receipt_timeout_s,
            lifespan="off",
            log_level=log_level,
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn did not start"
            threading.Event().wait(0.01)
        host, port = sock.getsockname()
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def load_serverless_yml() -> dict[str, Any]:
    """serverless.yml as data; CloudFormation tags (`!GetAtt X.Arn`) become `{tag: value}`.
    Parsed once per process (PyYAML's pure-Python loader: about 60 ms); each caller gets its
    own copy."""
    return copy.deepcopy(_parsed_serverless_yml())


@functools.cache
def _parsed_serverless_yml() -> dict[str, Any]:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor(
        "!", lambda loader, tag, node: {tag: loader.construct_scalar(node)}
    )
    return yaml.load((ROOT / "serverless.yml").read_text(), Loader=Loader)

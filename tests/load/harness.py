"""The load harness: a real server in a subprocess, a bounded concurrent client, and the checks
every load and fault test shares (a full answer or a clear error; answered turns stored)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from aircoach.settings import ROOT
from tests.loopback import free_port
from tests.sse import parse_sse

# The error codes a client may see, in a JSON error body or an `error` SSE event.
KNOWN_CODES = frozenset(
    {
        "store_unavailable",
        "prompt_unavailable",
        "auth_unavailable",
        "model_unavailable",
        "persist_failed",
        "invalid_token",
        "missing_token",
        "forbidden",
    }
)
_START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 60.0  # a request that takes longer is a hang, and fails the test
RUN_TIMEOUT_S = 900.0  # a whole load run


class ServerProcess:
    """`python -m aircoach serve` on a free loopback port, as production runs it (uvicorn, one
    process). It runs in `workdir`, so no developer `.env` is read; its output goes to a log
    file that a failing test shows."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LOG_LEVEL": "WARNING",
            **env,
        }
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "aircoach", "serve", "--port", str(self.port)],
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        # A subprocess gives no readiness event to wait on: poll its health route.
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"server exited with {self._process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server not ready within {_START_TIMEOUT_S}s:\n{self.log()}")

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def memory_mb(self) -> tuple[float, float]:
        """The server's resident memory now and at its peak (VmRSS, VmHWM), in MB."""
        assert self._process is not None, "not started"
        fields = {}
        for line in Path(f"/proc/{self._process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
        return fields["VmRSS"], fields["VmHWM"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._process = None


@contextmanager
def two_servers(
    workdir: Path, env: dict[str, str], mongo_uri: str | None = None
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two server processes that share one store, as two instances of a deploy do: the SQLite
    file in `env`'s `DATA_DIR`, or a fresh database of the MongoDB at `mongo_uri`. No Auth0
    and no S3 (the dev issuer and the local docs) unless `env` says otherwise."""
    env = {"AUTH0_DOMAIN": "", "PROMPT_BUCKET": "", "MONGODB_URI": "", **env}
    if mongo_uri is not None:
        env |= {"MONGODB_URI": mongo_uri, "MONGODB_DB": f"t{time.time_ns():x}"}
    a = ServerProcess(workdir / "a", env).start()
    b = ServerProcess(workdir / "b", env)
    try:
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


@dataclass
class Outcome:
    """One request as the client saw it."""

    user: str
    query: str
    status: int
    content_type: str
    elapsed_s: float
    started_at: float = 0.0  # time.monotonic() when the request was sent
    events: list[dict[str, Any]] = field(default_factory=list)
    body: Any = None  # the JSON body of a non-stream answer

    @property
    def streamed(self) -> bool:
        return self.status == 200 and self.content_type.startswith("text/event-stream")

    @property
    def done(self) -> dict[str, Any] | None:
        return self.events[-1] if self.events and self.events[-1]["type"] == "done" else None

    @property
    def error_codes(self) -> list[str]:
        if self.streamed:
            return [e["code"] for e in self.events if e["type"] == "error"]
        if isinstance(self.body, dict) and "error" in self.body:
            return [self.body["error"]]
        return []

    @property
    def answered(self) -> bool:
        """A turn the client was told is done and kept: `done` with a turn id, no
        `persist_failed`. Every such turn must be in the store."""
        return (
            self.done is not None
            and bool(self.done.get("turn_id"))
            and "persist_failed" not in self.error_codes
        )

    @property
    def answer(self) -> str:
        return "".join(e["content"] for e in self.events if e["type"] == "agent_message")

    def describe(self) -> str:
        shown = self.events if self.streamed else self.body
        return (
            f"{self.user} {self.query!r} at {self.started_at:.3f} for {self.elapsed_s:.3f}s "
            f"-> {self.status} {self.content_type} {shown!r}"
        )


def check_clear(outcome: Outcome, codes: Iterable[str] = KNOWN_CODES) -> None:
    """A full answer (an SSE stream that ends in `done`, with a non-empty answer or a final
    tool result) or a clear error (a JSON error with a known code and a message, or `error`
    events with known codes, the stream still ending in `done`). Never a 500."""
    allowed = set(codes)
    if outcome.streamed:
        types = [e["type"] for e in outcome.events]
        assert types and types[-1] == "done" and types.count("done") == 1, outcome.describe()
        done = outcome.done
        assert done and done["turn_id"] and done["prompt_version"], outcome.describe()
        for event in outcome.events:
            if event["type"] == "error":
                assert event["code"] in allowed and event["message"], outcome.describe()
        final_tool = any(e["type"] == "tool_result" and e["final"] for e in outcome.events)
        assert outcome.answer.strip() or final_tool, outcome.describe()
        return
    assert outcome.status in (401, 403, 503), outcome.describe()
    assert outcome.content_type.startswith("application/json"), outcome.describe()
    assert isinstance(outcome.body, dict), outcome.describe()
    assert outcome.body.get("error") in allowed and outcome.body.get("message"), outcome.describe()


async def send_turn(
    client: httpx.AsyncClient, user: str, token: str, query: str, **body: Any
) -> Outcome:
    started, started_at = time.perf_counter(), time.monotonic()
    headers = {"Authorization": f"Bearer {token}"}
    received: list[bytes] = []
    # A hang is an outcome that fails `check_clear` (status 0) naming the request, when it was
    # sent and what came of it, so a failing run says which one (the server's log is in its
    # workdir): no response within REQUEST_TIMEOUT_S, or a stream that has not ended by then
    # (the heartbeat keeps a stuck stream's reads alive, so httpx's timeout never fires).
    with anyio.move_on_after(REQUEST_TIMEOUT_S) as deadline:
        try:
            async with client.stream(
                "POST", "/api/stream_query", json={"query": query, **body}, headers=headers
            ) as response:
                async for chunk in response.aiter_bytes():
                    received.append(chunk)
        except httpx.TimeoutException as exc:
            waited = time.perf_counter() - started
            return Outcome(user, query, 0, "", waited, started_at, body=type(exc).__name__)
    raw = b"".join(received)
    if deadline.cancelled_caught:
        waited = time.perf_counter() - started
        got = raw[-1000:].decode(errors="replace")
        return Outcome(user, query, 0, "", waited, started_at, body=f"no end; the last: {got!r}")
    elapsed = time.perf_counter() - started
    content_type = response.headers.get("content-type", "")
    outcome = Outcome(user, query, response.status_code, content_type, elapsed, started_at)
    if outcome.streamed:
        outcome.events = parse_sse(raw.decode())
    else:
        try:
            outcome.body = json.loads(raw)
        except ValueError:
            outcome.body = raw.decode(errors="replace")
    return outcome


Plan = Sequence[tuple[str, Sequence[str]]]  # (user, that user's queries in order)


async def run_load(
    base_url: str,
    plan: Plan,
    token_for: Callable[[str], str],
    *,
    concurrency: int,
    body: dict[str, Any] | None = None,
    after: Callable[[int], Awaitable[None]] | None = None,
) -> tuple[list[Outcome], float]:
    """Each user sends its queries one after the other (a person waits for the answer); at
    most `concurrency` requests are in flight. `after(n)` runs, awaited, after the n-th
    request finished: the hook fault tests use to break a backend mid-run. Returns the
    outcomes in completion order and the elapsed time."""
    limiter = anyio.Semaphore(concurrency)
    outcomes: list[Outcome] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)

    async def user_session(client: httpx.AsyncClient, user: str, queries: Sequence[str]) -> None:
        token = token_for(user)
        for query in queries:
            async with limiter:
                outcome = await send_turn(client, user, token, query, **(body or {}))
            outcomes.append(outcome)
            if after is not None:
                await after(len(outcomes))

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as client:
        # Bounded so a stuck server fails the test instead of hanging it; generous, because
        # a slow run is not a failure (a theory turn is two model steps and a course search;
        # 1,000 turns took 144 s on a busy 2-core machine; each request has its own
        # REQUEST_TIMEOUT_S).
        with anyio.fail_after(RUN_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for user, queries in plan:
                    tg.start_soon(user_session, client, user, queries)
    return outcomes, time.perf_counter() - started


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def figures(label: str, outcomes: Sequence[Outcome], elapsed_s: float) -> str:
    times = [o.elapsed_s * 1000 for o in outcomes]
    return (
        f"{label}: {len(outcomes)} requests in {elapsed_s:.2f}s = "
        f"{len(outcomes) / elapsed_s:.0f} req/s; p50 {percentile(times, 50):.0f} ms, "
        f"p95 {percentile(times, 95):.0f} ms, max {max(times):.0f} ms"
    )


def sqlite_turns(path: Path) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(path)) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM chats ORDER BY timestamp, turn_id")]


def check_stored(outcomes: Sequence[Outcome], stored_ids: Iterable[str]) -> None:
    """Every answered turn is stored; nothing is stored that no client was told about (a turn
    reported `persist_failed` may still have reached the store before the failure)."""
    stored = list(stored_ids)
    assert len(stored) == len(set(stored)), "a turn id is stored twice"
    answered = {o.done["turn_id"] for o in outcomes if o.answered and o.done}
    told = {o.done["turn_id"] for o in outcomes if o.done}
    missing = answered - set(stored)
    assert not missing, f"{len(missing)} answered turns are not stored: {sorted(missing)[:5]}"
    unknown = set(stored) - told
    assert not unknown, f"{len(unknown)} stored turns no client saw: {sorted(unknown)[:5]}"

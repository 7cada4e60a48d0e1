"""The server with parts of a turn taken out, to measure what each part costs: the parts the
peer benchmark's service (agent-service-toolkit) does not have. A diagnostic, not a
configuration: each part is replaced in the running process (monkeypatched), so this module
follows the code it patches and breaks when that code moves (`bench_feature_cost.py` runs it
and checks every answer).

`WITHOUT=auth,memory python -m bench.without --port P` serves as `python -m aircoach serve`
with those parts out; `WITHOUT=all` takes out every part; `WITHOUT=hops` runs every store
operation on the loop instead of a thread (`bench_hops.py`). Loaded through
`bench/without_site/sitecustomize.py` (on `PYTHONPATH`), the same patches apply to a server
started by another harness (`../shared/peer-bench`'s `bench_ab.py`).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from collections.abc import Callable
from typing import Any


def _auth() -> None:
    """The token's claims read without checking its signature, audience or expiry."""
    from aircoach.auth import tokens

    async def verify(self: Any, token: str) -> tokens.Principal:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return tokens.Principal(sub=claims["sub"], claims=claims)

    tokens.TokenVerifier.verify = verify  # type: ignore[method-assign]


def _admission() -> None:
    """No idempotency reservation, quota charge or thread claim."""
    from aircoach.turn import admission
    from aircoach.turn.turn import new_turn_id

    async def admit(gate: Any, user_id: str, key: str | None, **_: Any) -> admission.Admission:
        return admission.Admission(new_turn_id())

    async def hold_thread(*args: Any, **kwargs: Any) -> None:
        return None

    admission.admit = admit
    admission.hold_thread = hold_thread


def _user_data() -> None:
    """No profile and no feature sections (the quiz progress) in the prompt."""
    from aircoach.grounding.context import with_citation_rule
    from aircoach.turn import prepare

    async def system_prompt(
        parts: Any, principal: Any, request: Any, registry: Any, snapshot: Any, enabled: Any
    ) -> tuple[str, str]:
        return registry.system_prompt(with_citation_rule(snapshot.text), enabled), ""

    prepare._system_prompt = system_prompt


def _memory() -> None:
    """No long-term memory read or written (the turns are built without one, as when none is
    kept)."""
    import dataclasses
    from functools import cached_property

    from aircoach.services import Services

    built = Services.__dict__["turn_parts"]

    @cached_property
    def turn_parts(self: Services) -> Any:
        return dataclasses.replace(built.func(self), recall=None)

    turn_parts.__set_name__(Services, "turn_parts")
    Services.turn_parts = turn_parts  # type: ignore[assignment]


def _grounding() -> None:
    """No citation guard."""
    from aircoach.turn.turn import ChatTurn

    async def grounded(self: Any, deadline: float) -> Any:
        return
        yield

    ChatTurn._grounded = grounded  # type: ignore[method-assign]


def _persist() -> None:
    """The turn is not stored (the warm thread still counts it)."""
    from aircoach.turn.recorder import TurnRecorder

    async def record(self: TurnRecorder, turn: Any) -> bool:
        self.attempted, self.outcome = True, "stored"
        if self.joins_history and turn.status == "ok":
            self.memory.record_turn(self.thread_id, turn.turn_id)
        if not self.joins_history:
            await self.memory.checkpointer.adelete_thread(self.memory_thread)
        return True

    TurnRecorder.record = record  # type: ignore[method-assign]


def _turn_log() -> None:
    """No turn log: nothing written, no ticker (the live connection still reads the run)."""
    import anyio

    from aircoach.turn.run import TurnRun

    async def flush(self: TurnRun, *, last: bool = False, ending: Any = None) -> None:
        if ending is not None:
            self.events.append(ending)
            self._wake()

    async def tick(self: TurnRun, *args: Any) -> None:
        await anyio.sleep_forever()

    TurnRun._flush = flush  # type: ignore[method-assign]
    TurnRun._tick = tick  # type: ignore[method-assign]


def _middleware() -> None:
    """Without our ASGI middleware (request id, CORS, the JSON 500, body limits)."""
    import aircoach.app

    build = aircoach.app.create_app
    ours = {"RequestIdMiddleware", "CORSMiddleware", "UnhandledErrors", "BodyLimit"}

    def create_app(*args: Any, **kwargs: Any) -> Any:
        app = build(*args, **kwargs)
        app.user_middleware = [m for m in app.user_middleware if m.cls.__name__ not in ours]
        return app

    aircoach.app.create_app = create_app


PARTS: dict[str, Callable[[], None]] = {
    "auth": _auth,
    "admission": _admission,
    "user_data": _user_data,
    "memory": _memory,
    "grounding": _grounding,
    "persist": _persist,
    "turn_log": _turn_log,
    "middleware": _middleware,
}


def _hops() -> None:
    """Every store operation run on the event loop instead of a thread (aircoach/threads.py):
    what the hops to a thread and back cost. It blocks the loop, which the serverless rules
    forbid: a measurement, never a way to run."""
    from aircoach import threads

    async def run(self: Any, fn: Callable[[], Any], *, abandon_on_cancel: bool = False) -> Any:
        return fn()

    threads.Threads.run = run  # type: ignore[method-assign]


# Not parts the peer lacks (so not in `all`): the way ours does its parts, taken out by name.
LESIONS: dict[str, Callable[[], None]] = {"hops": _hops}


def apply(names: str) -> list[str]:
    """Take out the parts named (comma-separated; `all` for every one of `PARTS`; a lesion
    of `LESIONS` by its name); the names taken."""
    chosen = list(PARTS) if names.strip() == "all" else [n for n in names.split(",") if n]
    known = {**PARTS, **LESIONS}
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise SystemExit(f"unknown parts {unknown}; known: {', '.join(known)}")
    for name in chosen:
        known[name]()
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    apply(os.environ.get("WITHOUT", ""))
    from aircoach.entry.cli import main as cli

    cli(["serve", "--host", "127.0.0.1", "--port", str(args.port)])


if __name__ == "__main__":
    main()

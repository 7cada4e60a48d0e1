"""What the citation guard may cost (issue 29, case 9): its work grows linearly with the
answer (a 300 KB answer dense with citations took 29 s of CPU: every match was compared with
every other), and it runs within the turn's deadline (`TURN_TIMEOUT_S`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from aircoach.errors import TurnTimeout
from aircoach.grounding import context as grounding_context
from aircoach.grounding.guard import ContextIndex, Source, check
from aircoach.grounding.models import GroundingResult
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, text

# CPU timed over 300 KB answers, and a turn that waits out a 2 s deadline: 4 s of a unit run.
pytestmark = pytest.mark.integration

DENSE = (
    "Secondo l'art. 1, comma 231 della L. 199/2025 e il SERA.5005(f), vedi anche FCL.210.A e "
    "il Reg. (UE) 923/2012, comma 3, lettera a). "
)
PLAIN = "Il pilota controlla il carburante e il meteo prima di ogni volo. "
CONTEXT = ContextIndex.of([Source("docs", "d", "art. 1 comma 231 L. 199/2025 SERA.5005 (f)")])


def _answer(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _timed(answer: str) -> tuple[float, GroundingResult | None]:
    started = time.process_time()
    result = check(answer, CONTEXT)
    return time.process_time() - started, result


@pytest.mark.parametrize("unit", [DENSE, DENSE + PLAIN * 3, "comma 1, 2, 3, 4, 5 e 6; "])
def test_the_guard_is_linear_in_the_answer(unit):
    small = min(_timed(_answer(unit, 30_000))[0] for _ in range(3))
    large, result = _timed(_answer(unit, 300_000))
    assert result is not None and result.citations  # the large answer is read, not skipped
    ratio = large / max(small, 1e-3)
    # 10x the text: about 10x the work (it was over 80x); generous for a shared machine.
    assert ratio < 30, f"{ratio:.1f}x the CPU for 10x the answer"


@pytest.fixture
def docs_index_busy() -> Iterator[threading.Event]:
    """Another thread holds the lock of the docs' index, which the guard takes before it
    checks an answer that cites something, until the test sets the event (or 30 s pass)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with grounding_context._docs_lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    yield release
    release.set()
    holder.join(10)


async def test_a_guard_past_the_deadline_ends_the_turn_as_a_timeout(
    settings, auth, docs_index_busy
):
    answer = "Le quote minime VFR sono nella SERA.5005(f)."
    app = app_with(
        settings.model_copy(update={"turn_timeout_s": 2.0}),
        models=ScriptedModels(Script([text(answer)])),
    )
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "Quali sono le quote minime VFR?")
        docs_index_busy.set()
        (turn,) = await app.state.services.chats.recent_turns("user-1", 5)

    # As when the agent runs past TURN_TIMEOUT_S: the answer kept, an error, no verdict.
    deltas = [e["content"] for e in events if e["type"] == "agent_message"]
    assert "".join(deltas) == answer
    assert [e["type"] for e in events[len(deltas) :]] == ["error", "done"]
    assert events[len(deltas)] == {
        "type": "error",
        "code": "model_unavailable",
        "message": TurnTimeout().message_in("it"),
    }
    assert (turn.status, turn.system, turn.grounding) == ("error", answer, None)

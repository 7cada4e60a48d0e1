"""The turn log and running-turn claims (`aircoach.turn.log`), against SQLite and MongoDB
(nx-27017 through the real PyMongo async driver), each shared by two instances' stores."""

from __future__ import annotations

import asyncio
import time

import pytest

from aircoach.services import build_turn_log
from aircoach.settings import Settings
from aircoach.turn.log import LoggedEvent, RunningTurn, TurnLogStore

# A week ahead: MongoDB's TTL monitor drops documents whose date has passed in real time, and
# a loaded machine may run this module minutes after it was imported. The stores compare
# expiry with the `now` they are given.
T = time.time() + 7 * 86_400.0
LATER = T + 3600.0


@pytest.fixture
def two(store_settings: Settings) -> tuple[TurnLogStore, TurnLogStore]:
    """Two instances' stores on the same database."""
    return build_turn_log(store_settings), build_turn_log(store_settings)


def events(first: int, last: int) -> list[LoggedEvent]:
    return [
        LoggedEvent(n, {"type": "agent_message", "content": f"parola{n} ", "x.y": {"$k": n}})
        for n in range(first, last + 1)
    ]


async def test_events_are_read_back_in_order_after_a_number_by_their_owner_only(two):
    a, b = two
    await a.append("alice", "t1", events(1, 3), expires_at=LATER)
    await b.append("alice", "t1", events(4, 5), expires_at=LATER)
    await a.append("alice", "t1", events(3, 4), expires_at=LATER)  # a batch written twice
    await a.append("bob", "t2", events(1, 1), expires_at=LATER)
    assert await b.read("alice", "t1") == events(1, 5)
    assert await b.read("alice", "t1", after=3) == events(4, 5)
    assert await a.read("alice", "t1", after=1, limit=2) == events(2, 3)
    assert await a.read("alice", "t1", after=5) == []
    assert await a.read("bob", "t1") == []  # another user's turn
    assert await a.read("alice", "nope") == []


async def test_one_running_turn_per_thread_until_released_or_expired(two):
    a, b = two
    assert await a.claim("alice", "main", "t1", now=T, expires_at=T + 60) is None
    held = await b.claim("alice", "main", "t2", now=T + 1, expires_at=T + 61)
    assert held == RunningTurn("t1", "main", T + 60, False)
    assert await b.claim("alice", "other", "t3", now=T + 1, expires_at=T + 61) is None
    assert await b.claim("bob", "main", "t4", now=T + 1, expires_at=T + 61) is None
    assert await b.running("alice", "t1", now=T + 2) == RunningTurn("t1", "main", T + 60)
    assert await b.running("bob", "t1", now=T + 2) is None
    await b.release("alice", "main", "t2")  # not the holder: nothing happens
    assert (await a.claim("alice", "main", "t5", now=T + 2, expires_at=T + 62)) is not None
    await b.release("alice", "main", "t1")
    assert await a.running("alice", "t1", now=T + 3) is None
    assert await a.claim("alice", "main", "t6", now=T + 3, expires_at=T + 63) is None
    # An instance that died leaves its claim: past its expiry the thread is free again.
    assert await b.running("alice", "t6", now=T + 64) is None
    assert await b.claim("alice", "main", "t7", now=T + 64, expires_at=T + 124) is None


async def test_a_turns_last_write_logs_its_events_and_frees_only_its_own_thread(two):
    a, b = two
    await a.claim("alice", "main", "t1", now=T, expires_at=T + 60)
    await a.claim("alice", "other", "t2", now=T, expires_at=T + 60)
    await a.append("alice", "t1", events(1, 2), expires_at=LATER)
    await b.finish("alice", "t1", events(3, 4), expires_at=LATER)
    assert await a.read("alice", "t1") == events(1, 4)
    assert await a.holder("alice", "main", now=T + 1) is None  # free for the next message
    assert await a.holder("alice", "other", now=T + 1) == RunningTurn("t2", "other", T + 60)
    await b.finish("alice", "t1", events(3, 4), expires_at=LATER)  # written twice: kept once
    await b.finish("bob", "t2", [], expires_at=LATER)  # not bob's turn: nothing happens
    assert await a.read("alice", "t1") == events(1, 4)
    assert await a.holder("alice", "other", now=T + 1) == RunningTurn("t2", "other", T + 60)
    # A turn whose thread was taken over (`if_busy: "interrupt"`) frees nothing when it ends.
    await a.take_over("alice", "other", held_by="t2", turn_id="t3", now=T + 1, expires_at=T + 61)
    await b.finish("alice", "t2", [], expires_at=LATER)
    held = await a.holder("alice", "other", now=T + 2)
    assert held is not None and held.turn_id == "t3"


async def test_concurrent_claims_have_one_winner(two):
    a, b = two
    results = await asyncio.gather(
        *(
            (a if i % 2 else b).claim("alice", "main", f"t{i}", now=T, expires_at=T + 60)
            for i in range(10)
        )
    )
    winners = [i for i, held in enumerate(results) if held is None]
    assert len(winners) == 1
    assert {held.turn_id for held in results if held is not None} == {f"t{winners[0]}"}


async def test_cancel_reaches_the_running_turn_from_another_instance(two):
    a, b = two
    await a.claim("alice", "main", "t1", now=T, expires_at=T + 60)
    assert await a.cancel_requested("t1") is False
    assert await b.request_cancel("bob", "t1", now=T + 1) is False  # not bob's
    assert await b.request_cancel("alice", "t1", now=T + 1) is True
    assert await a.cancel_requested("t1") is True
    assert (await a.running("alice", "t1", now=T + 1)).cancel_requested is True
    await a.release("alice", "main", "t1")
    assert await b.request_cancel("alice", "t1", now=T + 2) is False  # finished


async def test_interrupting_moves_the_thread_and_stops_the_old_turn(two):
    a, b = two
    await a.claim("alice", "main", "t1", now=T, expires_at=T + 60)
    moved = await asyncio.gather(
        a.take_over("alice", "main", held_by="t1", turn_id="t2", now=T + 1, expires_at=T + 61),
        b.take_over("alice", "main", held_by="t1", turn_id="t3", now=T + 1, expires_at=T + 61),
    )
    assert sorted(moved) == [False, True]
    winner = "t2" if moved[0] else "t3"
    assert await a.cancel_requested("t1") is True
    assert await a.cancel_requested(winner) is False
    held = await b.claim("alice", "main", "t4", now=T + 2, expires_at=T + 62)
    assert held is not None and held.turn_id == winner
    await a.release("alice", "main", "t1")  # the old turn ends: the new one keeps the thread
    assert (await b.running("alice", winner, now=T + 3)) is not None


async def test_a_running_turn_renews_its_lease_and_a_lapsed_one_frees_the_thread(two):
    a, b = two
    await a.claim("alice", "main", "t1", now=T, expires_at=T + 30)
    await b.renew("alice", "t1", expires_at=T + 60)  # from the instance that runs it
    assert (await a.running("alice", "t1", now=T + 45)).expires_at == pytest.approx(T + 60)
    held = await a.claim("alice", "main", "t2", now=T + 45, expires_at=T + 75)
    assert held is not None and held.turn_id == "t1"
    # Not renewed past its lease (its instance died, or its release failed): the thread frees.
    assert await b.claim("alice", "main", "t3", now=T + 61, expires_at=T + 91) is None
    await a.renew("alice", "t1", expires_at=T + 200)  # the old turn's renewal moves nothing
    assert (await a.running("alice", "t3", now=T + 62)) is not None
    assert await a.running("alice", "t1", now=T + 62) is None


async def test_the_holder_of_a_thread_is_its_live_claim_only(two):
    a, b = two
    assert await b.holder("alice", "main", now=T) is None
    await a.claim("alice", "main", "t1", now=T, expires_at=T + 60)
    assert await b.holder("alice", "main", now=T + 1) == RunningTurn("t1", "main", T + 60)
    assert await b.holder("alice", "other", now=T + 1) is None  # another conversation
    assert await b.holder("bob", "main", now=T + 1) is None  # another user's thread
    assert await b.holder("alice", "main", now=T + 61) is None  # the claim lapsed
    await a.claim("alice", "main", "t2", now=T + 61, expires_at=T + 121)
    await b.release("alice", "main", "t2")
    assert await a.holder("alice", "main", now=T + 62) is None


async def test_forgetting_turns_drops_their_events_and_only_theirs(two):
    a, b = two
    await a.append("alice", "t1", events(1, 3), expires_at=LATER)
    await a.append("alice", "t2", events(1, 2), expires_at=LATER)
    await a.append("bob", "t3", events(1, 1), expires_at=LATER)
    await b.forget("bob", ["t1"])  # another user's turn: nothing happens
    assert await a.read("alice", "t1") == events(1, 3)
    await b.forget("alice", ["t1", "nope"])
    assert await a.read("alice", "t1") == []
    assert await a.read("alice", "t2") == events(1, 2)
    assert await a.read("bob", "t3") == events(1, 1)
    await b.forget("alice", [])  # nothing to forget

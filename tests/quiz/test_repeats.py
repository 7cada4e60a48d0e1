"""A quiz answer's `Idempotency-Key` on the reservations shared by every instance (SQLite and
MongoDB, two instances' stores on one database): held while the first request records, then
replayed; another answer is refused; a dead first request is taken over, once."""

from __future__ import annotations

import asyncio
import time

import pytest

from aircoach.quiz import repeats
from aircoach.services import build_guard_stores
from aircoach.settings import Settings
from aircoach.turn.guards import GuardStores

T = time.time()
B = repeats.answer_digest(1, 1, "b")


@pytest.fixture
def two(store_settings: Settings) -> tuple[GuardStores, GuardStores]:
    return build_guard_stores(store_settings), build_guard_stores(store_settings)


async def test_a_key_is_held_while_its_answer_is_recorded_then_replayed(two):
    a, b = two
    first = await repeats.claim(a.reservations, "alice", "k", B, now=T)
    assert not first.replay
    with pytest.raises(repeats.AnswerKeyBusy):
        await repeats.claim(b.reservations, "alice", "k", B, now=T + 1)
    await repeats.recorded(a.reservations, "alice", first, now=T + 1)
    again = await repeats.claim(b.reservations, "alice", "k", B, now=T + 2)
    assert again.replay
    # Recorded, it stays replayed past the lease of a pending key.
    later = await repeats.claim(
        b.reservations, "alice", "k", B, now=T + 2 + repeats.PENDING_LEASE_S * 2
    )
    assert later.replay
    assert not (await repeats.claim(a.reservations, "bob", "k", B, now=T + 3)).replay


async def test_a_key_with_another_answer_is_refused(two):
    a, b = two
    first = await repeats.claim(a.reservations, "alice", "k", B, now=T)
    for other in (repeats.answer_digest(1, 1, "c"), repeats.answer_digest(1, 2, "b")):
        with pytest.raises(repeats.AnswerKeyReused):
            await repeats.claim(b.reservations, "alice", "k", other, now=T + 1)
    await repeats.recorded(a.reservations, "alice", first, now=T + 1)
    with pytest.raises(repeats.AnswerKeyReused):
        await repeats.claim(
            b.reservations, "alice", "k", repeats.answer_digest(1, 1, "c"), now=T + 2
        )


async def test_a_released_key_is_claimed_anew(two):
    a, b = two
    first = await repeats.claim(a.reservations, "alice", "k", B, now=T)
    await repeats.release(a.reservations, "alice", first)
    assert not (await repeats.claim(b.reservations, "alice", "k", B, now=T + 1)).replay


async def test_a_key_whose_first_request_died_is_taken_over_once(two):
    a, b = two
    await repeats.claim(a.reservations, "alice", "k", B, now=T)
    after = T + repeats.PENDING_LEASE_S + 1
    outcomes = await asyncio.gather(
        *(repeats.claim(s.reservations, "alice", "k", B, now=after) for s in (a, b, a, b)),
        return_exceptions=True,
    )
    taken = [o for o in outcomes if isinstance(o, repeats.Claim)]
    assert len(taken) == 1 and not taken[0].replay
    assert all(isinstance(o, repeats.AnswerKeyBusy) for o in outcomes if o not in taken)
    await repeats.recorded(b.reservations, "alice", taken[0], now=after)
    assert (await repeats.claim(a.reservations, "alice", "k", B, now=after + 1)).replay

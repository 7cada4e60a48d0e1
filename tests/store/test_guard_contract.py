"""Reservations (safe retries) and quota counters, against SQLite and MongoDB (nx-27017
through the real PyMongo async driver), each shared by two instances' stores."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path

import pytest

from aircoach.services import build_guard_stores
from aircoach.settings import Settings
from aircoach.turn.guards import GuardStores, Reservation

DAY = 86_400.0
# Real times: MongoDB's TTL monitor (and nx-27017's) drops documents whose date has passed.
T = time.time()


@pytest.fixture
def two(store_settings: Settings) -> tuple[GuardStores, GuardStores]:
    """Two instances' stores on the same database."""
    return build_guard_stores(store_settings), build_guard_stores(store_settings)


async def test_a_key_is_reserved_once_per_user_until_it_expires(two):
    a, b = two
    assert await a.reservations.reserve("alice", "k1", "t1", now=T + 100.0, ttl_s=DAY) is None
    held = await b.reservations.reserve("alice", "k1", "t2", now=T + 101.0, ttl_s=DAY)
    assert held == Reservation("t1", T + 100.0)
    assert await b.reservations.reserve("bob", "k1", "t3", now=T + 101.0, ttl_s=DAY) is None
    assert await b.reservations.reserve("alice", "k2", "t4", now=T + 101.0, ttl_s=DAY) is None
    # After 24 h the key is free again.
    assert await b.reservations.reserve("alice", "k1", "t5", now=T + 100.0 + DAY, ttl_s=DAY) is None
    held = await a.reservations.reserve("alice", "k1", "t6", now=T + 101.0 + DAY, ttl_s=DAY)
    assert held is not None and held.turn_id == "t5"


async def test_concurrent_reservations_have_one_winner(two):
    a, b = two
    results = await asyncio.gather(
        *(
            (a if i % 2 else b).reservations.reserve("alice", "k", f"t{i}", now=T + 5.0, ttl_s=DAY)
            for i in range(10)
        )
    )
    winners = [i for i, held in enumerate(results) if held is None]
    assert len(winners) == 1
    assert {held.turn_id for held in results if held is not None} == {f"t{winners[0]}"}


async def test_a_dead_reservation_is_taken_over_once(two):
    a, b = two
    await a.reservations.reserve("alice", "k", "t1", now=T + 1.0, ttl_s=DAY)
    took = await asyncio.gather(
        a.reservations.take_over("alice", "k", held_by="t1", turn_id="t2", now=T + 2.0, ttl_s=DAY),
        b.reservations.take_over("alice", "k", held_by="t1", turn_id="t3", now=T + 2.0, ttl_s=DAY),
    )
    assert sorted(took) == [False, True]
    held = await a.reservations.reserve("alice", "k", "t4", now=T + 3.0, ttl_s=DAY)
    assert held is not None and held.turn_id in {"t2", "t3"}


async def test_a_released_reservation_frees_the_key_only_for_its_holder(two):
    a, b = two
    await a.reservations.reserve("alice", "k", "t1", now=T, ttl_s=DAY)
    await b.reservations.release("alice", "k", "t9")  # not the holder: nothing happens
    held = await b.reservations.reserve("alice", "k", "t2", now=T, ttl_s=DAY)
    assert held is not None and held.turn_id == "t1"
    await b.reservations.release("alice", "k", "t1")
    assert await b.reservations.reserve("alice", "k", "t3", now=T, ttl_s=DAY) is None


async def test_forgetting_turns_frees_their_keys_and_only_theirs(two):
    a, b = two
    await a.reservations.reserve("alice", "k1", "t1", now=T, ttl_s=DAY)
    await a.reservations.reserve("alice", "k2", "t2", now=T, ttl_s=DAY)
    await a.reservations.reserve("bob", "k1", "t1", now=T, ttl_s=DAY)
    await b.reservations.forget_turns("alice", ["t1", "nope"])
    assert await a.reservations.reserve("alice", "k1", "t4", now=T, ttl_s=DAY) is None
    held = await a.reservations.reserve("alice", "k2", "t5", now=T, ttl_s=DAY)
    assert held is not None and held.turn_id == "t2"
    held = await a.reservations.reserve("bob", "k1", "t6", now=T, ttl_s=DAY)
    assert held is not None and held.turn_id == "t1"  # another user's key with the same turn id
    await b.reservations.forget_turns("alice", [])


async def test_a_quota_never_counts_past_its_limit_across_instances(two):
    a, b = two
    hits = await asyncio.gather(
        *(
            (a if i % 2 else b).quotas.hit("alice", "m:1", limit=5, now=T, expires_at=T + 60.0)
            for i in range(12)
        )
    )
    assert hits.count(True) == 5
    assert await a.quotas.hit("alice", "m:2", limit=5, now=T, expires_at=T + 120.0) is True
    assert await b.quotas.hit("bob", "m:1", limit=5, now=T, expires_at=T + 60.0) is True
    assert await b.quotas.hit("alice", "m:1", limit=5, now=T, expires_at=T + 60.0) is False


async def test_a_refund_gives_one_count_back_and_never_goes_below_zero(two):
    a, b = two
    expires = T + DAY
    assert await a.quotas.hit("alice", "w", limit=2, now=T, expires_at=expires)
    assert await b.quotas.hit("alice", "w", limit=2, now=T, expires_at=expires)
    assert not await a.quotas.hit("alice", "w", limit=2, now=T, expires_at=expires)
    await b.quotas.refund("alice", "w")
    assert await a.quotas.hit("alice", "w", limit=2, now=T, expires_at=expires)
    await a.quotas.refund("bob", "w")  # nothing counted: nothing happens
    for _ in range(3):
        await a.quotas.refund("alice", "w")
    assert await a.quotas.hit("alice", "w", limit=1, now=T, expires_at=expires)
    assert not await a.quotas.hit("alice", "w", limit=1, now=T, expires_at=expires)


async def test_a_reservation_keeps_the_digest_of_its_question(two):
    a, b = two
    assert (
        await a.reservations.reserve("alice", "k", "t1", now=T, ttl_s=DAY, fingerprint="q1") is None
    )
    held = await b.reservations.reserve("alice", "k", "t2", now=T, ttl_s=DAY, fingerprint="q2")
    assert held == Reservation("t1", T, "q1")
    # An expired reservation is replaced with the new question's.
    assert (
        await b.reservations.reserve("alice", "k", "t3", now=T + DAY, ttl_s=DAY, fingerprint="q3")
        is None
    )
    held = await a.reservations.reserve(
        "alice", "k", "t4", now=T + DAY, ttl_s=DAY, fingerprint="q4"
    )
    assert held is not None and (held.turn_id, held.fingerprint) == ("t3", "q3")


async def test_a_take_over_keeps_the_digest_of_its_question(two):
    """A quiz answer's key moves from pending to recorded with `take_over`; its repeats still
    need the answer's digest to tell a retry from another answer."""
    a, b = two
    await a.reservations.reserve("alice", "k", "t1", now=T, ttl_s=DAY, fingerprint="q1")
    assert await b.reservations.take_over(
        "alice", "k", held_by="t1", turn_id="t2", now=T + 1.0, ttl_s=DAY
    )
    held = await a.reservations.reserve(
        "alice", "k", "t3", now=T + 2.0, ttl_s=DAY, fingerprint="q9"
    )
    assert held is not None and (held.turn_id, held.fingerprint) == ("t2", "q1")


async def test_a_sqlite_file_made_before_fingerprints_gets_the_column(settings):
    path = settings.sqlite_file
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE idempotency (userId TEXT NOT NULL, key TEXT NOT NULL, turn_id TEXT NOT "
            "NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (userId, key))"
        )
        old.execute("INSERT INTO idempotency VALUES ('alice', 'k', 't1', ?, ?)", (T, T + DAY))
    old.close()
    guards = build_guard_stores(settings)
    held = await guards.reservations.reserve("alice", "k", "t2", now=T, ttl_s=DAY, fingerprint="q")
    assert held == Reservation("t1", T, "")
    assert (
        await guards.reservations.reserve("alice", "k2", "t3", now=T, ttl_s=DAY, fingerprint="q")
        is None
    )
    # and the expiry indexes the purge reads through.
    assert {"idempotency_expiry", "quotas_expiry"} <= _indexes(path)


def _indexes(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}


def _rows(path: Path, sql: str, *params: float) -> list[tuple[object, ...]]:
    """What `sql` finds in the file, through a connection of its own."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return sorted(db.execute(sql, params).fetchall())


async def test_sqlite_drops_expired_reservations_and_counters_as_it_writes(settings):
    guards, path = build_guard_stores(settings), settings.sqlite_file
    for i in range(3):
        assert (
            await guards.reservations.reserve("alice", f"k{i}", f"t{i}", now=T, ttl_s=DAY) is None
        )
        assert await guards.quotas.hit("alice", f"m:{i}", limit=5, now=T, expires_at=T + 120.0)
    assert await guards.quotas.hit("alice", "d:0", limit=1, now=T, expires_at=T + 2 * DAY)
    assert await guards.reservations.reserve("bob", "k", "tb", now=T + DAY / 2, ttl_s=DAY) is None

    later = T + DAY + 1.0  # alice's reservations and the minute counters have expired
    assert await guards.reservations.reserve("alice", "new", "tn", now=later, ttl_s=DAY) is None
    assert await guards.quotas.hit("alice", "m:9", limit=5, now=later, expires_at=later + 120)

    assert _rows(path, "SELECT userId, key FROM idempotency") == [("alice", "new"), ("bob", "k")]
    assert _rows(path, "SELECT window FROM quotas") == [("d:0",), ("m:9",)]
    # What is kept still holds: bob's key, and the day counter at its limit.
    held = await guards.reservations.reserve("bob", "k", "tx", now=later, ttl_s=DAY)
    assert held == Reservation("tb", T + DAY / 2)
    assert not await guards.quotas.hit("alice", "d:0", limit=1, now=later, expires_at=T + 2 * DAY)


async def test_sqlite_drops_a_backlog_of_expired_rows_a_batch_per_write(settings):
    guards, path = build_guard_stores(settings), settings.sqlite_file
    await guards.reservations.reserve("alice", "k", "t", now=T, ttl_s=DAY)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executemany(
            "INSERT INTO idempotency VALUES (?, 'k', 't', ?, ?, '')",
            [(f"u{i}", T, T + 1.0) for i in range(250)],
        )
    expired = "SELECT COUNT(*) FROM idempotency WHERE expires_at <= ?"

    await guards.reservations.reserve("alice", "k2", "t2", now=T + 2.0, ttl_s=DAY)
    left = _rows(path, expired, T + 2.0)[0][0]
    assert 0 < left < 250  # one write dropped a batch, not the whole backlog
    for _ in range(2):
        await guards.reservations.reserve("alice", "k2", "t2", now=T + 2.0, ttl_s=DAY)
    assert _rows(path, expired, T + 2.0) == [(0,)]
    assert _rows(path, "SELECT key FROM idempotency") == [("k",), ("k2",)]

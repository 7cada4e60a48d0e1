"""The long-term memory store, against SQLite and MongoDB (nx-27017 through the real PyMongo
async driver), each shared by two instances' stores on one database."""

from __future__ import annotations

import asyncio

import pytest

from aircoach.memory.ports import MemoryStore, NewItem
from aircoach.services import build_memory_store
from aircoach.settings import Settings


@pytest.fixture
def two(store_settings: Settings) -> tuple[MemoryStore, MemoryStore]:
    """Two instances' stores on the same database."""
    return build_memory_store(store_settings), build_memory_store(store_settings)


def item(text: str, kind: str = "topic", conversation: str = "default", turn: str = "t1"):
    return NewItem(
        kind=kind,  # type: ignore[arg-type]
        text=text,
        conversation_id=conversation,
        turn_id=turn,
        created_at="2026-11-26T00:00:00+00:00",
    )


async def test_items_are_kept_per_user_newest_first_and_read_by_another_instance(two):
    a, b = two
    await a.add("alice", [item("Ha chiesto: il QNH"), item("Studia per: VDS", "goal")], keep=10)
    await a.add("bob", [item("Ha chiesto: lo stallo")], keep=10)
    await b.add("alice", [item("Ha chiesto: il METAR", turn="t2")], keep=10)
    got = await b.items("alice", limit=10)
    assert [i.text for i in got] == [
        "Ha chiesto: il METAR",
        "Ha chiesto: il QNH",
        "Studia per: VDS",
    ]
    assert [i.turn_id for i in got] == ["t2", "t1", "t1"]
    assert len({i.id for i in got}) == 3
    assert [i.text for i in await a.items("bob", limit=10)] == ["Ha chiesto: lo stallo"]
    assert [i.text for i in await a.items("alice", limit=1)] == ["Ha chiesto: il METAR"]
    assert await a.items("carol", limit=10) == []


async def test_a_repeated_topic_and_a_new_goal_replace_the_old_ones(two):
    a, b = two
    await a.add("alice", [item("Studia per: VDS", "goal"), item("Ha chiesto: il QNH")], keep=10)
    await b.add("alice", [item("Fa fatica con: meteo", "difficulty")], keep=10)
    await b.add("alice", [item("Studia per: PPL", "goal"), item("Ha chiesto: il QNH")], keep=10)
    await a.add("alice", [item("Fa fatica con: radio", "difficulty")], keep=10)
    texts = [i.text for i in await a.items("alice", limit=10)]
    assert texts == [
        "Fa fatica con: radio",
        "Studia per: PPL",
        "Ha chiesto: il QNH",
        "Fa fatica con: meteo",
    ]


async def test_each_user_keeps_only_the_newest_items(two):
    a, b = two
    for n in range(7):
        await (a if n % 2 else b).add("alice", [item(f"Ha chiesto: domanda {n}")], keep=4)
    await a.add("bob", [item("Ha chiesto: altro")], keep=4)
    texts = [i.text for i in await b.items("alice", limit=100)]
    assert texts == [f"Ha chiesto: domanda {n}" for n in (6, 5, 4, 3)]
    assert len(await b.items("bob", limit=100)) == 1


async def test_concurrent_writes_from_two_instances_keep_the_bound(two):
    a, b = two
    await asyncio.gather(
        *(
            (a if n % 2 else b).add("alice", [item(f"Ha chiesto: domanda {n}")], keep=5)
            for n in range(12)
        )
    )
    await a.add("alice", [item("Ha chiesto: ultima")], keep=5)
    got = await b.items("alice", limit=100)
    assert len(got) == 5 and got[0].text == "Ha chiesto: ultima"


async def test_concurrent_writes_of_the_same_topic_and_goal_keep_one_of_each(two):
    """Two turns of one user at once (two conversations, two instances) that repeat a topic
    and each state a goal: one topic and one goal remain, as when they come one by one."""
    a, b = two
    await asyncio.gather(
        *(
            (a if n % 2 else b).add(
                "alice",
                [item(f"Studia per: corso {n}", "goal"), item("Ha chiesto: il QNH")],
                keep=50,
            )
            for n in range(8)
        )
    )
    got = await b.items("alice", limit=100)
    assert sorted(i.kind for i in got) == ["goal", "topic"]
    assert len({i.id for i in got}) == 2


async def test_one_item_is_deleted_by_its_owner_only(two):
    a, b = two
    await a.add("alice", [item("Ha chiesto: il QNH"), item("Ha chiesto: il QFE")], keep=10)
    first, second = await a.items("alice", limit=10)
    assert await b.delete("bob", first.id) is False
    assert await b.delete("alice", "no-such-id") is False
    assert await b.delete("alice", first.id) is True
    assert await a.delete("alice", first.id) is False
    assert [i.id for i in await a.items("alice", limit=10)] == [second.id]


async def test_clear_and_forget_a_conversation(two):
    a, b = two
    await a.add(
        "alice",
        [
            item("Ha chiesto: il QNH", conversation="c1"),
            item("Ha chiesto: il QFE", conversation="c2"),
        ],
        keep=10,
    )
    await a.add("bob", [item("Ha chiesto: il QNH", conversation="c1")], keep=10)
    assert await b.forget_conversation("alice", "c1") == 1
    assert [i.conversation_id for i in await a.items("alice", limit=10)] == ["c2"]
    assert len(await a.items("bob", limit=10)) == 1  # another user's conversation stays
    assert await b.clear("alice") == 1
    assert await a.items("alice", limit=10) == []
    assert await a.clear("alice") == 0
    assert len(await a.items("bob", limit=10)) == 1


async def test_nothing_to_add_writes_nothing(two):
    a, _ = two
    await a.add("alice", [], keep=10)
    assert await a.items("alice", limit=10) == []

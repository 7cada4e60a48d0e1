"""The store contract: the same tests against SQLite and against MongoDB (nx-27017 on
loopback, through the real PyMongo async driver)."""

from __future__ import annotations

import copy
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from aircoach.errors import StoreUnavailable
from aircoach.quiz.models import Attempt, ChapterStats
from aircoach.quiz.ports import AttemptStore, QuizStore
from aircoach.services import build_stores, open_stores
from aircoach.settings import ROOT, Settings
from aircoach.turn.ports import ChatStore, ConversationScope
from aircoach.turn.records import ToolCall, ToolRecord, Turn
from tests.mongo_server import MongoServer, mongo_settings


@pytest.fixture
def chats(store_settings: Settings) -> ChatStore:
    return build_stores(store_settings)[0]


@pytest.fixture
def quiz(store_settings: Settings) -> QuizStore:
    return build_stores(store_settings)[1]


@pytest.fixture
def attempts(store_settings: Settings) -> AttemptStore:
    return open_stores(store_settings).attempts


def make_turn(user: str, n: int, *, second: int | None = None, **fields: Any) -> Turn:
    s = n if second is None else second
    values: dict[str, Any] = {
        "userId": user,
        "human": f"domanda {n}",
        "system": f"risposta {n}",
        "timestamp": f"2025-03-01T10:00:{s:02d}.{n:06d}+00:00",
        "prompt_version": "abc123",
        "model": "scripted",
        "thread_id": f"{user}:vabc123",
        "turn_id": f"{s:08x}{n:08x}{user}",
    }
    return Turn(**{**values, **fields})


# --- chat store ---


async def test_recent_turns_are_the_users_last_ones_oldest_first(chats: ChatStore):
    shuffled = [make_turn("alice", n) for n in range(6)]
    random.Random(7).shuffle(shuffled)
    for turn in shuffled:
        await chats.append_turn(turn)
    await chats.append_turn(make_turn("bob", 9))

    recent = await chats.recent_turns("alice", 3)
    assert [t.human for t in recent] == ["domanda 3", "domanda 4", "domanda 5"]
    assert all(t.userId == "alice" for t in recent)
    assert await chats.recent_turns("alice", 0) == []
    assert len(await chats.recent_turns("alice", 100)) == 6
    assert await chats.recent_turns("nobody", 5) == []


async def test_a_turn_id_is_stored_once(chats: ChatStore):
    """A retried write, or a dead letter replayed twice, leaves one turn: the first."""
    first = make_turn("alice", 1)
    await chats.append_turn(first)
    await chats.append_turn(first.model_copy(update={"system": "altra risposta"}))
    await chats.append_turn(first)
    assert await chats.recent_turns("alice", 10) == [first]
    assert await chats.latest_turn_ids("alice") == [first.turn_id]


async def test_latest_turn_ids_follow_time_not_insertion(chats: ChatStore):
    assert await chats.latest_turn_ids("alice") == []
    late, early, earliest = make_turn("alice", 2), make_turn("alice", 1), make_turn("alice", 0)
    await chats.append_turn(late)
    assert await chats.latest_turn_ids("alice") == [late.turn_id]
    await chats.append_turn(early)
    await chats.append_turn(earliest)
    assert await chats.latest_turn_ids("alice") == [late.turn_id, early.turn_id]
    await chats.append_turn(make_turn("bob", 5))
    assert await chats.latest_turn_ids("alice", 1) == [late.turn_id]
    assert await chats.latest_turn_ids("alice", 5) == [
        late.turn_id,
        early.turn_id,
        earliest.turn_id,
    ]


async def test_same_timestamp_is_ordered_by_turn_id(chats: ChatStore):
    a = make_turn("alice", 1, second=30).model_copy(
        update={"timestamp": "2025-03-01T10:00:30+00:00"}
    )
    b = make_turn("alice", 2, second=30).model_copy(
        update={"timestamp": "2025-03-01T10:00:30+00:00"}
    )
    await chats.append_turn(b)
    await chats.append_turn(a)
    assert await chats.latest_turn_ids("alice", 1) == [b.turn_id]
    assert [t.turn_id for t in await chats.recent_turns("alice", 2)] == [a.turn_id, b.turn_id]


def sub_second_turns(user: str, count: int) -> list[Turn]:
    """Turns less than a second apart, as a busy user's are: timestamps as the app writes them
    (`isoformat()` drops the fraction at a whole second), turn ids as `new_turn_id` makes
    them (time-ordered)."""
    start = datetime(2025, 3, 1, 10, 0, 0, tzinfo=UTC)
    turns = []
    for n in range(count):
        at = start + timedelta(microseconds=n * 37_001)  # 25 turns within one second
        turn_id = f"{int(at.timestamp() * 1e9):x}{n:08x}"
        turns.append(make_turn(user, n, timestamp=at.isoformat(), turn_id=turn_id))
    return turns


async def test_reads_behind_reseeding_are_exact_for_turns_within_a_second(chats: ChatStore):
    turns = sub_second_turns("alice", 25)
    assert turns[0].timestamp == "2025-03-01T10:00:00+00:00"  # no fraction at a whole second
    shuffled = list(turns)
    random.Random(3).shuffle(shuffled)
    for turn in shuffled:
        await chats.append_turn(turn)
    await chats.append_turn(make_turn("bob", 99))

    recent = await chats.recent_turns("alice", 10)
    assert [t.turn_id for t in recent] == [t.turn_id for t in turns[-10:]]
    assert await chats.latest_turn_ids("alice", 2) == [turns[-1].turn_id, turns[-2].turn_id]
    everything = await chats.recent_turns("alice", 100)
    assert [t.turn_id for t in everything] == [t.turn_id for t in turns]


async def test_the_freshness_read_sees_a_turn_stored_a_millisecond_later(chats: ChatStore):
    first, second = sub_second_turns("alice", 2)
    second = second.model_copy(
        update={"timestamp": "2025-03-01T10:00:00.001000+00:00", "turn_id": second.turn_id}
    )
    await chats.append_turn(first)
    assert await chats.latest_turn_ids("alice", 2) == [first.turn_id]
    await chats.append_turn(second)
    assert await chats.latest_turn_ids("alice", 2) == [second.turn_id, first.turn_id]
    assert [t.turn_id for t in await chats.recent_turns("alice", 1)] == [second.turn_id]


async def test_recent_turns_follow_the_order_the_questions_were_asked_in(chats: ChatStore):
    # A long turn started first and was stored last; a short one started later and was
    # stored first. The conversation (and the freshness check) follows the turn ids.
    long_turn, short_turn = sub_second_turns("alice", 2)
    long_turn = long_turn.model_copy(update={"timestamp": "2025-03-01T10:00:09+00:00"})
    short_turn = short_turn.model_copy(update={"timestamp": "2025-03-01T10:00:01+00:00"})
    await chats.append_turn(short_turn)
    await chats.append_turn(long_turn)
    assert [t.turn_id for t in await chats.recent_turns("alice", 2)] == [
        long_turn.turn_id,
        short_turn.turn_id,
    ]
    assert await chats.latest_turn_ids("alice", 1) == [short_turn.turn_id]


async def test_turns_round_trip_exactly_and_json_safe(chats: ChatStore):
    tool = ToolRecord(
        tool_name="domanda_teoria",
        data={"question": {"capitolo": 3, "testo": "Perché l'elica è svergolata?"}, "n": [1, 2]},
    )
    calls = [
        ToolCall(
            tool_name="domanda_teoria",
            call_id="call_1",
            arguments={"capitolo": 3, "capitoli": [2, 5]},
            text="Capitolo 3, domanda 1: ...\n[RISERVATO AL COACH: risposta corretta b) ...]",
            data=tool.data,
        ),
        ToolCall(
            tool_name="kb_search",
            call_id="call_2",
            text="[Tool kb_search failed: HTTP 503]",
            data={"error": "[Tool kb_search failed: HTTP 503]"},
            status="error",
            step=1,
            offset=12,
        ),
    ]
    turn = make_turn("alice", 1, tool=tool, tools=calls, status="interrupted", system="")
    failed = make_turn("alice", 2, status="error", error_code="model_unavailable")
    await chats.append_turn(turn)
    await chats.append_turn(failed)
    back = await chats.recent_turns("alice", 2)
    assert back == [turn, failed]  # a failed turn keeps its error's code
    assert await chats.history("alice", limit=5, before=None) == [failed, turn]
    json.dumps([t.model_dump() for t in back])  # nothing BSON-typed came back


async def test_history_pages_newest_first_with_a_before_cursor(chats: ChatStore):
    for n in range(5):
        await chats.append_turn(make_turn("alice", n))
    await chats.append_turn(make_turn("bob", 3))

    first = await chats.history("alice", limit=2, before=None)
    assert [t.human for t in first] == ["domanda 4", "domanda 3"]
    second = await chats.history("alice", limit=2, before=first[-1].timestamp)
    assert [t.human for t in second] == ["domanda 2", "domanda 1"]
    third = await chats.history("alice", limit=2, before=second[-1].timestamp)
    assert [t.human for t in third] == ["domanda 0"]
    assert await chats.history("alice", limit=2, before="2000-01-01T00:00:00+00:00") == []
    assert [t.userId for t in await chats.history("bob", limit=10, before=None)] == ["bob"]


async def test_a_turn_is_found_by_id_only_by_its_user(chats: ChatStore):
    turn = make_turn("alice", 1)
    await chats.append_turn(turn)
    assert await chats.get_turn("alice", turn.turn_id) == turn
    assert await chats.get_turn("mallory", turn.turn_id) is None
    assert await chats.get_turn("alice", "nope") is None


async def test_one_turn_is_deleted_only_by_its_user_and_the_rest_stays(chats: ChatStore):
    kept, gone = (
        make_turn("alice", 1, conversation_id="c"),
        make_turn("alice", 2, conversation_id="c"),
    )
    for turn in (kept, gone):
        await chats.append_turn(turn)
    assert not await chats.delete_turn("mallory", gone.turn_id)
    assert await chats.delete_turn("alice", gone.turn_id)
    assert not await chats.delete_turn("alice", gone.turn_id)  # already gone
    assert await chats.get_turn("alice", gone.turn_id) is None
    assert await chats.recent_turns("alice", 5, conversation="c") == [kept]
    assert await chats.latest_turn_ids("alice", conversation="c") == [kept.turn_id]
    await chats.append_turn(gone)  # put back as it was
    assert await chats.recent_turns("alice", 5, conversation="c") == [kept, gone]


async def test_a_conversations_turns_are_listed_and_deleted_only_for_their_user(
    chats: ChatStore,
):
    for n, (user, conversation_id) in enumerate(
        [("alice", "c"), ("alice", None), ("alice", "c"), ("bob", "c"), ("alice", "d")]
    ):
        await chats.append_turn(make_turn(user, n, conversation_id=conversation_id))
    ids = [make_turn("alice", n).turn_id for n in (0, 2)]
    assert sorted(await chats.conversation_turn_ids("alice", "c")) == ids
    assert await chats.conversation_turn_ids("mallory", "c") == []
    assert sorted(await chats.delete_conversation("alice", "c")) == ids
    assert await chats.conversation_turn_ids("alice", "c") == []
    assert await chats.delete_conversation("alice", "c") == []
    left = await chats.history("alice", limit=10) + await chats.history("bob", limit=10)
    assert sorted(t.human for t in left) == ["domanda 1", "domanda 3", "domanda 4"]


async def test_history_pages_by_turn_id_even_within_one_millisecond(chats: ChatStore):
    # One timestamp for all: only the turn ids order them (nx-27017 compares timestamp
    # strings at second precision; the ids are unique and time-ordered).
    same = "2025-03-01T10:00:00.123000+00:00"
    for n in range(7):
        await chats.append_turn(make_turn("alice", n, second=0, timestamp=same))
    seen: list[str] = []
    before_turn = None
    while True:
        page = await chats.history("alice", limit=3, before_turn=before_turn)
        seen += [t.human for t in page]
        if len(page) < 3:
            break
        before_turn = page[-1].turn_id
    assert seen == [f"domanda {n}" for n in reversed(range(7))]


async def test_history_reads_one_conversation_the_default_one_or_every_one(chats: ChatStore):
    # The default conversation: no id, or (stored before it was reserved) the id `default`.
    where = [None, "alfa", "default", None, "beta", "alfa", None, "default"]
    for n, conversation_id in enumerate(where):
        await chats.append_turn(make_turn("alice", n, conversation_id=conversation_id))
    await chats.append_turn(make_turn("bob", 8))

    async def pages(conversation: str | ConversationScope) -> list[list[str]]:
        seen: list[list[str]] = []
        before_turn = None
        while True:
            page = await chats.history(
                "alice", limit=2, before_turn=before_turn, conversation=conversation
            )
            seen.append([t.human for t in page])
            if len(page) < 2:
                return seen
            before_turn = page[-1].turn_id

    assert await pages(ConversationScope.DEFAULT) == [
        ["domanda 7", "domanda 6"],
        ["domanda 3", "domanda 2"],
        ["domanda 0"],
    ]
    assert await pages("alfa") == [["domanda 5", "domanda 1"], []]
    assert await pages("default") == [["domanda 7", "domanda 2"], []]  # the stored id only
    every = await chats.history("alice", limit=10, conversation=ConversationScope.EVERY)
    assert every == await chats.history("alice", limit=10)
    assert [t.human for t in every] == [f"domanda {n}" for n in reversed(range(8))]
    # The deprecated timestamp bound applies within it too.
    older = await chats.history(
        "alice",
        limit=10,
        before=make_turn("alice", 3).timestamp,
        conversation=ConversationScope.DEFAULT,
    )
    assert [t.human for t in older] == ["domanda 2", "domanda 0"]


@pytest.mark.integration
async def test_mongodb_turns_stored_before_conversations_are_the_default_ones(
    mongo_server: MongoServer, settings: Settings
):
    from pymongo import MongoClient

    mongo = mongo_settings(mongo_server, settings)
    chats = build_stores(mongo)[0]
    await chats.append_turn(make_turn("alice", 1, conversation_id="alfa"))
    await chats.append_turn(make_turn("alice", 2))
    old = make_turn("alice", 0).model_dump(exclude={"conversation_id"})
    with MongoClient(mongo.mongodb_uri, serverSelectionTimeoutMS=30_000) as client:
        client[mongo.mongodb_db][mongo.mongodb_chats_collection].insert_one(old)
    page = await chats.history("alice", limit=5, conversation=ConversationScope.DEFAULT)
    assert [t.human for t in page] == ["domanda 2", "domanda 0"]


# --- quiz store ---

QUESTIONS = [
    {
        "capitolo": 1,
        "numero": 1,
        "argomento": "portanza",
        "difficolta": "media",
        "testo": "Se la velocità raddoppia, la PORTANZA:",
        "risposte": {"a": "raddoppia", "b": "quadruplica"},
        "corretta": "b",
    },
    {
        "capitolo": 1,
        "numero": 2,
        "argomento": "resistenza",
        "difficolta": "facile",
        "testo": "La resistenza indotta è più alta (a bassa velocità) perché:",
        "risposte": {"a": "incidenza alta", "b": "attrito"},
        "corretta": "a",
    },
    {
        "capitolo": 2,
        "numero": 1,
        "argomento": "comandi",
        "difficolta": "media",
        "testo": "Gli alettoni comandano il rollio: quale PIÙ probabile effetto?",
        "risposte": {"a": "imbardata inversa", "b": "nessuno"},
        "corretta": "a",
    },
]


@pytest.fixture
async def loaded(quiz: QuizStore) -> QuizStore:
    assert await quiz.count() == 0
    assert await quiz.upsert_questions(copy.deepcopy(QUESTIONS)) == 3
    return quiz


async def test_upsert_is_idempotent_and_replaces_by_chapter_and_number(loaded: QuizStore):
    assert await loaded.count() == 3
    changed = {**QUESTIONS[0], "testo": "Testo nuovo della domanda"}
    assert await loaded.upsert_questions([changed, QUESTIONS[1]]) == 2
    assert await loaded.count() == 3
    assert await loaded.by_chapter_and_number(1, 1) == changed


async def test_by_chapter_and_number(loaded: QuizStore):
    assert await loaded.by_chapter_and_number(2, 1) == QUESTIONS[2]
    assert await loaded.by_chapter_and_number(2, 9) is None


async def test_random_question_draws_from_all(loaded: QuizStore):
    seen = {
        (q["capitolo"], q["numero"]) for q in [await loaded.random_question() for _ in range(40)]
    }
    assert seen == {(1, 1), (1, 2), (2, 1)}  # 3 * (2/3)^40 chance of a miss: negligible


async def test_random_by_field(loaded: QuizStore):
    for _ in range(10):
        assert (await loaded.random_by_field("capitolo", "1"))["capitolo"] == 1
    assert await loaded.random_by_field("argomento", "PORTANZA") == QUESTIONS[0]
    assert await loaded.random_by_field("corretta", "b") == QUESTIONS[0]
    assert await loaded.random_by_field("argomento", "porta") is None  # equality, not substring
    assert await loaded.random_by_field("argomento", "p.rtanza") is None  # literal, not a regex
    assert await loaded.random_by_field("capitolo", 7) is None
    with pytest.raises(ValueError, match="'testo'"):
        await loaded.random_by_field("testo", "x")


def keys(questions: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(q["capitolo"], q["numero"]) for q in questions]


async def test_search_ignores_accents_case_and_punctuation(loaded: QuizStore):
    assert keys(await loaded.search_text("velocita")) == [(1, 1), (1, 2)]
    assert keys(await loaded.search_text("VELOCITÀ!")) == [(1, 1), (1, 2)]
    assert keys(await loaded.search_text("«rollio»")) == [(2, 1)]
    assert await loaded.search_text("velocita") == [QUESTIONS[0], QUESTIONS[1]]  # as stored


async def test_search_takes_singular_and_plural_alike(loaded: QuizStore):
    assert keys(await loaded.search_text("portanze")) == [(1, 1)]
    assert keys(await loaded.search_text("alettone")) == [(2, 1)]
    assert keys(await loaded.search_text("resistenze indotte")) == [(1, 2)]


async def test_search_forgives_one_typo_in_a_long_word_only(loaded: QuizStore):
    assert keys(await loaded.search_text("resistnza")) == [(1, 2)]  # a letter missing
    assert keys(await loaded.search_text("protanza")) == [(1, 1)]  # two letters swapped
    assert keys(await loaded.search_text("alettomi")) == [(2, 1)]  # a letter wrong
    assert await loaded.search_text("rsistnza") == []  # two typos
    assert await loaded.search_text("rolo") == []  # under five letters: no typo allowed


async def test_search_ranks_the_best_matches_first_and_limits(loaded: QuizStore):
    assert keys(await loaded.search_text("velocita portanza")) == [(1, 1), (1, 2)]
    assert keys(await loaded.search_text("bassa velocita")) == [(1, 2), (1, 1)]
    # An exact word beats a word one typo away.
    assert keys(await loaded.search_text("velocita resistnza rollio")) == [(1, 2), (1, 1), (2, 1)]
    assert keys(await loaded.search_text("velocita", limit=1)) == [(1, 1)]
    assert await loaded.search_text("velocita", limit=0) == []


async def test_search_within_a_chapter(loaded: QuizStore):
    assert keys(await loaded.search_text("velocita", capitolo=1)) == [(1, 1), (1, 2)]
    assert await loaded.search_text("velocita", capitolo=2) == []
    assert keys(await loaded.search_text("comandi", capitolo=2)) == [(2, 1)]


async def test_search_of_nothing_that_matches(loaded: QuizStore):
    assert await loaded.search_text("elicottero") == []
    assert await loaded.search_text("a.*b") == []  # punctuation, never a pattern
    assert await loaded.search_text("della sulla") == []  # only stopwords
    assert await loaded.search_text("   ") == []


async def test_a_replaced_question_is_found_by_its_new_words_only(loaded: QuizStore):
    changed = {**QUESTIONS[0], "testo": "Il carburatore ghiaccia quando:", "argomento": "motore"}
    await loaded.upsert_questions([changed])
    assert keys(await loaded.search_text("carburatori")) == [(1, 1)]
    assert await loaded.search_text("portanza") == []
    assert keys(await loaded.search_text("velocita")) == [(1, 2)]


async def test_a_batch_that_names_a_question_twice_keeps_the_last(loaded: QuizStore):
    """As one upsert after the other (an edited bank imported whole): the later version is
    stored and found by its own words only; the batch is not refused."""
    first = {**QUESTIONS[0], "testo": "Il carburatore ghiaccia quando la portanza:"}
    last = {**QUESTIONS[0], "testo": "Il carburatore ghiaccia quando:", "argomento": "motore"}
    assert await loaded.upsert_questions([first, QUESTIONS[1], last]) == 3
    assert await loaded.count() == 3
    assert await loaded.by_chapter_and_number(1, 1) == last
    assert keys(await loaded.search_text("carburatori")) == [(1, 1)]
    assert await loaded.search_text("portanza") == []


async def test_chapter_counts_and_ordered_lists(loaded: QuizStore):
    assert await loaded.chapter_counts() == {1: 2, 2: 1}
    assert keys(await loaded.list_questions(capitolo=None, limit=10)) == [(1, 1), (1, 2), (2, 1)]
    assert keys(await loaded.list_questions(capitolo=None, limit=2)) == [(1, 1), (1, 2)]
    assert await loaded.list_questions(capitolo=2, limit=10) == [QUESTIONS[2]]
    assert await loaded.list_questions(capitolo=7, limit=10) == []


async def test_by_keys_keeps_the_order_asked_and_skips_the_unknown(loaded: QuizStore):
    found = await loaded.by_keys([(2, 1), (1, 1), (9, 9), (2, 1)])
    assert found == [QUESTIONS[2], QUESTIONS[0]]
    assert await loaded.by_keys([]) == []


async def test_sample_draws_distinct_questions(loaded: QuizStore):
    for _ in range(5):
        drawn = await loaded.sample(5)
        assert sorted(keys(drawn)) == [(1, 1), (1, 2), (2, 1)]
        assert sorted(keys(await loaded.sample(2, capitolo=1))) == [(1, 1), (1, 2)]
    assert len(await loaded.sample(2)) == 2
    assert await loaded.sample(3, capitolo=9) == []
    assert await loaded.sample(0) == []


async def test_empty_quiz_store(quiz: QuizStore):
    assert await quiz.random_question() is None
    assert await quiz.search_text("portanza") == []
    assert await quiz.upsert_questions([]) == 0
    assert await quiz.chapter_counts() == {}
    assert await quiz.sample(3) == []


# --- quiz attempts ---


def attempt(user: str, n: int, capitolo: int, corretta: bool, **fields: Any) -> Attempt:
    values: dict[str, Any] = {
        "userId": user,
        "capitolo": capitolo,
        "numero": n,
        "risposta": "a",
        "corretta": corretta,
        "timestamp": f"2025-03-01T10:00:{n:02d}.000000+00:00",
    }
    return Attempt(**{**values, **fields})


async def test_chapter_stats_count_answers_and_right_answers_per_chapter(attempts: AttemptStore):
    assert await attempts.chapter_stats("alice") == []
    for a in [
        attempt("alice", 1, 5, False),
        attempt("alice", 2, 5, True),
        attempt("alice", 3, 2, False),
        attempt("alice", 4, 5, False),
        attempt("bob", 5, 5, True),
    ]:
        await attempts.add_attempt(a)
    assert await attempts.chapter_stats("alice") == [
        ChapterStats(capitolo=2, risposte=1, corrette=0),
        ChapterStats(capitolo=5, risposte=3, corrette=1),
    ]
    assert await attempts.chapter_stats("bob") == [ChapterStats(capitolo=5, risposte=1, corrette=1)]


async def test_recent_attempts_round_trip_newest_first(attempts: AttemptStore):
    first = attempt("alice", 1, 3, True, risposta="c", turn_id="turn-9")
    second = attempt("alice", 2, 3, False)
    same_time = attempt("alice", 2, 4, True, timestamp=second.timestamp)
    for a in (first, second, same_time, attempt("bob", 3, 1, True)):
        await attempts.add_attempt(a)
    assert await attempts.recent_attempts("alice", 10) == [same_time, second, first]
    assert await attempts.recent_attempts("alice", 1) == [same_time]
    assert await attempts.recent_attempts("nobody", 5) == []


async def test_an_exam_attempt_is_stored_once_per_exam_and_question(attempts: AttemptStore):
    """A resubmitted exam replaces its answer; other exams and plain answers add theirs."""
    await attempts.add_attempt(attempt("alice", 1, 3, True, exam_id="e1"))
    changed = attempt("alice", 1, 3, False, risposta="b", exam_id="e1", turn_id="turn-2")
    await attempts.add_attempt(changed)
    assert await attempts.chapter_stats("alice") == [
        ChapterStats(capitolo=3, risposte=1, corrette=0)
    ]
    assert await attempts.recent_attempts("alice", 5) == [changed]
    for other in (
        attempt("alice", 1, 3, True, exam_id="e2"),
        attempt("alice", 1, 3, True),
        attempt("alice", 1, 3, True),
        attempt("bob", 1, 3, True, exam_id="e1"),
    ):
        await attempts.add_attempt(other)
    assert await attempts.chapter_stats("alice") == [
        ChapterStats(capitolo=3, risposte=4, corrette=3)
    ]


async def test_a_turns_attempts_are_forgotten_and_a_questions_read_oldest_first(
    attempts: AttemptStore,
):
    """`forget_turn` removes that user's attempts of that turn outside an exam, and names
    their questions once; `question_attempts` reads one question's, oldest first."""
    later = attempt("alice", 2, 3, True, turn_id="t-2")
    same_time = attempt("alice", 2, 3, False, turn_id="t-3", timestamp=later.timestamp)
    kept = [
        attempt("alice", 1, 3, True, turn_id="t-9", numero=2),
        later,
        same_time,
        attempt("alice", 4, 3, True, turn_id="t-1", exam_id="e1"),
        attempt("bob", 5, 3, True, turn_id="t-1", numero=2),
    ]
    taken = [
        attempt("alice", 6, 3, False, turn_id="t-1", numero=2),
        attempt("alice", 7, 3, True, turn_id="t-1", numero=2),
        attempt("alice", 8, 4, True, turn_id="t-1", numero=1),
    ]
    for a in (*kept, *taken):
        await attempts.add_attempt(a)
    assert await attempts.question_attempts("alice", (3, 2)) == [*kept[:3], *taken[:2]]
    assert sorted(await attempts.forget_turn("alice", "t-1")) == [(3, 2), (4, 1)]
    assert await attempts.question_attempts("alice", (3, 2)) == kept[:3]
    assert await attempts.question_attempts("alice", (4, 1)) == []
    assert await attempts.question_attempts("alice", (3, 4)) == [kept[3]]
    assert await attempts.question_attempts("bob", (3, 2)) == [kept[4]]
    assert await attempts.forget_turn("alice", "t-1") == []


# --- data written by an earlier version ---

_OLD_SQLITE_SCHEMA = """
CREATE TABLE chats (
    turn_id TEXT PRIMARY KEY, userId TEXT NOT NULL, human TEXT NOT NULL, system TEXT NOT NULL,
    tool TEXT, timestamp TEXT NOT NULL, prompt_version TEXT NOT NULL, model TEXT NOT NULL,
    thread_id TEXT NOT NULL, status TEXT NOT NULL
);
CREATE TABLE quiz (
    capitolo INTEGER NOT NULL, numero INTEGER NOT NULL, argomento TEXT, difficolta TEXT,
    corretta TEXT, testo TEXT NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (capitolo, numero)
);
CREATE TABLE quiz_attempts (
    userId TEXT NOT NULL, capitolo INTEGER NOT NULL, numero INTEGER NOT NULL,
    risposta TEXT NOT NULL, corretta INTEGER NOT NULL, timestamp TEXT NOT NULL, turn_id TEXT
);
"""


async def test_a_sqlite_file_of_the_previous_version_is_brought_up_to_date(settings: Settings):
    import sqlite3

    settings.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
    old = make_turn("alice", 1, tool=ToolRecord(tool_name="t", data={"x": 1}))
    with sqlite3.connect(settings.sqlite_file) as conn:
        conn.executescript(_OLD_SQLITE_SCHEMA)
        row = old.model_dump(
            exclude={"tools", "grounding", "retrieved", "feedback", "conversation_id", "error_code"}
        )
        row["tool"] = json.dumps(row["tool"])
        conn.execute(
            f"INSERT INTO chats ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            list(row.values()),
        )
        q = QUESTIONS[0]
        conn.execute(
            "INSERT INTO quiz VALUES (?, ?, ?, ?, ?, ?, ?)",
            (1, 1, q["argomento"], q["difficolta"], q["corretta"], q["testo"], json.dumps(q)),
        )
        conn.execute(
            "INSERT INTO quiz_attempts VALUES ('alice', 1, 1, 'a', 1, ?, NULL)",
            (old.timestamp,),
        )
    conn.close()

    chats, quiz = build_stores(settings)
    (back,) = await chats.recent_turns("alice", 5)
    assert back == old and back.tools == [] and back.error_code is None
    assert await quiz.search_text("portanze") == [QUESTIONS[0]]
    failed = make_turn("alice", 2, tools=[], status="error", error_code="model_unavailable")
    await chats.append_turn(failed)
    assert await chats.recent_turns("alice", 5) == [old, failed]
    attempts = open_stores(settings).attempts
    for _ in range(2):  # an exam's attempt, twice: once
        await attempts.add_attempt(attempt("alice", 1, 1, False, exam_id="e1"))
    assert await attempts.chapter_stats("alice") == [
        ChapterStats(capitolo=1, risposte=2, corrette=1)
    ]


@pytest.mark.integration
async def test_mongodb_questions_of_the_previous_version_get_their_search_terms(
    mongo_server: MongoServer, settings: Settings
):
    from pymongo import MongoClient

    mongo = mongo_settings(mongo_server, settings)
    with MongoClient(mongo.mongodb_uri, serverSelectionTimeoutMS=30_000) as client:
        client[mongo.mongodb_db]["quiz"].insert_one(copy.deepcopy(QUESTIONS[2]))
    quiz = build_stores(mongo)[1]
    assert await quiz.search_text("alettone") == [QUESTIONS[2]]
    assert await quiz.by_chapter_and_number(2, 1) == QUESTIONS[2]  # no search fields leak


# --- backend failures ---


@pytest.fixture(params=["sqlite", "mongo"])
def broken_settings(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> Settings:
    if request.param == "sqlite":
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("a file where the database folder should be")
        return settings.model_copy(update={"sqlite_path": blocker / "db.sqlite3"})
    # A loopback port nothing listens on.
    server = MongoServer(tmp_path)
    return mongo_settings(server, settings, store_timeout_s=0.15)


async def test_a_failing_backend_raises_store_unavailable(broken_settings: Settings):
    stores = open_stores(broken_settings)
    with pytest.raises(StoreUnavailable):
        await stores.chats.latest_turn_ids("alice")
    with pytest.raises(StoreUnavailable):
        await stores.chats.append_turn(make_turn("alice", 1))
    with pytest.raises(StoreUnavailable):
        await stores.quiz.count()
    with pytest.raises(StoreUnavailable):
        await stores.quiz.search_text("portanza")
    with pytest.raises(StoreUnavailable):
        await stores.attempts.add_attempt(attempt("alice", 1, 1, True))
    with pytest.raises(StoreUnavailable):
        await stores.attempts.chapter_stats("alice")


# --- seeding from the command line ---


@pytest.mark.integration
def test_seed_quiz_command_loads_the_demo_questions_into_mongodb_idempotently(
    mongo_server: MongoServer, tmp_path: Path
):
    import os
    import subprocess
    import sys

    from pymongo import MongoClient

    env = {
        **os.environ,
        "MONGODB_URI": mongo_server.uri,
        "MONGODB_DB": "seeded",
        "DATA_DIR": str(tmp_path),
    }
    command = [sys.executable, "-W", "error", "-m", "aircoach", "seed-quiz"]
    for _ in range(2):
        done = subprocess.run(
            command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("373 questions loaded"), done.stdout
        assert "Warning" not in done.stderr, done.stderr
    with MongoClient(mongo_server.uri, serverSelectionTimeoutMS=2000) as client:
        quiz = client["seeded"]["quiz"]
        assert quiz.count_documents({}) == 373
        assert quiz.count_documents({"capitolo": 1, "numero": 1}) == 1

"""Students' feedback on their answers, and the list a docs editor reads."""

from __future__ import annotations

from aircoach.grounding.feedback import MAX_COMMENT_CHARS, Feedback
from aircoach.services import build_stores
from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.scripted_model import Script, ScriptedModels, text
from tests.store.test_contract import make_turn
from tests.store.test_dead_letters import accept_writes, refuse_writes

ADMIN = ["admin:docs"]


async def _turn_id(client, headers) -> str:
    events = await chat(client, headers, "Che cosa dice la SERA.5010?")
    return events[-1]["turn_id"]


async def test_a_student_marks_an_answer_wrong_then_changes_their_mind(settings, auth):
    script = Script([text("La SERA.5010 fissa i minimi VFR speciali.")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        turn_id = await _turn_id(client, auth())
        url = f"/api/turns/{turn_id}/feedback"
        first = await client.post(
            url, json={"voto": "errata", "commento": "Manca il (f)"}, headers=auth()
        )
        second = await client.post(url, json={"voto": "utile"}, headers=auth())
        history = (await client.get("/api/history", headers=auth())).json()["turns"]
        editor = auth("editor", permissions=ADMIN)
        listed = (await client.get("/api/feedback", headers=editor)).json()
        # One item, a page of one: the last page, though just full.
        one = (await client.get("/api/feedback", params={"limit": 1}, headers=editor)).json()

    assert first.status_code == 200, first.text
    assert first.json()["feedback"]["voto"] == "errata"
    assert first.json()["feedback"]["commento"] == "Manca il (f)"
    assert second.status_code == 200 and second.json()["turn_id"] == turn_id
    # Once per turn: the second call replaced the first.
    assert history[0]["feedback"]["voto"] == "utile" and history[0]["feedback"]["commento"] is None
    (item,) = listed["items"]
    assert len(one["items"]) == 1 and one["next_before"] is None
    assert item["voto"] == "utile" and item["turn_id"] == turn_id and item["userId"] == "user-1"
    assert item["question"] == "Che cosa dice la SERA.5010?"
    assert item["answer"] == "La SERA.5010 fissa i minimi VFR speciali."
    assert item["grounding"] == {
        "citations": [
            {
                "text": "SERA.5010",
                "key": "sera.5010",
                "verified": False,
                "reason": "article_not_in_context",  # the docs name other points of SERA
                "sentence": {"start": 0, "end": len(item["answer"])},
                "source_says": [],
                "source": None,
            }
        ],
        "unverified": ["SERA.5010"],
        "withheld": [],
    }
    assert item["prompt_version"] and item["model"] == "scripted"


async def test_only_the_callers_own_turns_take_feedback(settings, auth):
    app = app_with(settings, models=ScriptedModels(Script([text("Ciao!")])))
    async with asgi_client(app) as client:
        turn_id = await _turn_id(client, auth())
        theirs = await client.post(
            f"/api/turns/{turn_id}/feedback", json={"voto": "errata"}, headers=auth("user-2")
        )
        unknown = await client.post(
            "/api/turns/nope/feedback", json={"voto": "errata"}, headers=auth()
        )
        history = (await client.get("/api/history", headers=auth())).json()["turns"]
    assert theirs.status_code == 404 and theirs.json()["error"] == "not_found"
    assert unknown.status_code == 404 and "'nope'" in unknown.json()["message"]
    assert history[0]["feedback"] is None  # nothing stored half-way


async def test_bad_feedback_is_refused_naming_the_field(client, auth):
    url = "/api/turns/t1/feedback"
    wrong_vote = await client.post(url, json={"voto": "sbagliata"}, headers=auth())
    long_comment = "x" * (MAX_COMMENT_CHARS + 1)
    too_long = await client.post(
        url, json={"voto": "errata", "commento": long_comment}, headers=auth()
    )
    extra = await client.post(url, json={"voto": "errata", "stelle": 5}, headers=auth())
    no_token = await client.post(url, json={"voto": "errata"})
    huge = await client.post(url, content=b"{" + b" " * 70_000 + b"}", headers=auth())
    assert wrong_vote.status_code == 422 and wrong_vote.json()["detail"][0]["loc"] == [
        "body",
        "voto",
    ]
    assert too_long.status_code == 422 and too_long.json()["detail"][0]["loc"] == [
        "body",
        "commento",
    ]
    assert long_comment not in too_long.text  # a bounded preview, never the whole input
    assert extra.status_code == 422 and extra.json()["detail"][0]["loc"] == ["body", "stelle"]
    assert no_token.status_code == 401
    assert huge.status_code == 413


async def test_the_feedback_list_needs_the_admin_permission(client, auth):
    response = await client.get("/api/feedback", headers=auth())
    assert response.status_code == 403 and "'admin:docs'" in response.json()["message"]


async def test_the_store_lists_feedback_newest_first_by_vote(store_settings: Settings):
    chats = build_stores(store_settings)[0]
    for n, user in enumerate(["alice", "bob", "alice"], start=1):
        await chats.append_turn(make_turn(user, n))
    turns = {t.human: t for t in await chats.recent_turns("alice", 5)}
    turns |= {t.human: t for t in await chats.recent_turns("bob", 5)}
    ids = {t.human: t.turn_id for t in turns.values()}
    assert len(ids) == 3
    first, second, third = sorted(ids.values())

    async def give(user: str, turn_id: str, voto: str, at: str) -> bool:
        return await chats.set_feedback(user, turn_id, Feedback(voto=voto, at=at))

    assert not await give("bob", first, "errata", "2026-01-01T00:00:01")  # not bob's turn
    assert await give("alice", first, "errata", "2026-01-01T00:00:01")
    assert await give("bob", second, "utile", "2026-01-01T00:00:02")
    assert await give("alice", third, "errata", "2026-01-01T00:00:03")
    assert await give("alice", first, "errata", "2026-01-01T00:00:04")  # replaces, now newest

    errata = await chats.feedback(voto="errata", limit=10, before=None)
    assert [t.turn_id for t in errata] == [first, third]
    everything = await chats.feedback(voto=None, limit=10, before=None)
    assert [t.turn_id for t in everything] == [first, third, second]
    page = await chats.feedback(voto=None, limit=2, before="2026-01-01T00:00:03")
    assert [t.turn_id for t in page] == [second]
    assert everything[0].feedback == Feedback(voto="errata", at="2026-01-01T00:00:04")
    assert not await chats.set_feedback("alice", "missing", Feedback(voto="utile", at="x"))


async def test_a_spooled_turn_takes_feedback_once_the_store_takes_writes(settings, auth):
    """The store refused a turn's write (the answer was streamed whole, then
    `persist_failed`): it waits in the dead-letter spool. Feedback on it is a 503 while the
    store still refuses writes, then lands, on an instance whose replay is not due yet, never
    a 404 for a turn its client was answered."""
    script = Script([text("prima"), text("La SERA.5010 fissa i minimi VFR speciali.")])
    a = app_with(settings, models=ScriptedModels(script))
    b = app_with(settings, models=ScriptedModels(script))
    me = auth()
    async with asgi_client(a) as on_a, asgi_client(b) as on_b:
        await chat(on_b, me, "salvata")  # b looks at the spool after it
        refuse_writes(settings.sqlite_file)
        events = await chat(on_a, me, "Che cosa dice la SERA.5010?")
        assert events[-2]["code"] == "persist_failed"
        url = f"/api/turns/{events[-1]['turn_id']}/feedback"
        while_down = await on_a.post(url, json={"voto": "errata"}, headers=me)
        accept_writes(settings.sqlite_file)
        assert not services_of(b).dead_letters.due
        theirs = await on_b.post(url, json={"voto": "errata"}, headers=auth("mallory"))
        given = await on_b.post(url, json={"voto": "errata"}, headers=me)
        history = (await on_b.get("/api/history", headers=me)).json()["turns"]
    assert while_down.status_code == 503, while_down.text
    assert while_down.json()["error"] == "store_unavailable"
    assert theirs.status_code == 404 and theirs.json()["error"] == "not_found"
    assert given.status_code == 200, given.text
    assert [(t["human"], (t["feedback"] or {}).get("voto")) for t in history] == [
        ("Che cosa dice la SERA.5010?", "errata"),
        ("salvata", None),
    ]
    assert await services_of(a).dead_letters.spool.keys(10) == []
    script.assert_used()


async def test_the_feedback_list_takes_before_as_a_timestamp(store_settings: Settings, auth):
    """`before` is a moment, however it is written (`Z`, an offset, an unencoded `+`): the
    list holds the feedback given strictly before it. Anything else is a 422 naming it, not
    an empty list."""
    app = app_with(store_settings)
    chats = services_of(app).chats
    ats = ["2026-01-01T10:00:01+00:00", "2026-01-01T10:00:01.500000+00:00"]
    ats.append("2026-01-01T10:00:02+00:00")
    for n, at in enumerate(ats, start=1):
        turn = make_turn("alice", n)
        await chats.append_turn(turn)
        assert await chats.set_feedback("alice", turn.turn_id, Feedback(voto="errata", at=at))
    editor = auth("editor", permissions=ADMIN)
    async with asgi_client(app) as client:

        async def listed(before: str) -> list[str]:
            response = await client.get("/api/feedback", params={"before": before}, headers=editor)
            assert response.status_code == 200, response.text
            return [item["at"] for item in response.json()["items"]]

        assert await listed("2026-01-01T10:00:02Z") == [ats[1], ats[0]]
        assert await listed("2026-01-01T12:00:02+02:00") == [ats[1], ats[0]]
        assert await listed("2026-01-01T10:00:01.500000 00:00") == [ats[0]]
        garbage = await client.get("/api/feedback", params={"before": "ieri"}, headers=editor)
        # A time whose UTC is outside years 1-9999 was a 500 (an OverflowError).
        edges = [
            await client.get("/api/feedback", params={"before": edge}, headers=editor)
            for edge in ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00")
        ]
        history = await client.get(
            "/api/history", params={"before": "0001-01-01T00:00:00+01:00"}, headers=auth()
        )
    for refused in (garbage, *edges, history):
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["query", "before"]

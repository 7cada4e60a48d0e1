"""Long-term memory in the chat: what a turn keeps, the "Memoria dell'utente" section a later
question brings back, the request to forget, and `/api/memory`; with the scripted model (what
the model was shown) and the offline one (the app as it ships)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from langchain_core.messages import SystemMessage

from aircoach.errors import StoreUnavailable
from aircoach.memory.ports import MemoryItem, NewItem
from aircoach.memory.recall import SECTION_TITLE
from aircoach.memory.service import FORGOTTEN, FORGOTTEN_ABOUT, NOT_FORGOTTEN, NOTHING_ABOUT
from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.scripted_model import HeldModels, Script, never_answers, text


def system_prompt(script: Any, n: int = -1) -> str:
    first = script.calls[n][0]
    assert isinstance(first, SystemMessage)
    return first.text


def answer(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "agent_message")


async def memory_of(client, auth, sub: str = "user-1") -> list[dict[str, Any]]:
    response = await client.get("/api/memory", headers=auth(sub))
    assert response.status_code == 200, response.text
    return response.json()["items"]


async def test_what_the_student_said_comes_back_for_a_later_question(client, auth, script):
    s = script([text("Il QNH è la pressione al livello del mare."), text("Certo.")])
    first = await chat(client, auth(), "Studio per il VDS. Cos'è il QNH?")
    assert SECTION_TITLE not in system_prompt(s)  # nothing remembered yet
    # A later question in a turn without history: the memory brings the student back.
    second = await chat(client, auth(), "mi rispieghi il qnh?", chat_history=False)
    prompt = system_prompt(s)
    assert f"{SECTION_TITLE}\n" in prompt
    assert "- Studia per: VDS" in prompt
    assert "- Ha chiesto: Studio per il VDS. Cos'è il QNH?" in prompt
    # The section is appended, as the progress section: one prompt version, one thread.
    assert prompt.startswith("# Ruolo")
    assert first[-1]["prompt_version"] == second[-1]["prompt_version"]
    items = await memory_of(client, auth)
    assert [(i["kind"], i["text"]) for i in items] == [
        ("topic", "Ha chiesto: mi rispieghi il qnh?"),
        ("goal", "Studia per: VDS"),
        ("topic", "Ha chiesto: Studio per il VDS. Cos'è il QNH?"),
    ]
    assert items[1]["turn_id"] == first[-1]["turn_id"]
    assert items[0]["conversation_id"] == "default"


async def test_topics_the_history_shows_are_not_repeated(client, auth, script):
    s = script([text("uno"), text("due")])
    await chat(client, auth(), "Studio per il VDS. Cos'è il QNH?")
    await chat(client, auth(), "e il qnh in avvicinamento?")
    prompt = system_prompt(s)
    # The first turn is in the model's history: its topic is left out, the goal stays.
    assert "- Studia per: VDS" in prompt and "Ha chiesto" not in prompt


async def test_a_conversation_leaves_out_only_the_topics_it_shows(settings, auth, models, script):
    s = script([text("uno"), text("due"), text("tre")])
    a, b = app_with(settings, models=models), app_with(settings, models=models)
    async with asgi_client(a) as on_a, asgi_client(b) as on_b:
        await chat(on_a, auth(), "Cos'è il QNH?")
        # A new conversation shows the model no history: the default one's topic comes back.
        events = await chat(on_a, auth(), "mi rispieghi il QNH?", conversation_id="nuova")
        assert events[-1]["context_turns"] == 0
        assert "- Ha chiesto: Cos'è il QNH?" in system_prompt(s)
        # The default conversation on an instance that rebuilds it from the store: its own
        # turn is in the history, the other conversation's topic is not.
        events = await chat(on_b, auth(), "e il QNH in crociera?")
        assert events[-1]["context_turns"] == 1
        prompt = system_prompt(s)
        assert "- Ha chiesto: mi rispieghi il QNH?" in prompt
        assert "Cos'è il QNH?" not in prompt


async def test_a_topic_pushed_out_of_the_history_by_small_talk_comes_back(
    settings, auth, models, script
):
    s = script([text("uno"), text("due"), text("tre"), text("quattro"), text("cinque")])
    settings = settings.model_copy(update={"history_limit": 2})
    async with asgi_client(app_with(settings, models=models)) as client:
        await chat(client, auth(), "Cos'è il QNH?")
        await chat(client, auth(), "ok grazie")  # small talk: no topic
        await chat(client, auth(), "perfetto")
        await chat(client, auth(), "e il QNH in avvicinamento?")
        shown = " ".join(m.text for m in s.calls[-1][1:])
        assert "Cos'è il QNH?" not in shown  # out of the two turns of history...
        assert "- Ha chiesto: Cos'è il QNH?" in system_prompt(s)  # ...so the memory has it
        await chat(client, auth(), "e il QNH in crociera?")
        prompt = system_prompt(s)
        assert "- Ha chiesto: Cos'è il QNH?" in prompt
        assert "- Ha chiesto: e il QNH in avvicinamento?" not in prompt  # in the history


async def test_use_memory_retrieval_false_leaves_the_section_out_and_still_remembers(
    client, auth, script
):
    s = script([text("uno"), text("due")])
    await chat(client, auth(), "Studio per il VDS")
    await chat(client, auth(), "e il qnh?", chat_history=False, use_memory_retrieval=False)
    assert SECTION_TITLE not in system_prompt(s)
    assert [i["text"] for i in await memory_of(client, auth)] == [
        "Ha chiesto: e il qnh?",
        "Studia per: VDS",
        "Ha chiesto: Studio per il VDS",
    ]


async def test_a_request_to_forget_clears_the_memory_and_says_so(client, auth, script):
    s = script([text("Ok."), text("Dimmi pure.")])
    await chat(client, auth(), "ho l'esame a marzo e faccio fatica con la meteo")
    assert len(await memory_of(client, auth)) == 3
    events = await chat(client, auth(), "Dimentica quello che ti ho detto")
    assert answer(events) == FORGOTTEN
    assert events[-1]["type"] == "done" and events[-1]["status"] == "ok"
    assert len(s.calls) == 1  # the model was not asked
    assert await memory_of(client, auth) == []
    # The next turn sees the whole conversation, the request to forget included, and no memory.
    after = await chat(client, auth(), "da dove partiamo?")
    assert after[-1]["context_turns"] == 2
    shown = " ".join(m.text for m in s.calls[-1])
    assert FORGOTTEN in shown and SECTION_TITLE not in system_prompt(s)
    history = (await client.get("/api/history", headers=auth())).json()["turns"]
    assert history[1]["system"] == FORGOTTEN


async def test_a_request_to_forget_one_topic_forgets_that_topic_only(client, auth, script):
    s = script([text("Ok."), text("Il QNH è..."), text("Il vento...")])
    await chat(client, auth(), "studio per il VDS")
    await chat(client, auth(), "Che cos'è il QNH?")
    await chat(client, auth(), "come si legge il vento al traverso?")
    events = await chat(client, auth(), "Dimentica quello che ti ho detto sul QNH")
    assert answer(events) == FORGOTTEN_ABOUT.format(about="QNH")
    assert len(s.calls) == 3  # the model was not asked
    left = [i["text"] for i in await memory_of(client, auth)]
    assert left == [
        "Ha chiesto: come si legge il vento al traverso?",
        "Studia per: VDS",
        "Ha chiesto: studio per il VDS",
    ]
    # A topic the memory does not hold forgets nothing, and says so.
    events = await chat(client, auth(), "cancella tutto riguardo alla meteo")
    assert answer(events) == NOTHING_ABOUT.format(about="meteo")
    assert [i["text"] for i in await memory_of(client, auth)] == left


async def test_a_question_about_flying_with_a_verb_of_forgetting_is_answered(client, auth, script):
    s = script([text("Ok."), text("Contatta la torre e chiedi una nuova autorizzazione.")])
    await chat(client, auth(), "studio per il VDS")
    kept = await memory_of(client, auth)
    events = await chat(client, auth(), "Se la torre cancella tutto il piano di volo cosa faccio?")
    assert answer(events) == "Contatta la torre e chiedi una nuova autorizzazione."
    assert len(s.calls) == 2  # the model answered
    # Nothing was forgotten; the question is remembered as any other.
    after = await memory_of(client, auth)
    assert after[1:] == kept
    assert after[0]["text"].startswith("Ha chiesto: Se la torre cancella tutto")


async def test_a_json_turn_forgets_too(client, auth, script):
    s = script([text("Ok.")])
    await chat(client, auth(), "studio per il VDS")
    response = await client.post(
        "/api/stream_query",
        json={"query": "scordati di me", "stream": False, "chat_history": False},
        headers=auth(),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["answer"] == FORGOTTEN and body["status"] == "ok"
    assert len(s.calls) == 1
    assert await memory_of(client, auth) == []


async def test_the_offline_model_remembers_and_forgets(client, auth):
    events = await chat(client, auth(), "Ciao, sto studiando per il PPL. Come si legge un METAR?")
    assert events[-1]["type"] == "done" and events[-1]["status"] == "ok"
    items = await memory_of(client, auth)
    assert [i["kind"] for i in items] == ["goal", "topic"]
    assert items[0]["text"] == "Studia per: PPL"
    events = await chat(client, auth(), "cancella la mia memoria")
    assert answer(events) == FORGOTTEN
    assert await memory_of(client, auth) == []


async def test_the_offline_model_says_what_it_remembers_of_the_student(client, auth):
    """ "Cosa ti ricordi di me?" was searched in the manual (a passage on stress came back);
    it is answered from the prompt's memory section, as a model with that section would."""
    nothing = answer(await chat(client, auth(), "Cosa ti ricordi di me?"))
    assert nothing.startswith("[modello offline] Non ricordo ancora niente di te")
    await chat(client, auth(), "Ho l'esame a marzo e faccio fatica con la meteorologia")
    for query in ("cosa ti ricordi di me?", "Che cosa sai di me?", "ti ricordi di me?"):
        said = answer(await chat(client, auth(), query))
        assert said.startswith("[modello offline] Di te ricordo:\n"), query
        assert "- Esame: a marzo" in said and "- Fa fatica con: meteorologia" in said, query
        assert "Fonte" not in said, query  # not a search of the manual
    await chat(client, auth(), "cancella la mia memoria")
    gone = answer(await chat(client, auth(), "cosa ti ricordi di me?"))
    assert gone.startswith("[modello offline] Non ricordo ancora niente di te")


async def test_the_offline_model_answers_when_the_exam_is_from_what_it_was_told(client, auth):
    """ "quanto manca al mio esame?" was searched in the manual, which found nothing; the
    memory holds the answer when the student said it, and else the coach asks for it."""
    unknown = answer(await chat(client, auth(), "quanto manca al mio esame?"))
    assert unknown.startswith("[modello offline] Non mi hai ancora detto quando hai l'esame")
    await chat(client, auth(), "Studio per la LAPL e ho l'esame a giugno")
    for query in ("quanto manca al mio esame?", "quando ho l'esame?"):
        said = answer(await chat(client, auth(), query))
        assert said.startswith("[modello offline] Dell'esame mi hai detto: a giugno."), query
        assert "Fonte" not in said, query
    # The exam's rules are still the manual's.
    rules = answer(await chat(client, auth(), "cosa serve per l'esame?"))
    assert "mi hai detto" not in rules


async def test_the_offline_model_takes_note_of_what_the_student_says_of_themselves(client, auth):
    """A message that only says something of the student was searched in the manual: "Ho
    l'esame a marzo..." got a passage on a law of "25 marzo 1985"."""
    said = answer(await chat(client, auth(), "Ho l'esame a marzo e faccio fatica con la meteo"))
    assert said.startswith("[modello offline] Preso nota"), said
    assert "- Esame: a marzo\n- Fa fatica con: meteo" in said
    assert "«fammi una domanda di meteo»" in said and "Fonte" not in said
    plain = answer(await chat(client, auth(), "Studio per il PPL"))
    assert "- Studia per: PPL" in plain and "«fammi una domanda»" in plain
    # With a question or a request in it, or saying only what is hard ("non capisco il QNH"
    # asks for it to be explained), the message is answered from the manual.
    for query in (
        "Ho l'esame a marzo, spiegami il QNH",
        "Studio per il PPL: cos'è il QNH?",
        "Non capisco il QNH",
    ):
        answered = answer(await chat(client, auth(), query))
        assert "Preso nota" not in answered and "QNH" in answered, query
        assert "(Fonte: § 3." in answered and "marzo" not in answered, query


async def test_the_routes_show_and_erase_the_callers_items_only(client, auth, script):
    script([text("uno"), text("due"), text("tre")])
    await chat(client, auth("alice"), "Studio per il VDS. Cos'è il QNH?")
    await chat(client, auth("bob"), "faccio fatica con la navigazione")
    await chat(client, auth("alice"), "come funziona il variometro?")
    alice = await memory_of(client, auth, "alice")
    bob = await memory_of(client, auth, "bob")
    assert len(alice) == 3 and len(bob) == 2
    assert not {i["id"] for i in alice} & {i["id"] for i in bob}
    assert all("navigazione" not in i["text"] for i in alice)
    # Another user's item is 404 and stays.
    gone = await client.delete(f"/api/memory/{bob[0]['id']}", headers=auth("alice"))
    assert gone.status_code == 404 and gone.json()["error"] == "not_found"
    assert len(await memory_of(client, auth, "bob")) == 2
    deleted = await client.delete(f"/api/memory/{alice[0]['id']}", headers=auth("alice"))
    assert deleted.status_code == 200 and deleted.json() == {"deleted": 1}
    assert [i["id"] for i in await memory_of(client, auth, "alice")] == [i["id"] for i in alice[1:]]
    again = await client.delete(f"/api/memory/{alice[0]['id']}", headers=auth("alice"))
    assert again.status_code == 404
    cleared = await client.delete("/api/memory", headers=auth("alice"))
    assert cleared.status_code == 200 and cleared.json() == {"deleted": 2}
    assert await memory_of(client, auth, "alice") == []
    assert len(await memory_of(client, auth, "bob")) == 2
    for method, path in (
        ("GET", "/api/memory"),
        ("DELETE", "/api/memory"),
        ("DELETE", "/api/memory/x"),
    ):
        assert (await client.request(method, path)).status_code == 401


async def test_the_store_bound_holds_through_the_chat(data_dir, auth, models, script):
    settings = Settings(_env_file=None, data_dir=data_dir, tool_env={}, memory_max_items=3)
    script([text("ok")] * 4)
    async with asgi_client(app_with(settings, models=models)) as client:
        for n in range(4):
            await chat(client, auth(), f"domanda sul capitolo {n}", chat_history=False)
        texts = [i["text"] for i in await memory_of(client, auth)]
    assert texts == [f"Ha chiesto: domanda sul capitolo {n}" for n in (3, 2, 1)]


class BrokenMemory:
    """A memory store whose backend is down."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def add(self, user_id: str, items: Sequence[NewItem], *, keep: int) -> None:
        self.calls.append("add")
        raise StoreUnavailable()

    async def items(self, user_id: str, *, limit: int) -> list[MemoryItem]:
        self.calls.append("items")
        raise StoreUnavailable()

    async def delete(self, user_id: str, item_id: str) -> bool:
        raise StoreUnavailable()

    async def clear(self, user_id: str) -> int:
        self.calls.append("clear")
        raise StoreUnavailable()

    async def forget_conversation(self, user_id: str, conversation_id: str) -> int:
        raise StoreUnavailable()


async def test_a_memory_store_that_fails_never_fails_the_turn(
    settings, auth, models, script, caplog: pytest.LogCaptureFixture
):
    broken = BrokenMemory()
    s = script([text("Il QNH è la pressione al livello del mare.")])
    async with asgi_client(app_with(settings, models=models, memory_items=broken)) as client:
        with caplog.at_level(logging.WARNING, logger="aircoach.memory.service"):
            events = await chat(client, auth(), "Studio per il VDS. Cos'è il QNH?")
            assert answer(events) == "Il QNH è la pressione al livello del mare."
            assert events[-1]["status"] == "ok"
            assert SECTION_TITLE not in system_prompt(s)
            forget = await chat(client, auth(), "dimentica quello che ti ho detto")
            assert answer(forget) == NOT_FORGOTTEN
        assert broken.calls == ["items", "add", "clear"]
        assert (
            sum("memory" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)
            == 3
        )
        listed = await client.get("/api/memory", headers=auth())
        assert listed.status_code == 503 and listed.json()["error"] == "store_unavailable"
        # The turns themselves were stored.
        assert len((await client.get("/api/history", headers=auth())).json()["turns"]) == 2


async def test_two_instances_share_the_memory(store_settings, auth, models, script):
    s = script([text("uno"), text("due")])
    a, b = app_with(store_settings, models=models), app_with(store_settings, models=models)
    assert services_of(a).memory_items is not services_of(b).memory_items
    async with asgi_client(a) as on_a, asgi_client(b) as on_b:
        await chat(on_a, auth(), "Studio per il VDS e ho l'esame a giugno. Cos'è il QNH?")
        items = await memory_of(on_b, auth)
        assert [i["kind"] for i in items] == ["goal", "exam", "topic"]
        await chat(on_b, auth(), "e il QNH in avvicinamento?", chat_history=False)
        prompt = system_prompt(s)
        assert "- Studia per: VDS" in prompt and "- Esame: a giugno" in prompt
        assert "Cos'è il QNH?" in prompt
        gone = await on_a.delete(f"/api/memory/{items[0]['id']}", headers=auth())
        assert gone.status_code == 200
        assert len(await memory_of(on_b, auth)) == 3  # two left, and the second turn's topic
        assert (await on_b.delete("/api/memory", headers=auth())).json() == {"deleted": 3}
        assert await memory_of(on_a, auth) == []


async def test_deleting_a_conversation_forgets_the_memory_it_gave(client, auth, script):
    script([text("uno"), text("due")])
    await chat(client, auth(), "Studio per il VDS", conversation_id="meteo")
    await chat(client, auth(), "Cos'è il QNH?", conversation_id="altimetria")
    assert {i["conversation_id"] for i in await memory_of(client, auth)} == {
        "meteo",
        "altimetria",
    }
    response = await client.delete("/api/conversations/meteo", headers=auth())
    assert response.status_code == 204, response.text
    # The other conversation's items stay; those of the deleted one are gone.
    assert [(i["conversation_id"], i["text"]) for i in await memory_of(client, auth)] == [
        ("altimetria", "Ha chiesto: Cos'è il QNH?")
    ]


@pytest.mark.parametrize(
    "message", ["Studio per il VDS e ho l'esame a marzo", "Dimentica quello che ti ho detto"]
)
async def test_a_request_refused_while_its_conversation_is_busy_changes_no_memory(
    app, client, auth, script, message
):
    script([text("Ok.")])
    await chat(client, auth(), "faccio fatica con la meteo")
    kept = await memory_of(client, auth)
    turn_log = services_of(app).turn_log
    now = services_of(app).clock()
    # Another turn of the default conversation runs (on some instance): the message is refused.
    assert await turn_log.claim("user-1", "user-1", "t-other", now=now, expires_at=now + 30) is None
    response = await client.post("/api/stream_query", json={"query": message}, headers=auth())
    assert response.status_code == 409, response.text
    assert response.json()["turn_id"] == "t-other"
    # Neither a new item nor a forgotten one: the memory changes only when a turn runs.
    assert await memory_of(client, auth) == kept


async def test_a_topic_forgotten_half_way_says_only_part_was_forgotten():
    """The items about a topic are deleted one by one: a store that fails after the first
    leaves some gone, and the answer says so (it said nothing had been erased)."""
    from aircoach.memory.service import PARTLY_FORGOTTEN, UserMemory

    def item(n: int) -> MemoryItem:
        return MemoryItem(
            id=f"i{n}",
            kind="topic",
            text=f"Ha chiesto: il QNH {n}",
            turn_id=f"t{n}",
            created_at="2026-11-27T00:00:00+00:00",
        )

    class FailsOnSecondDelete(BrokenMemory):
        def __init__(self) -> None:
            super().__init__()
            self.deleted: list[str] = []

        async def items(self, user_id: str, *, limit: int) -> list[MemoryItem]:
            return [item(1), item(2)]

        async def delete(self, user_id: str, item_id: str) -> bool:
            if self.deleted:
                raise StoreUnavailable()
            self.deleted.append(item_id)
            return True

    memory = UserMemory(FailsOnSecondDelete(), max_items=10, prompt_items=5, prompt_chars=500)
    assert await memory.forget("user-1", "QNH") == PARTLY_FORGOTTEN.format(about="QNH")
    assert await UserMemory(BrokenMemory(), 10, 5, 500).forget("user-1", "QNH") == NOT_FORGOTTEN


async def test_what_a_message_said_is_kept_when_its_answer_failed_or_was_interrupted(
    client, auth, models
):
    """The memory's items are written with the stored turn, whatever its outcome."""
    started = anyio.Event()
    models.provider = HeldModels(
        Script([RuntimeError("the model is down"), text("Ok.")]), never_answers(2, started)
    )
    failed = await chat(client, auth(), "Studio per il VDS")
    assert failed[-1]["status"] == "error"
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat, client, auth(), "Faccio fatica con la meteo")
        await started.wait()  # that turn runs; the next message interrupts it
        await chat(client, auth(), "Cos'è il METAR?", if_busy="interrupt")
    history = (await client.get("/api/history", headers=auth())).json()["turns"]
    assert [t["status"] for t in history] == ["ok", "interrupted", "error"]  # newest first
    assert sorted(i["text"] for i in await memory_of(client, auth)) == [
        "Fa fatica con: meteo",
        "Ha chiesto: Cos'è il METAR?",
        "Ha chiesto: Faccio fatica con la meteo",
        "Ha chiesto: Studio per il VDS",
        "Studia per: VDS",
    ]


async def test_a_message_that_interrupts_a_turn_knows_what_the_interrupted_message_said(
    client, auth, models
):
    """The interrupted turn's memory items are written as it is stored; the turn that
    interrupted it waits for that and is prepared again, so its prompt has them."""
    started = anyio.Event()
    s = Script([text("Ok.")])
    models.provider = HeldModels(s, never_answers(1, started))
    async with anyio.create_task_group() as tg:
        tg.start_soon(chat, client, auth(), "Ho l'esame a marzo. Cos'è il METAR?")
        await started.wait()
        await chat(client, auth(), "E il TAF?", if_busy="interrupt")
    prompt = system_prompt(s)
    assert SECTION_TITLE in prompt and "- Esame: a marzo" in prompt

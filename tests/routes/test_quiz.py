"""The quiz API on both stores: chapters, questions without their key, graded answers,
progress; the same grading and attempts as the chat."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from aircoach.errors import StoreUnavailable
from aircoach.quiz import repeats
from aircoach.settings import Settings
from tests.clock import quota_clock
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.scripted_model import Script, ScriptedModels, call, text

PUBLIC = {"capitolo", "numero", "argomento", "difficolta", "testo", "risposte"}


@pytest.fixture
async def api(bank_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app_with(bank_settings)) as client:
        yield client


async def test_chapters_with_titles_and_question_counts(api, auth):
    response = await api.get("/api/quiz/chapters", headers=auth())
    assert response.status_code == 200
    items = response.json()["items"]
    assert [c["capitolo"] for c in items] == list(range(1, 11))
    assert items[0] == {"capitolo": 1, "titolo": "Principi di aerodinamica", "domande": 35}
    assert sum(c["domande"] for c in items) == 373


async def test_questions_by_chapter_in_order_without_the_key(api, auth):
    response = await api.get(
        "/api/quiz/questions", params={"capitolo": 3, "limit": 4}, headers=auth()
    )
    assert response.status_code == 200
    items = response.json()["items"]
    assert [(q["capitolo"], q["numero"]) for q in items] == [(3, 1), (3, 2), (3, 3), (3, 4)]
    assert all(set(q) == PUBLIC for q in items)
    everything = (await api.get("/api/quiz/questions", params={"limit": 50}, headers=auth())).json()
    assert len(everything["items"]) == 50 and everything["items"][0]["capitolo"] == 1


async def test_questions_by_forgiving_text_best_first(api, auth):
    def search(**params):
        return api.get("/api/quiz/questions", params={"limit": 50, **params}, headers=auth())

    accented = (await search(testo="velocità")).json()["items"]
    assert len(accented) >= 7
    assert (await search(testo="VELOCITA")).json()["items"] == accented
    typo = (await search(testo="velocitta")).json()["items"]
    assert [q["numero"] for q in typo] == [q["numero"] for q in accented]
    in_chapter = (await search(testo="velocita", capitolo=1)).json()["items"]
    assert in_chapter and all(q["capitolo"] == 1 for q in in_chapter)
    assert (await search(testo="elicottero")).json() == {"items": []}
    blank = await search(testo="   ")  # found nothing, as a 200: a 422 as the manual's search
    assert blank.status_code == 422 and blank.json()["detail"][0]["loc"] == ["query", "testo"]
    best = (await search(testo="velocita stallo")).json()["items"][0]
    assert "velocit" in best["testo"].casefold() and "stallo" in best["testo"].casefold()


async def test_one_question_without_the_key_or_404(api, auth):
    response = await api.get("/api/quiz/questions/1/1", headers=auth())
    assert response.status_code == 200
    assert set(response.json()) == PUBLIC and response.json()["risposte"]["c"] == "quadruplica"
    missing = await api.get("/api/quiz/questions/1/99", headers=auth())
    assert missing.status_code == 404
    assert missing.json() == {
        "error": "not_found",
        "message": "Domanda 99 del capitolo 1 non trovata.",
    }


@pytest.mark.parametrize(
    ("right", "typo"),
    [("incidenza", "incidynza"), ("comunica", "comnuica"), ("certificato", "certifiacto")],
)
async def test_a_search_word_with_one_typo_finds_what_the_word_finds(api, auth, right, typo):
    def search(testo):
        return api.get("/api/quiz/questions", params={"testo": testo}, headers=auth())

    found = (await search(right)).json()["items"]
    assert found and (await search(typo)).json()["items"] == found


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/quiz/questions?capitolo=0", "capitolo"),
        ("/api/quiz/questions?capitolo=11", "capitolo"),
        ("/api/quiz/questions?capitolo=tre", "capitolo"),
        ("/api/quiz/questions?testo=ab", "testo"),
        (f"/api/quiz/questions?testo={'x' * 201}", "testo"),
        ("/api/quiz/questions?limit=0", "limit"),
        ("/api/quiz/questions?limit=51", "limit"),
        ("/api/quiz/questions/0/1", "capitolo"),
        ("/api/quiz/questions/1/0", "numero"),
        ("/api/quiz/questions/1/x", "numero"),
    ],
)
async def test_bad_parameters_are_422_naming_them(api, auth, path, field):
    response = await api.get(path, headers=auth())
    assert response.status_code == 422
    assert field in [err["loc"][-1] for err in response.json()["detail"]]


async def test_answers_are_graded_and_counted_in_progress(api, auth):
    async def answer(risposta, numero=1, user="alice"):
        body = {"capitolo": 1, "numero": numero, "risposta": risposta}
        return await api.post("/api/quiz/answers", json=body, headers=auth(user))

    right = await answer("C")
    assert right.status_code == 200
    assert set(right.json()) == {
        "capitolo",
        "numero",
        "risposta",
        "corretta",
        "risposta_corretta",
        "spiegazione",
        "riferimento",
    }
    assert right.json()["riferimento"] == "1.2"
    assert (right.json()["risposta"], right.json()["corretta"]) == ("c", True)
    assert right.json()["spiegazione"].startswith("La portanza è proporzionale")
    wrong = (await answer("si dimezza")).json()
    assert (wrong["risposta"], wrong["corretta"], wrong["risposta_corretta"]) == ("b", False, "c")
    await answer("la a")
    await answer("c", user="bob")

    progress = (await api.get("/api/progress", headers=auth("alice"))).json()
    first = progress["capitoli"][0]
    assert {k: first[k] for k in ("capitolo", "titolo", "risposte", "corrette")} == {
        "capitolo": 1,
        "titolo": "Principi di aerodinamica",
        "risposte": 3,
        "corrette": 1,
    }
    # One question answered three times in moments: seen once; its first answer counted.
    assert (first["viste"], first["padroneggiate"], first["quota_corrette"]) == (1, 1, 0.333)
    assert [c["capitolo"] for c in progress["capitoli"]] == list(range(1, 11))
    assert {k: progress[k] for k in ("risposte", "corrette", "deboli", "viste")} == {
        "risposte": 3,
        "corrette": 1,
        "deboli": [1],
        "viste": 1,
    }
    assert 0 < progress["prontezza"] < 1 and len(progress["ultimi_7_giorni"]) == 7
    today = progress["ultimi_7_giorni"][-1]
    assert (today["risposte"], today["corrette"], today["quota_corrette"]) == (3, 1, 0.333)
    empty = (await api.get("/api/progress", headers=auth("nobody"))).json()
    assert (empty["risposte"], empty["corrette"], empty["deboli"], empty["viste"]) == (0, 0, [], 0)
    assert {c["risposte"] for c in empty["capitoli"]} == {0} and len(empty["capitoli"]) == 10


async def test_an_integer_written_as_1_0_is_an_integer(api, auth):
    # JSON Schema's `integer` includes 1.0; `true` and "1" are refused (below).
    body = {"capitolo": 1.0, "numero": 1.0, "risposta": "c"}
    response = await api.post("/api/quiz/answers", json=body, headers=auth())
    assert response.status_code == 200 and response.json()["corretta"] is True


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"capitolo": 1, "numero": 1, "risposta": "e"}, 422, "risposta"),
        ({"capitolo": 1, "numero": 1, "risposta": "forse"}, 422, "risposta"),
        ({"capitolo": 1, "numero": 1, "risposta": ""}, 422, "risposta"),
        ({"capitolo": 1, "numero": 1, "risposta": "a" * 501}, 422, "risposta"),
        ({"capitolo": 1, "numero": 1}, 422, "risposta"),
        ({"capitolo": 0, "numero": 1, "risposta": "a"}, 422, "capitolo"),
        ({"capitolo": 1, "numero": "uno", "risposta": "a"}, 422, "numero"),
        ({"capitolo": 1, "numero": True, "risposta": "a"}, 422, "numero"),
        ({"capitolo": 1, "numero": "1", "risposta": "a"}, 422, "numero"),
        ({"capitolo": 1, "numero": 1, "risposta": "a", "rispota": "b"}, 422, "rispota"),
        ({"capitolo": 1, "numero": 99, "risposta": "a"}, 404, None),
    ],
)
async def test_bad_answers_are_refused_and_nothing_is_stored(api, auth, body, status, field):
    response = await api.post("/api/quiz/answers", json=body, headers=auth())
    assert response.status_code == status, response.text
    if field is not None:
        assert field in [err["loc"][-1] for err in response.json()["detail"]]
        assert len(response.text) < 1000  # a long answer is not echoed back
    progress = (await api.get("/api/progress", headers=auth())).json()
    assert progress["risposte"] == 0


@pytest.mark.parametrize(
    ("said", "letter"),
    [
        ("la c è giusta", "c"),
        ("c è la risposta giusta", "c"),
        ("la b è corretta", "b"),
        ("sono sicuro: c", "c"),
    ],
)
async def test_a_letter_said_in_a_sentence_is_graded(api, auth, said, letter):
    body = {"capitolo": 1, "numero": 1, "risposta": said}
    response = await api.post("/api/quiz/answers", json=body, headers=auth())
    assert response.status_code == 200, response.text
    assert response.json()["risposta"] == letter


async def test_two_different_letters_are_not_one_answer(api, auth):
    body = {"capitolo": 1, "numero": 1, "risposta": "a o c?"}
    response = await api.post("/api/quiz/answers", json=body, headers=auth())
    assert response.status_code == 422
    assert [err["loc"] for err in response.json()["detail"]] == [["body", "risposta"]]


async def test_a_letter_that_is_not_an_option_says_which_are(api, auth):
    body = {"capitolo": 1, "numero": 1, "risposta": "E"}
    (error,) = (await api.post("/api/quiz/answers", json=body, headers=auth())).json()["detail"]
    assert error["loc"] == ["body", "risposta"]
    assert error["msg"] == "la lettera 'e' non è un'opzione; valide: a, b, c, d"


@pytest.mark.parametrize(
    "request_",
    [
        ("GET", "/api/quiz/chapters"),
        ("GET", "/api/quiz/questions"),
        ("GET", "/api/quiz/questions/1/1"),
        ("POST", "/api/quiz/answers"),
        ("GET", "/api/progress"),
    ],
)
async def test_every_quiz_route_needs_a_token(api, request_):
    method, path = request_
    response = await api.request(method, path, json={"capitolo": 1, "numero": 1, "risposta": "a"})
    assert response.status_code == 401 and response.json()["error"] == "missing_token"


async def test_answers_graded_in_the_chat_count_in_the_same_progress(
    store_settings: Settings, auth
):
    script = Script(
        [
            call("verifica_risposta", capitolo=2, numero=1, risposta="a"),
            text("Vediamo."),
        ]
    )
    app = app_with(store_settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "la a")
        graded = dict(events[0]["data"])
        after_chat = graded.pop("progresso")
        assert after_chat == (await client.get("/api/progress", headers=auth())).json()
        body = {"capitolo": 2, "numero": 1, "risposta": "a"}
        rest = (await client.post("/api/quiz/answers", json=body, headers=auth())).json()
        assert graded == rest  # the same grading from both doors; the chat adds the progress
        progress = (await client.get("/api/progress", headers=auth())).json()
    assert after_chat["risposte"] == 1
    answered = [c for c in progress["capitoli"] if c["risposte"]]
    assert [(c["capitolo"], c["risposte"], c["viste"]) for c in answered] == [(2, 2, 1)]
    assert progress["risposte"] == 2
    attempts = await app.state.services.attempts.recent_attempts("user-1", 5)
    assert [a.turn_id for a in attempts] == [None, events[-1]["turn_id"]]


async def test_answers_sent_past_the_minute_budget_are_refused_and_not_counted(
    store_settings: Settings, auth
):
    limit = 4
    settings = store_settings.model_copy(update={"quota_answers_per_minute": limit})
    body = {"capitolo": 1, "numero": 1, "risposta": "c"}
    async with asgi_client(app_with(settings, clock=quota_clock())) as api:
        # Three times the budget, as fast as it goes, in a minute that cannot roll over.
        answers = [
            await api.post("/api/quiz/answers", json=body, headers=auth("spammer"))
            for _ in range(3 * limit)
        ]
        progress = (await api.get("/api/progress", headers=auth("spammer"))).json()
        other = await api.post("/api/quiz/answers", json=body, headers=auth("someone-else"))
        invalid = await api.post(
            "/api/quiz/answers", json={"capitolo": "x"}, headers=auth("free-422")
        )
    graded = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert (len(graded), len(refused)) == (limit, 2 * limit)
    assert refused[0].json()["error"] == "quota_exceeded"
    assert (
        refused[0]
        .json()["message"]
        .startswith(f"Hai inviato il massimo di risposte in un minuto ({limit})")
    )
    assert refused[0].headers["retry-after"] == "51"  # 10 s into the minute, rounded up
    assert progress["risposte"] == len(graded)  # a refused answer is no attempt
    assert other.status_code == 200  # the budget is the user's
    assert invalid.status_code == 422


async def test_answers_to_a_missing_question_do_not_spend_the_budget(
    store_settings: Settings, auth
):
    limit = 2
    settings = store_settings.model_copy(update={"quota_answers_per_minute": limit})
    missing = {"capitolo": 1, "numero": 999, "risposta": "a"}
    real = {"capitolo": 1, "numero": 1, "risposta": "la c"}
    async with asgi_client(app_with(settings, clock=quota_clock())) as api:
        lost = [
            await api.post("/api/quiz/answers", json=missing, headers=auth())
            for _ in range(limit + 1)
        ]
        graded = [
            await api.post("/api/quiz/answers", json=real, headers=auth()) for _ in range(limit)
        ]
        over = await api.post("/api/quiz/answers", json=real, headers=auth())
    assert [r.status_code for r in lost] == [404] * (limit + 1)
    assert [r.status_code for r in graded] == [200] * limit
    assert over.status_code == 429


async def test_review_lists_what_was_answered_wrong_without_the_key(api, auth):
    body = {"capitolo": 6, "numero": 2, "risposta": "a"}  # its key is another letter
    graded = await api.post("/api/quiz/answers", json=body, headers=auth())
    assert graded.json()["corretta"] is False
    response = await api.get("/api/quiz/review", params={"limit": 3}, headers=auth())
    assert response.status_code == 200
    items = response.json()["items"]
    assert len(items) == 3 and (items[0]["capitolo"], items[0]["numero"]) == (6, 2)
    assert set(items[0]) == PUBLIC | {"scadenza"} and items[0]["scadenza"]
    assert (
        await api.get("/api/quiz/review", params={"limit": 0}, headers=auth())
    ).status_code == 422
    assert (
        await api.get("/api/quiz/review", params={"limit": 101}, headers=auth())
    ).status_code == 422
    assert (await api.get("/api/quiz/review")).status_code == 401


def _keys(items: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(i["capitolo"], i["numero"]) for i in items]


async def test_review_pages_with_a_cursor_and_never_lists_a_question_twice(api, auth):
    """`next_cursor` gives the next page (before, the list had no paging: a client asking
    again got the same first page). Questions answered meanwhile do not shift it: a page
    holds none of the questions listed before, answered or not."""
    wrong = [{"capitolo": 6, "numero": n, "risposta": "a"} for n in (2, 3, 5)]
    for body in wrong:
        await api.post("/api/quiz/answers", json=body, headers=auth())
    first = (await api.get("/api/quiz/review", params={"limit": 2}, headers=auth())).json()
    assert len(first["items"]) == 2 and first["next_cursor"]
    # Answering a listed question again (due again at once) must not bring it back.
    await api.post("/api/quiz/answers", json=wrong[0], headers=auth())
    second = (
        await api.get(
            "/api/quiz/review",
            params={"limit": 2, "cursor": first["next_cursor"]},
            headers=auth(),
        )
    ).json()
    assert len(second["items"]) == 2 and second["next_cursor"]
    assert not set(_keys(first["items"])) & set(_keys(second["items"]))
    due = {(6, 2), (6, 3), (6, 5)}
    assert due <= set(_keys(first["items"] + second["items"]))


async def test_the_last_review_page_has_no_cursor(api, auth):
    chapters = (await api.get("/api/quiz/chapters", headers=auth())).json()["items"]
    size = next(c["domande"] for c in chapters if c["capitolo"] == 4)
    params = {"limit": size - 1, "capitolo": 4}
    first = (await api.get("/api/quiz/review", params=params, headers=auth())).json()
    assert len(first["items"]) == size - 1 and first["next_cursor"]
    last = (
        await api.get(
            "/api/quiz/review", params={**params, "cursor": first["next_cursor"]}, headers=auth()
        )
    ).json()
    assert len(last["items"]) == 1 and last["next_cursor"] is None
    assert _keys(last["items"])[0] not in set(_keys(first["items"]))
    whole = await api.get("/api/quiz/review", params={"limit": size, "capitolo": 4}, headers=auth())
    assert whole.json()["next_cursor"] is None


@pytest.mark.parametrize("cursor", ["", "!!", "1", "1.2-", "1:2", "1." + "2." * 9_000 + "3"])
async def test_a_malformed_review_cursor_is_a_422_naming_it(api, auth, cursor):
    response = await api.get("/api/quiz/review", params={"cursor": cursor}, headers=auth())
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["query", "cursor"]
    assert len(response.text) < 2_000


async def test_an_answer_sent_again_with_its_key_counts_once(store_settings: Settings, auth):
    """A double tap, or a client's retry after a timeout, reaching another instance: the
    repeat gets the first grading and records nothing. It recorded a second attempt, so one
    wrong answer tapped twice made its chapter weak (2 answers)."""
    wrong = {"capitolo": 1, "numero": 1, "risposta": "b"}  # the key is c
    headers = {**auth(), "Idempotency-Key": "tap-7f0c"}
    async with (
        asgi_client(app_with(store_settings)) as one,
        asgi_client(app_with(store_settings)) as two,
    ):
        first = await one.post("/api/quiz/answers", json=wrong, headers=headers)
        again = await two.post("/api/quiz/answers", json=wrong, headers=headers)
        said_again = await one.post(
            "/api/quiz/answers", json={**wrong, "risposta": "la b"}, headers=headers
        )
        progress = (await two.get("/api/progress", headers=auth())).json()
    assert (progress["risposte"], progress["deboli"]) == (1, [])
    assert first.status_code == again.status_code == said_again.status_code == 200
    assert again.json() == said_again.json() == first.json()
    assert first.json()["corretta"] is False
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"


async def test_a_key_sent_with_another_answer_is_a_422_naming_it(api, auth):
    body = {"capitolo": 1, "numero": 1, "risposta": "b"}
    headers = {**auth(), "Idempotency-Key": "tap-1"}
    assert (await api.post("/api/quiz/answers", json=body, headers=headers)).status_code == 200
    for other in ({**body, "risposta": "c"}, {**body, "numero": 2}):
        response = await api.post("/api/quiz/answers", json=other, headers=headers)
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"] == ["header", "Idempotency-Key"]
        assert "another answer" in error["msg"]
    # The key is the caller's: another student may send the same one.
    other_user = {**auth("bob"), "Idempotency-Key": "tap-1"}
    assert (await api.post("/api/quiz/answers", json=body, headers=other_user)).status_code == 200
    progress = (await api.get("/api/progress", headers=auth())).json()
    assert progress["risposte"] == 1


@pytest.mark.parametrize("key", ["a b", "x/y", "k" * 129, ""])
async def test_a_malformed_key_is_a_422_naming_it(api, auth, key):
    body = {"capitolo": 1, "numero": 1, "risposta": "b"}
    response = await api.post(
        "/api/quiz/answers", json=body, headers={**auth(), "Idempotency-Key": key}
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert len(response.text) < 1000
    assert (await api.get("/api/progress", headers=auth())).json()["risposte"] == 0


async def test_a_key_refused_by_the_quota_stays_free(store_settings: Settings, auth):
    settings = store_settings.model_copy(update={"quota_answers_per_minute": 1})
    body = {"capitolo": 1, "numero": 1, "risposta": "c"}
    async with asgi_client(app_with(settings, clock=quota_clock())) as api:
        graded = await api.post(
            "/api/quiz/answers", json=body, headers={**auth(), "Idempotency-Key": "k1"}
        )
        refused = [
            await api.post(
                "/api/quiz/answers", json=body, headers={**auth(), "Idempotency-Key": "k2"}
            )
            for _ in range(2)
        ]
        replayed = await api.post(
            "/api/quiz/answers", json=body, headers={**auth(), "Idempotency-Key": "k1"}
        )
    assert graded.status_code == 200
    # Not held (a 409) nor taken as graded (a 200): the retry is refused again, and counted
    # once the budget allows.
    assert [r.status_code for r in refused] == [429, 429]
    assert replayed.status_code == 200 and replayed.headers["idempotent-replayed"] == "true"


async def test_a_repeat_while_the_first_records_is_a_409_to_retry(store_settings: Settings, auth):
    """The first request (here on another instance) holds the key until its answer is
    recorded: a repeat meanwhile is told to retry, and records nothing."""
    app = app_with(store_settings)
    digest = repeats.answer_digest(1, 1, "b")
    reservations = services_of(app).guards.reservations
    await repeats.claim(reservations, "user-1", "tap-9", digest, now=time.time())
    body = {"capitolo": 1, "numero": 1, "risposta": "b"}
    async with asgi_client(app) as api:
        response = await api.post(
            "/api/quiz/answers", json=body, headers={**auth(), "Idempotency-Key": "tap-9"}
        )
        progress = (await api.get("/api/progress", headers=auth())).json()
    assert response.status_code == 409, response.text
    assert response.json()["error"] == "conflict"
    assert response.headers["retry-after"] == "1"
    assert progress["risposte"] == 0


class _BrokenAttempts:
    async def add_attempt(self, attempt: Any) -> None:
        raise StoreUnavailable()


async def test_an_answer_the_store_refused_frees_its_key(settings: Settings, auth):
    body = {"capitolo": 1, "numero": 1, "risposta": "b"}
    headers = {**auth(), "Idempotency-Key": "tap-3"}
    async with asgi_client(app_with(settings, attempts=_BrokenAttempts())) as down:
        failed = await down.post("/api/quiz/answers", json=body, headers=headers)
    async with asgi_client(app_with(settings)) as up:
        retried = await up.post("/api/quiz/answers", json=body, headers=headers)
        progress = (await up.get("/api/progress", headers=auth())).json()
    assert failed.status_code == 503
    assert retried.status_code == 200 and "idempotent-replayed" not in retried.headers
    assert progress["risposte"] == 1


def test_the_answer_key_is_in_the_openapi(openapi_schema):
    operation = openapi_schema["paths"]["/api/quiz/answers"]["post"]
    (header,) = [p for p in operation["parameters"] if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key" and not header.get("required", False)
    assert "clients should send one" in header["description"]
    assert header["schema"]["anyOf"][0]["pattern"] == "^[A-Za-z0-9._:-]+$"
    ok = operation["responses"]["200"]
    assert "Idempotent-Replayed" in ok["headers"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/AnswerResult")
    assert {"409", "422", "429"} <= set(operation["responses"])


def test_the_answer_refusals_declare_their_retry_after(openapi_schema):
    """The 409 (a repeat while the first records) and the 429 (the minute's answers spent)
    send `Retry-After`: the schema said so in prose only, so a generated client had no
    header to read."""
    responses = openapi_schema["paths"]["/api/quiz/answers"]["post"]["responses"]
    for status in ("409", "429"):
        header = responses[status]["headers"]["Retry-After"]
        assert header["schema"] == {"type": "integer", "minimum": 1}, status

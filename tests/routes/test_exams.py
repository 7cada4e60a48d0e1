"""Mock exams through the API, on both stores: create, see, submit once, list, quota."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from aircoach.settings import Settings
from tests.clock import quota_clock
from tests.helpers import app_with, asgi_client

PUBLIC = {"capitolo", "numero", "argomento", "difficolta", "testo", "risposte"}


@pytest.fixture
async def api(bank_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    settings = bank_settings.model_copy(update={"quota_turns_per_minute": 3})
    async with asgi_client(app_with(settings, clock=quota_clock())) as client:
        yield client


async def keys_of(api, auth, exam_id, user="alice") -> dict[tuple[int, int], str]:
    """The key of each exam question (read from the bank through a throwaway grading by
    another user would move their schedule: read the JSON bank instead)."""
    from aircoach.quiz.bank import load_demo_questions

    bank = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}
    exam = (await api.get(f"/api/exams/{exam_id}", headers=auth(user))).json()
    return {
        (q["capitolo"], q["numero"]): bank[(q["capitolo"], q["numero"])] for q in exam["domande"]
    }


@pytest.mark.parametrize(("size", "minutes"), [(5, 8), (10, 15), (60, 90)])
async def test_an_exam_of_another_size_gets_as_much_time_per_question(api, auth, size, minutes):
    """Every exam had 45 minutes: 5 questions too (the chat said "5 domande, 45 minuti")."""
    exam = (await api.post("/api/exams", json={"domande": size}, headers=auth("alice"))).json()
    assert len(exam["domande"]) == size and exam["durata_s"] == minutes * 60


async def test_a_default_exam_is_thirty_questions_three_per_chapter_without_the_key(api, auth):
    response = await api.post("/api/exams", headers=auth("alice"))
    assert response.status_code == 201
    exam = response.json()
    assert set(exam) == {"id", "domande", "durata_s", "scadenza", "soglia", "esito"}
    assert (exam["durata_s"], exam["soglia"], exam["esito"]) == (2700, 0.75, None)
    assert len(exam["domande"]) == 30 and all(set(q) == PUBLIC for q in exam["domande"])
    chapters = [q["capitolo"] for q in exam["domande"]]
    assert {c: chapters.count(c) for c in chapters} == {c: 3 for c in range(1, 11)}
    assert len({(q["capitolo"], q["numero"]) for q in exam["domande"]}) == 30
    seen = (await api.get(f"/api/exams/{exam['id']}", headers=auth("alice"))).json()
    assert seen["domande"] == exam["domande"] and seen["esito"] is None
    assert "corretta" not in str(seen) and "spiegazione" not in str(seen)
    # Another user's exam, or an unknown one, is not found.
    assert (await api.get(f"/api/exams/{exam['id']}", headers=auth("bob"))).status_code == 404
    assert (await api.get("/api/exams/0123abcd", headers=auth("alice"))).status_code == 404


async def test_submitting_grades_once_with_unanswered_counted_wrong(api, auth):
    body = {"capitoli": [3, 7], "domande": 6}
    exam = (await api.post("/api/exams", json=body, headers=auth("alice"))).json()
    assert sorted(q["capitolo"] for q in exam["domande"]) == [3, 3, 3, 7, 7, 7]
    keys = await keys_of(api, auth, exam["id"])
    (first, second, third, *_rest) = list(keys)
    wrong = next(x for x in "abcd" if x != keys[second])
    answers = [
        {"capitolo": first[0], "numero": first[1], "risposta": keys[first].upper()},
        {"capitolo": second[0], "numero": second[1], "risposta": f"boh, la {wrong}"},
        {"capitolo": third[0], "numero": third[1], "risposta": keys[third]},
    ]
    url = f"/api/exams/{exam['id']}/submit"
    # Not in the exam, or not an option: 422 naming it, nothing graded.
    stray = {"capitolo": 1, "numero": 1, "risposta": "a"}
    bad = await api.post(url, json={"risposte": [*answers, stray]}, headers=auth("alice"))
    assert bad.status_code == 422 and "non è nell'esame" in bad.text
    assert ["body", "risposte", 3, "numero"] in [d["loc"] for d in bad.json()["detail"]]
    not_option = [{**answers[0], "risposta": "e"}]
    bad = await api.post(url, json={"risposte": not_option}, headers=auth("alice"))
    assert bad.status_code == 422 and "valide: a, b, c, d" in bad.text
    progress = (await api.get("/api/progress", headers=auth("alice"))).json()
    assert progress["risposte"] == 0
    # Another user's exam is not theirs to submit.
    assert (await api.post(url, json={"risposte": answers}, headers=auth("bob"))).status_code == 404

    graded = await api.post(url, json={"risposte": answers}, headers=auth("alice"))
    assert graded.status_code == 200
    result = graded.json()
    assert (result["punteggio"], result["totale"], result["soglia"]) == (2, 6, 0.75)
    assert (result["superato"], result["in_ritardo"]) == (False, False)
    assert sum(c["punteggio"] for c in result["capitoli"]) == 2
    assert [c["totale"] for c in result["capitoli"]] == [3, 3]
    by_key = {(e["capitolo"], e["numero"]): e for e in result["esiti"]}
    assert by_key[second]["risposta"] == wrong and by_key[second]["corretta"] is False
    assert by_key[second]["risposta_corretta"] == keys[second]
    assert by_key[second]["spiegazione"] and by_key[second]["riferimento"]
    unanswered = [e for e in result["esiti"] if e["risposta"] is None]
    assert len(unanswered) == 3 and not any(e["corretta"] for e in unanswered)
    # Each answer is an attempt and is due for review when wrong.
    progress = (await api.get("/api/progress", headers=auth("alice"))).json()
    assert (progress["risposte"], progress["corrette"]) == (3, 2)
    review = (await api.get("/api/quiz/review", headers=auth("alice"))).json()["items"]
    assert (review[0]["capitolo"], review[0]["numero"]) == second

    again = await api.post(url, json={"risposte": answers}, headers=auth("alice"))
    assert again.status_code == 409 and "Retry-After" not in again.headers  # graded
    shown = (await api.get(f"/api/exams/{exam['id']}", headers=auth("alice"))).json()
    assert shown["esito"] == result
    listed = (await api.get("/api/exams", headers=auth("alice"))).json()["items"]
    assert [(e["id"], e["punteggio"], e["totale"], e["superato"]) for e in listed] == [
        (exam["id"], 2, 6, False)
    ]
    empty = {"items": [], "next_cursor": None}
    assert (await api.get("/api/exams", headers=auth("bob"))).json() == empty


@pytest.mark.parametrize(
    "body",
    [{"domande": 4}, {"domande": 61}, {"capitoli": [0]}, {"capitoli": [11]}, {"extra": 1}],
)
async def test_bad_exam_requests_are_422(api, auth, body):
    assert (await api.post("/api/exams", json=body, headers=auth())).status_code == 422


async def test_creating_exams_counts_against_the_quota(api, auth):
    for _ in range(3):
        created = await api.post("/api/exams", json={"domande": 5}, headers=auth("carol"))
        assert created.status_code == 201
    refused = await api.post("/api/exams", json={"domande": 5}, headers=auth("carol"))
    assert refused.status_code == 429 and refused.headers["Retry-After"]
    # Said of an exam: "il limite di domande al minuto" alone left the student to guess.
    assert refused.json()["error"] == "quota_exceeded"
    assert refused.json()["message"] == (
        "Hai raggiunto il limite di domande al minuto (3): una simulazione d'esame conta come "
        f"una domanda. Riprova tra {refused.headers['Retry-After']} s."
    )


async def test_a_repeated_idempotency_key_gets_the_first_exam_and_counts_no_turn(api, auth):
    """A retry after a timeout created a second exam and took a second turn of the quota (the
    header was ignored)."""
    body, key = {"domande": 5, "capitoli": [2, 1]}, {"Idempotency-Key": "exam-1"}
    first = await api.post("/api/exams", json=body, headers={**auth("dora"), **key})
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    same = {"domande": 5, "capitoli": [1, 2]}  # the same chapters, in another order
    for _ in range(3):  # the quota is 3 a minute: repeats take none of it
        again = await api.post("/api/exams", json=same, headers={**auth("dora"), **key})
        assert again.status_code == 201, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
    listed = (await api.get("/api/exams", headers=auth("dora"))).json()["items"]
    assert [e["id"] for e in listed] == [first.json()["id"]]
    # The same key for another exam is a 422 naming it, and creates nothing.
    other = await api.post("/api/exams", json={"domande": 6}, headers={**auth("dora"), **key})
    assert other.status_code == 422, other.text
    assert other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    # Another user's key of the same spelling is another request.
    bob = await api.post("/api/exams", json=body, headers={**auth("bob"), **key})
    assert bob.status_code == 201 and bob.json()["id"] != first.json()["id"]


async def test_a_key_the_quota_refused_is_free_for_the_retry(bank_settings, auth):
    settings = bank_settings.model_copy(update={"quota_turns_per_minute": 1})
    clock = quota_clock()
    async with asgi_client(app_with(settings, clock=clock)) as api:
        assert (await api.post("/api/exams", json={}, headers=auth())).status_code == 201
        key = {**auth(), "Idempotency-Key": "exam-2"}
        for _ in range(2):  # the key held by the first is let go: the quota, not 409 busy
            refused = await api.post("/api/exams", json={"domande": 5}, headers=key)
            assert refused.status_code == 429, refused.text
        clock.advance(61)
        retried = await api.post("/api/exams", json={"domande": 5}, headers=key)
        assert retried.status_code == 201 and "Idempotent-Replayed" not in retried.headers
        assert len(retried.json()["domande"]) == 5


async def test_two_answers_to_one_exam_question_are_422_naming_the_second(api, auth):
    exam = (await api.post("/api/exams", json={"domande": 5}, headers=auth("alice"))).json()
    first = exam["domande"][0]
    twice = [
        {"capitolo": first["capitolo"], "numero": first["numero"], "risposta": "a"},
        {"capitolo": first["capitolo"], "numero": first["numero"], "risposta": "b"},
    ]
    url = f"/api/exams/{exam['id']}/submit"
    bad = await api.post(url, json={"risposte": twice}, headers=auth("alice"))
    assert bad.status_code == 422 and "ha già una risposta" in bad.text
    assert [d["loc"] for d in bad.json()["detail"]] == [["body", "risposte", 1, "numero"]]
    assert (await api.get("/api/progress", headers=auth("alice"))).json()["risposte"] == 0
    assert (await api.post(url, json={"risposte": twice[:1]}, headers=auth("alice"))).is_success


async def test_a_submission_while_another_is_graded_is_409_saying_when_to_retry(
    store_settings, auth
):
    """The first submission has started grading and has no result yet (it may be running, or
    may have stopped half-way): a second one is 409 with the seconds after which a submission
    grades the exam."""
    from aircoach.quiz import review
    from tests.helpers import services_of

    app = app_with(store_settings, clock=quota_clock())
    async with asgi_client(app) as api:
        exam = (await api.post("/api/exams", headers=auth("alice"))).json()
        exams = await services_of(app).exam_service()
        now = exams.quiz.now()
        assert await exams.exams.claim("alice", exam["id"], review.iso(now), previous=None)
        url = f"/api/exams/{exam['id']}/submit"
        refused = await api.post(url, json={"risposte": []}, headers=auth("alice"))
    assert refused.status_code == 409 and refused.json()["error"] == "conflict"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "ancora in correzione" in refused.json()["message"]


async def test_a_refused_submission_tells_the_student_why_in_italian(api, auth):
    """The phone shows `message`: "already handed in" and "no such exam" in words a student
    understands (it was "La risorsa non è in uno stato che consente questa operazione.")."""
    exam = (await api.post("/api/exams", json={"domande": 5}, headers=auth("alice"))).json()
    url = f"/api/exams/{exam['id']}/submit"
    assert (await api.post(url, json={"risposte": []}, headers=auth("alice"))).is_success
    again = await api.post(url, json={"risposte": []}, headers=auth("alice"))
    assert again.status_code == 409 and again.json()["error"] == "conflict"
    assert again.json()["message"] == "Questa simulazione d'esame è già stata consegnata."
    english = await api.post(
        url, json={"risposte": []}, headers={**auth("alice"), "Accept-Language": "en"}
    )
    assert english.json()["message"] == "This mock exam was handed in already."
    for response in (
        await api.post(url, json={"risposte": []}, headers=auth("bob")),
        await api.get(f"/api/exams/{exam['id']}", headers=auth("bob")),
    ):
        assert response.status_code == 404 and response.json()["error"] == "not_found"
        assert response.json()["message"] == "Nessuna tua simulazione d'esame con questo id."


async def test_the_exam_list_pages_newest_first_with_a_cursor(api, auth):
    """A student with more exams than a page sees them all, page by page (the list stopped at
    the newest 100, with no way to the older ones)."""
    created = [
        (await api.post("/api/exams", json={"domande": 5}, headers=auth("alice"))).json()["id"]
        for _ in range(3)
    ]
    whole = (await api.get("/api/exams", headers=auth("alice"))).json()
    assert [e["id"] for e in whole["items"]] == created[::-1] and whole["next_cursor"] is None
    first = (await api.get("/api/exams?limit=2", headers=auth("alice"))).json()
    assert [e["id"] for e in first["items"]] == created[:0:-1] and first["next_cursor"]
    url = f"/api/exams?limit=2&cursor={first['next_cursor']}"
    second = (await api.get(url, headers=auth("alice"))).json()
    assert [e["id"] for e in second["items"]] == created[:1] and second["next_cursor"] is None
    # A cursor only bounds the page: another user's lists none of alice's exams.
    url = f"/api/exams?cursor={first['next_cursor']}"
    assert (await api.get(url, headers=auth("bob"))).json()["items"] == []
    # Bounded and checked: a 422 naming the parameter.
    for query, field in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("cursor=xyz", "cursor"),
        ("cursor=" + created[0], "cursor"),
        ("cursor=" + "1" * 20 + "." + "a" * 65, "cursor"),
    ]:
        bad = await api.get(f"/api/exams?{query}", headers=auth("bob"))
        assert bad.status_code == 422, query
        assert [d["loc"] for d in bad.json()["detail"]] == [["query", field]], query


def test_the_exam_list_is_documented_with_its_paging(openapi_schema):
    schema = openapi_schema
    operation = schema["paths"]["/api/exams"]["get"]
    params = {p["name"]: p["schema"] for p in operation["parameters"]}
    assert (params["limit"]["minimum"], params["limit"]["maximum"]) == (1, 100)
    assert params["cursor"]["anyOf"][0]["pattern"] == r"^[0-9]{20}\.[0-9a-f]{1,64}$"
    listing = schema["components"]["schemas"]["ExamList"]["properties"]
    assert set(listing) == {"items", "next_cursor"}


async def test_non_lo_so_in_an_exam_is_graded_wrong_as_in_the_quiz(api, auth):
    """A student who does not know says so, as to a single question: graded wrong (`-`), an
    attempt, due for review. It was a 422 (the exam read only letters and option texts)."""
    exam = (await api.post("/api/exams", json={"domande": 5}, headers=auth("alice"))).json()
    first, second = ((q["capitolo"], q["numero"]) for q in exam["domande"][:2])
    answers = [
        {"capitolo": first[0], "numero": first[1], "risposta": "Non lo so"},
        {"capitolo": second[0], "numero": second[1], "risposta": "salto"},
    ]
    url = f"/api/exams/{exam['id']}/submit"
    graded = await api.post(url, json={"risposte": answers}, headers=auth("alice"))
    assert graded.status_code == 200, graded.text
    by_key = {(e["capitolo"], e["numero"]): e for e in graded.json()["esiti"]}
    assert [(by_key[k]["risposta"], by_key[k]["corretta"]) for k in (first, second)] == [
        ("-", False),
        ("-", False),
    ]
    assert graded.json()["punteggio"] == 0
    progress = (await api.get("/api/progress", headers=auth("alice"))).json()
    assert (progress["risposte"], progress["corrette"]) == (2, 0)
    review = (await api.get("/api/quiz/review", headers=auth("alice"))).json()["items"]
    assert {(q["capitolo"], q["numero"]) for q in review[:2]} == {first, second}


async def test_an_exam_answer_that_is_no_answer_is_422_saying_what_to_write(api, auth):
    """Garbage is a 422 naming `risposta`, in Italian, saying what an answer looks like (it
    said "not an option"), without echoing the whole text; nothing is graded."""
    exam = (await api.post("/api/exams", json={"domande": 5}, headers=auth("alice"))).json()
    first = exam["domande"][0]
    garbage = "qwerty " * 60
    bad = await api.post(
        f"/api/exams/{exam['id']}/submit",
        json={"risposte": [{**{k: first[k] for k in ("capitolo", "numero")}, "risposta": garbage}]},
        headers=auth("alice"),
    )
    assert bad.status_code == 422
    (detail,) = bad.json()["detail"]
    assert detail["loc"] == ["body", "risposte", 0, "risposta"]
    assert "non riconosciuta" in detail["msg"] and "(a, b, c, d)" in detail["msg"]
    assert "non lo so" in detail["msg"] and len(bad.text) < 1000
    assert (await api.get("/api/progress", headers=auth("alice"))).json()["risposte"] == 0


async def test_an_exam_larger_than_its_chapters_is_422_naming_domande_and_costs_no_turn(api, auth):
    """Chapter 3 holds 34 questions: 60 of it came back as 34, silently. Now a 422 naming
    `domande` says how many the chapters hold; nothing is drawn and no turn is counted."""
    body = {"capitoli": [3], "domande": 60}
    refused = await api.post("/api/exams", json=body, headers=auth("alice"))
    assert refused.status_code == 422
    (detail,) = refused.json()["detail"]
    assert detail["loc"] == ["body", "domande"] and "34" in detail["msg"]
    for _ in range(3):  # the quota is 3 a minute: the refused request took none of it
        body = {"capitoli": [3], "domande": 34}
        created = await api.post("/api/exams", json=body, headers=auth("alice"))
        assert created.status_code == 201 and len(created.json()["domande"]) == 34

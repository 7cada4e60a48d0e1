"""Messages students can read: every JSON error body's `message` and every `error` event's
`message` in Italian by default, in English with `Accept-Language: en`; codes unchanged;
`WWW-Authenticate` ASCII English."""

from __future__ import annotations

import sqlite3
import string
from contextlib import closing

import pytest

from aircoach import errors
from aircoach.messages import CATALOGUE, language, text
from tests.helpers import chat
from tests.scripted_model import text as reply
from tests.sse import parse_sse

EN = {"Accept-Language": "en"}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, "it"),
        ("", "it"),
        ("en", "en"),
        ("en-GB", "en"),
        ("EN-us,en;q=0.9", "en"),
        ("it-IT,en;q=0.5", "it"),
        ("en;q=0.4, it;q=0.8", "it"),
        ("de, en;q=0.7", "en"),
        ("fr, de", "it"),
        ("*", "it"),
        ("en;q=0", "it"),
        ("en;q=abc", "it"),
    ],
)
def test_the_language_comes_from_accept_language(header, expected):
    assert language(header) == expected


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_message_has_both_languages_with_the_same_parameters():
    for key, entry in CATALOGUE.items():
        assert entry.it and entry.en, key
        assert _fields(entry.it) == _fields(entry.en), key


def test_every_error_class_has_its_message_in_the_catalogue():
    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    for cls in subclasses(errors.AppError):
        assert cls.key in CATALOGUE, cls.__name__
        assert cls.code == "internal_error" or cls.code in CATALOGUE or cls.key in CATALOGUE


def test_a_message_is_filled_in_either_language():
    assert text("permission_needed", "it", permission="admin:docs") == (
        "Questa operazione richiede il permesso 'admin:docs'."
    )
    assert text("permission_needed", "en", permission="admin:docs") == (
        "this operation needs the 'admin:docs' permission"
    )


async def test_a_json_error_is_italian_by_default_and_english_on_request(client):
    italian = await client.post("/api/stream_query", json={"query": "ciao"})
    english = await client.post("/api/stream_query", json={"query": "ciao"}, headers=EN)
    for response in (italian, english):
        assert response.status_code == 401 and response.json()["error"] == "missing_token"
        assert response.headers["www-authenticate"] == "Bearer"
    assert italian.json()["message"] == (
        "Serve un token di accesso (intestazione Authorization: Bearer)."
    )
    assert english.json()["message"] == "An Authorization: Bearer token is required."


async def test_an_invalid_token_keeps_an_ascii_english_challenge(client):
    headers = {"Authorization": "Bearer not.a.token"}
    response = await client.get("/api/history", headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": "invalid_token", "message": "Token malformato."}
    challenge = response.headers["www-authenticate"]
    assert challenge == 'Bearer error="invalid_token", error_description="malformed token"'
    english = await client.get("/api/history", headers={**headers, **EN})
    assert english.json()["message"] == "malformed token"


async def test_a_422_names_the_field_in_a_sentence(client, auth):
    response = await client.post("/api/stream_query", json={"query": 5}, headers=auth())
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_request"
    assert body["message"] == "La richiesta non è valida: controlla il campo 'query'."
    assert body["detail"][0]["loc"] == ["body", "query"]
    json_type = {"Content-Type": "application/json"}
    english = await client.post(
        "/api/stream_query", content=b"{not json", headers={**auth(), **EN, **json_type}
    )
    assert english.json()["message"] == "The request body is not valid JSON."
    limit = await client.get("/api/history", params={"limit": 0}, headers={**auth(), **EN})
    assert limit.json()["message"] == "The request is not valid: see the field 'limit'."


async def test_a_413_is_italian_by_default(client, auth):
    body = b'{"query": "' + b"x" * 70_000 + b'"}'
    headers = {**auth(), "content-type": "application/json"}
    response = await client.post("/api/stream_query", content=body, headers=headers)
    assert response.status_code == 413
    assert response.json() == {
        "error": "body_too_large",
        "message": "Il corpo della richiesta supera 65536 byte.",
    }
    english = await client.post("/api/stream_query", content=body, headers={**headers, **EN})
    assert english.json()["message"] == "The request body is larger than 65536 bytes."


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, "Il modello linguistico non è disponibile in questo momento; riprova tra poco."),
        (EN, "The language model is unavailable right now; please retry in a moment."),
    ],
)
async def test_an_error_event_speaks_the_request_language(client, auth, script, headers, expected):
    script([RuntimeError("boom")])
    response = await client.post(
        "/api/stream_query", json={"query": "ciao"}, headers={**auth(), **headers}
    )
    events = parse_sse(response.text)
    (error,) = [e for e in events if e["type"] == "error"]
    assert error == {"type": "error", "code": "model_unavailable", "message": expected}


async def test_persist_failed_is_italian_too(settings, client, auth, script):
    script([reply("prima"), reply("persa")])
    await chat(client, auth(), "uno")
    with closing(sqlite3.connect(settings.sqlite_file)) as db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON chats BEGIN SELECT RAISE(ABORT, 'x'); END"
        )
        db.commit()
    events = await chat(client, auth(), "due")
    (error,) = [e for e in events if e["type"] == "error"]
    assert error == {
        "type": "error",
        "code": "persist_failed",
        "message": "Non è stato possibile salvare la risposta nella tua cronologia.",
    }

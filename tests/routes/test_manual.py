"""GET /api/manual/sections/{riferimento}: the section a citation points to, from the manual
the server holds; a user token; 404 for a section the manual lacks, 422 for a malformed id."""

from __future__ import annotations

import pytest

from aircoach.knowledge.manual import parse_manual
from tests.helpers import asgi_client, shipped_docs


async def test_a_cited_section_is_served_whole_with_its_title(app, auth):
    expected = next(s for s in parse_manual(shipped_docs()) if s.id == "3.2")
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/sections/3.2", headers=auth())
    assert response.status_code == 200, response.text
    assert response.json() == {
        "riferimento": "3.2",
        "titolo": "Altimetro e regolazioni QNH, QFE, 1013",
        "testo": expected.text,
        "capitolo": 3,
        "materia": expected.materia,
    }
    assert response.json()["testo"].startswith("L'altimetro barometrico")


async def test_an_unknown_section_is_404_naming_it(app, auth):
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/sections/3.99", headers=auth())
    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "not_found" and body["riferimento"] == "3.99"


@pytest.mark.parametrize("reference", ["quiz%203.12", "3", "3.2.1", "abc", "123.4", "3.2x"])
async def test_a_malformed_reference_is_422_without_echoing_much(app, auth, reference):
    async with asgi_client(app) as client:
        response = await client.get(f"/api/manual/sections/{reference}", headers=auth())
    assert response.status_code == 422, (reference, response.text)


async def test_a_long_reference_is_422_and_not_echoed_whole(app, auth):
    async with asgi_client(app) as client:
        response = await client.get(f"/api/manual/sections/{'9' * 5000}", headers=auth())
    assert response.status_code == 422
    assert "9" * 300 not in response.text


async def test_the_section_needs_a_user_token(app):
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/sections/3.2")
    assert response.status_code == 401

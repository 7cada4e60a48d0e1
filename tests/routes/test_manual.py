"""GET /api/manual/sections/{riferimento}: the section a citation points to, from the manual
the server holds; a user token; 404 for a section the manual lacks, 422 for a malformed id."""

from __future__ import annotations

import pytest

from aircoach.knowledge.library import course_bank
from aircoach.knowledge.manual import parse_manual
from tests.helpers import app_with, asgi_client, shipped_docs


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


async def test_the_sections_that_teach_a_quiz_question_best_first(app, auth):
    """What the page's "Rileggi la sezione del manuale" asks after a graded question: its
    text and explanation find the section the bank names for it (370 of the 373 questions)."""
    questions, _ = course_bank()
    question = next(q for q in questions if (q["capitolo"], q["numero"]) == (3, 32))
    testo = f"{question['testo']} {question['spiegazione']}"
    async with asgi_client(app) as client:
        response = await client.get(
            "/api/manual/sections",
            params={"capitolo": 3, "testo": testo, "limit": 1},
            headers=auth(),
        )
        wide = await client.get(
            "/api/manual/sections", params={"testo": "stallo angolo d'attacco"}, headers=auth()
        )
        nothing = await client.get(
            "/api/manual/sections", params={"testo": "ricetta della carbonara"}, headers=auth()
        )
    assert response.status_code == 200, response.text
    (found,) = response.json()["items"]
    assert found["riferimento"] == question["riferimento"] and found["capitolo"] == 3
    assert set(found) == {"riferimento", "titolo", "testo", "capitolo", "materia"}
    assert [s["riferimento"] for s in wide.json()["items"]][:1] == ["1.4"]
    assert 1 <= len(wide.json()["items"]) <= 3  # the default limit
    assert nothing.json() == {"items": []}


@pytest.mark.parametrize(
    "params",
    [
        {"testo": "ab"},
        {"testo": "   "},
        {"testo": "x" * 601},
        {"testo": "stallo", "capitolo": 0},
        {"limit": 9},
    ],
)
async def test_a_bad_section_search_is_422(app, auth, params):
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/sections", params=params, headers=auth())
    assert response.status_code == 422
    assert "x" * 300 not in response.text


async def test_a_chapter_search_finds_the_chapter_s_sections_ranked_low_overall(app, auth):
    """`motore` ranks chapter 4 first; chapter 3's § 3.10 (the vacuum pump the engine drives)
    is still a match of chapter 3, wherever it ranks among all the chapters."""
    async with asgi_client(app) as client:
        response = await client.get(
            "/api/manual/sections", params={"testo": "motore", "capitolo": 3}, headers=auth()
        )
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert items and {s["capitolo"] for s in items} == {3}
    assert "3.10" in [s["riferimento"] for s in items]


@pytest.mark.parametrize("reference", ["%2F", "%2f", "3.2%2F"])
async def test_an_encoded_slash_is_an_unknown_section_not_a_redirect(app, auth, reference):
    """`%2F` decodes to `/`: the path then ends with a slash and matched no route. It was a
    307 to `/api/manual/sections` (the search, a 422 without `testo`), or for `3.2%2F` to the
    section `3.2` itself."""
    async with asgi_client(app) as client:
        response = await client.get(f"/api/manual/sections/{reference}", headers=auth())
    assert response.status_code == 404, response.text
    assert "location" not in response.headers
    assert response.json() == {"error": "not_found", "message": "Non trovato."}


@pytest.mark.parametrize("reference", ["01.1", "1.01", "01.01", "03.10"])
async def test_a_reference_with_a_leading_zero_opens_the_same_section(app, auth, reference):
    """A client that pads the chapter as the manual's files do (`01_aerodinamica.md`) asks
    for `01.1`: it was a 404 although the manual has § 1.1. The answer keeps the id answers
    cite."""
    canonical = ".".join(str(int(number)) for number in reference.split("."))
    async with asgi_client(app) as client:
        padded = await client.get(f"/api/manual/sections/{reference}", headers=auth())
        cited = await client.get(f"/api/manual/sections/{canonical}", headers=auth())
    assert padded.status_code == 200, padded.text
    assert padded.json() == cited.json()
    assert padded.json()["riferimento"] == canonical


async def test_a_padded_reference_the_manual_lacks_is_404_naming_it(app, auth):
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/sections/03.99", headers=auth())
    assert response.status_code == 404
    assert response.json()["riferimento"] == "03.99"


async def test_the_chapters_list_every_section_in_order_with_the_manual_version(app, auth):
    """A table of contents: every chapter of the manual, its title, and its sections' ids and
    titles in the manual's order, from the same manual as the sections."""
    from aircoach.knowledge.manual import manual_version

    docs = shipped_docs()
    sections = parse_manual(docs)
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/chapters", headers=auth())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["manual_version"] == manual_version(docs)
    chapters = body["items"]
    assert [c["capitolo"] for c in chapters] == list(range(1, 11))
    assert chapters[2]["materia"] == next(s.materia for s in sections if s.capitolo == 3)
    assert set(chapters[0]) == {"capitolo", "materia", "sezioni"}
    assert chapters[0]["sezioni"][0] == {"riferimento": "1.1", "titolo": sections[0].title}
    listed = [(s["riferimento"], s["titolo"]) for c in chapters for s in c["sezioni"]]
    assert listed == [(s.id, s.title) for s in sections]
    third = [s["riferimento"] for s in chapters[2]["sezioni"]]
    assert third.index("3.9") + 1 == third.index("3.10")  # the manual's order, not the text's


async def test_the_chapters_of_docs_without_a_manual_are_empty(settings, tmp_path, auth):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "00_a.md").write_text("# Uno\nSolo il prompt.")
    app = app_with(settings.model_copy(update={"prompt_docs_dir": docs}))
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/chapters", headers=auth())
    assert response.status_code == 200, response.text
    assert response.json() == {"items": [], "manual_version": None}


async def test_the_chapters_need_a_user_token(app):
    async with asgi_client(app) as client:
        response = await client.get("/api/manual/chapters")
    assert response.status_code == 401

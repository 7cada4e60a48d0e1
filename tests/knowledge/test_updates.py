"""The course index follows the docs: a section added to the manual is found after
`update_docs`, from the local folder and from S3 (moto), and the chat's prompt version stays."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aircoach.knowledge.library import CourseKnowledge
from tests.helpers import app_with, asgi_client, copy_prompt_docs, services_of, shipped_docs
from tests.s3 import s3_settings

NEW_SECTION = (
    "\n\n## 3.14 Il girobussola a induzione\n\nIl girobussola a induzione (flux gate) misura il "
    "campo magnetico terrestre con una sonda nell'ala e corregge da solo la deriva del "
    "giroscopio direzionale, senza che il pilota debba riallinearlo in volo.\n"
)
QUESTION = "Come funziona il girobussola a induzione?"


async def _ask(client, headers) -> dict:
    response = await client.post(
        "/api/stream_query", json={"query": QUESTION, "stream": False}, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _reload(client, auth) -> dict:
    response = await client.post(
        "/api/update_docs", json={}, headers=auth("admin-1", permissions=["admin:docs"])
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _new_section_is_found_after_update_docs(client, auth, add_section) -> None:
    before = await _reload(client, auth)
    first = await _ask(client, auth())
    assert "§ 3.14" not in first["answer"] and "Non ho trovato" in first["answer"]
    add_section()
    after = await _reload(client, auth)
    assert after["prompt_version"] == before["prompt_version"]  # the manual is not the prompt
    assert after["manual_version"] != before["manual_version"]
    second = await _ask(client, auth())
    assert second["answer"].startswith("[modello offline] Dal manuale del corso")
    assert "§ 3.14 (Strumenti di volo)" in second["answer"] and "flux gate" in second["answer"]
    assert second["tool"]["tool_name"] == "kb_search"
    assert second["tool"]["data"]["items"][0]["riferimento"] == "3.14"
    cited = await client.get("/api/manual/sections/3.14", headers=auth())
    assert cited.status_code == 200 and "flux gate" in cited.json()["testo"]


async def test_a_new_section_is_found_after_update_docs_local(settings, auth, tmp_path: Path):
    docs = copy_prompt_docs(tmp_path / "docs")
    local = settings.model_copy(update={"prompt_docs_dir": docs})
    chapter = docs / "manual" / "03_strumenti.md"

    def add_section() -> None:
        chapter.write_text(chapter.read_text("utf-8") + NEW_SECTION, "utf-8")

    async with asgi_client(app_with(local)) as client:
        await _new_section_is_found_after_update_docs(client, auth, add_section)


async def test_a_new_section_is_found_after_update_docs_s3(s3, data_dir, auth):
    key = "manual/03_strumenti.md"

    def add_section() -> None:
        s3.put(key, s3.get(key) + NEW_SECTION)

    async with asgi_client(app_with(s3_settings(data_dir))) as client:
        await _new_section_is_found_after_update_docs(client, auth, add_section)


async def test_the_index_is_built_once_per_manual_version_and_the_two_latest_kept():
    knowledge = CourseKnowledge()
    docs = shipped_docs()
    built = await asyncio.gather(*(knowledge.index_for(docs) for _ in range(20)))
    assert all(index is built[0] for index in built) and knowledge.builds == 1
    assert await knowledge.index_for(dict(docs)) is built[0]  # equal docs, same version
    edited = {**docs, "manual/03_strumenti.md": docs["manual/03_strumenti.md"] + NEW_SECTION}
    newer = await knowledge.index_for(edited)
    assert newer is not built[0] and newer.version != built[0].version
    assert await knowledge.index_for(edited) is newer and knowledge.builds == 2
    # While an update reaches the instances, requests on the old docs and on the new ones
    # alternate: each keeps its index (one kept, each of them rebuilt the other's).
    prompt_only = {**docs, "10_stile.md": "Stile nuovo."}
    for _ in range(3):
        assert await knowledge.index_for(prompt_only) is built[0]  # the first manual
        assert await knowledge.index_for(edited) is newer
    assert knowledge.builds == 2
    # A third version releases the oldest: memory stays two indexes.
    third = {**docs, "manual/03_strumenti.md": docs["manual/03_strumenti.md"] + "\n\nAltro."}
    await knowledge.index_for(third)
    assert await knowledge.index_for(edited) is newer
    assert await knowledge.index_for(docs) is not built[0] and knowledge.builds == 4


async def test_services_share_one_course_index_between_requests(settings, auth):
    app = app_with(settings)
    async with asgi_client(app) as client:
        for _ in range(3):
            await _ask(client, auth())
    knowledge = services_of(app).knowledge
    built = knowledge.builds
    assert built >= 1
    async with asgi_client(app) as client:
        await _ask(client, auth())
    assert knowledge.builds == built  # the same index, not built again


async def test_a_manual_citing_one_id_for_two_sections_is_refused_and_the_old_one_served(
    settings, auth, tmp_path: Path
):
    """`## 3.10` added again (the id of the vacuum system): an answer citing § 3.10 and the
    section a client opens for it would disagree. update_docs says which id, and the manual
    served stays the last good one."""
    docs = copy_prompt_docs(tmp_path / "docs")
    local = settings.model_copy(update={"prompt_docs_dir": docs})
    chapter = docs / "manual" / "03_strumenti.md"
    async with asgi_client(app_with(local)) as client:
        before = await _reload(client, auth)
        chapter.write_text(
            chapter.read_text("utf-8") + NEW_SECTION.replace("3.14", "3.10"), "utf-8"
        )
        refused = await client.post(
            "/api/update_docs", json={}, headers=auth("admin-1", permissions=["admin:docs"])
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == "invalid_docs"
        assert "'3.10'" in refused.json()["message"]
        health = (await client.get("/api/health")).json()["prompt"]
        assert health["version"] == before["prompt_version"]
        served = await client.get("/api/manual/sections/3.10", headers=auth())
        assert served.json()["titolo"] == "L'impianto a depressione"

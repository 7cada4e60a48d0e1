"""Which doc keys belong to what: the chat's top-level docs, and areas in sub-folders (tasks,
a course manual) that never reach the system prompt nor `prompt_version`."""

from __future__ import annotations

from pathlib import Path

from aircoach.prompts.keys import (
    CHAT_AREA,
    doc_area,
    docs_under,
    docs_version,
    folders_in,
    is_chat_doc,
    is_system_prompt_doc,
)
from aircoach.prompts.sources import LocalDocSource
from aircoach.prompts.store import PromptStore, build_prompt
from tests.prompts.test_store import MemorySource

DOCS = {
    "00_ruolo.md": "Sei un istruttore.",
    "tools.json": '{"tools": []}',
    "tasks/email_triage/prompt.md": "Classifica l'e-mail.",
    "tasks/email_triage/schema.json": "{}",
    "tasks/other/prompt.md": "Altro.",
    "manual/01_meteo.md": "Il fronte caldo...",
}


def test_the_rule_names_each_keys_area():
    assert doc_area("00_ruolo.md") == doc_area("tools.json") == CHAT_AREA
    assert doc_area("tasks/email_triage/prompt.md") == "tasks"
    assert doc_area("manual/01_meteo.md") == "manual"
    assert [k for k in DOCS if is_system_prompt_doc(k)] == ["00_ruolo.md"]
    assert [k for k in DOCS if is_chat_doc(k)] == ["00_ruolo.md", "tools.json"]
    assert folders_in(DOCS, "tasks") == ["email_triage", "other"]
    assert folders_in(DOCS, "manual") == []  # a loose doc belongs to the area, not a folder
    assert docs_under(DOCS, "tasks/email_triage") == {
        "prompt.md": "Classifica l'e-mail.",
        "schema.json": "{}",
    }
    assert docs_under(DOCS, "manual") == {"01_meteo.md": "Il fronte caldo..."}


def test_versions_depend_on_content_not_on_order():
    reordered = dict(reversed(list(DOCS.items())))
    assert docs_version(DOCS) == docs_version(reordered)
    assert docs_version(DOCS) != docs_version({**DOCS, "tools.json": "{}"})


def test_sub_folders_change_neither_the_system_prompt_nor_its_version():
    text, version = build_prompt(DOCS)
    assert text == "Sei un istruttore."
    edited = {**DOCS, "tasks/email_triage/prompt.md": "Nuove regole.", "manual/02.md": "Nuovo."}
    assert build_prompt(edited) == (text, version)
    assert build_prompt({**DOCS, "tools.json": '{"tools": [1]}'})[1] != version
    assert build_prompt({**DOCS, "00_ruolo.md": "Sei un pilota."})[1] != version


async def test_local_source_reads_sub_folders_and_skips_hidden_files(tmp_path: Path):
    for key, text in DOCS.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text(text)
    (tmp_path / ".DS_Store").write_text("x")
    (tmp_path / "tasks" / ".git").mkdir()
    (tmp_path / "tasks" / ".git" / "HEAD").write_text("x")
    source = LocalDocSource(tmp_path)
    listed = await source.list_docs()
    assert [d.key for d in listed] == sorted(DOCS)
    nested = next(d for d in listed if d.key == "tasks/email_triage/prompt.md")
    assert await source.read_doc(nested) == ("Classifica l'e-mail.", nested)


async def test_a_local_doc_read_gives_the_text_its_listed_etag_names(tmp_path: Path):
    """The listing hashes every file; a read of the same etag gives those bytes (the file
    is not opened again, so an edit in between cannot pair new text with the old etag), and
    a read of another etag (a listing older than the last) reads the file."""
    doc = tmp_path / "00_ruolo.md"
    doc.write_bytes(b"Sei un istruttore.\r\nRispondi in italiano.\rFine.")
    source = LocalDocSource(tmp_path)
    [first] = await source.list_docs()
    doc.write_text("Cambiato dopo l'elenco.")
    # As Path.read_text gives it: universal newlines.
    assert await source.read_doc(first) == (
        "Sei un istruttore.\nRispondi in italiano.\nFine.",
        first,
    )
    [second] = await source.list_docs()
    assert second.etag != first.etag
    assert await source.read_doc(second) == ("Cambiato dopo l'elenco.", second)
    doc.write_text("Di nuovo.")
    assert await source.read_doc(first) == ("Di nuovo.", first)  # not the last listing's


async def test_a_task_edit_is_served_with_the_prompt_version_unchanged(clock):
    source = MemorySource(DOCS)
    store = PromptStore(source, ttl_s=60, clock=clock)
    first = await store.current()
    source.docs["tasks/email_triage/prompt.md"] = "Nuove regole."
    clock.advance(60)
    second = await store.current()
    assert second.contents["tasks/email_triage/prompt.md"] == "Nuove regole."
    assert second.version == first.version and second.text == first.text

"""The README is a short front door and docs/ holds the rest: every setting documented with its
default, every page the README links to present. (`make lint` builds the site with --strict,
which checks the links between the pages and that every page is in the nav.)"""

from __future__ import annotations

import re

from aircoach.settings import ROOT, Settings

README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _code_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


def test_configuration_page_documents_every_setting():
    page = (DOCS / "configuration.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    variables = [name.upper() for name in Settings.model_fields if name != "tool_env"]
    assert [name for name in variables if not any(f"`{name}`" in row for row in rows)] == []
    assert "`TOOL_*`" in page  # the variables tools.json may name


def test_readme_starts_with_the_two_commands():
    readme = README.read_text()
    commands = [line.split()[:2] for block in _code_blocks(readme) for line in block.splitlines()]
    assert ["make", "run"] in commands and ["make", "test"] in commands
    assert len(readme.splitlines()) <= 250, "the README is the front door: move details to docs/"


def test_try_it_uses_the_port_it_was_started_on():
    texts = {path.name: path.read_text() for path in [README, *DOCS.glob("*.md")]}
    assert [name for name, text in texts.items() if re.search(r"127\.0\.0\.1:8000/", text)] == []
    assert "PORT=${PORT:-8000}" in texts["README.md"]


def test_readme_links_to_pages_that_exist():
    linked = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert linked, "the README leads to docs/"
    assert [path for path in linked if not (ROOT / path).is_file()] == []


async def test_readme_shows_the_answer_its_theory_question_gets(client, auth):
    """The README's "Try it" quotes the offline model's answer to its theory question: the
    quoted start and end (around its `...`) are the answer's, sources included."""
    readme = README.read_text()
    # The query as the README's shell command sends it ('"'"' is a quote inside '...').
    query = re.search(r'"query":"(Come si regola[^"]*)"', readme.replace("'\"'\"'", "'"))
    sample = next(block for block in _code_blocks(readme) if block.startswith("[modello offline]"))
    head, ellipsis, tail = " ".join(sample.split()).partition(" ... ")
    assert query and ellipsis
    response = await client.post(
        "/api/stream_query",
        json={"query": query.group(1), "stream": False},
        headers=auth("readme-user"),
    )
    body = response.json()
    assert body["tool"]["data"]["items"][0]["riferimento"] == "3.2"
    assert body["answer"].startswith(head)
    assert body["answer"].endswith(tail), body["answer"][-80:]

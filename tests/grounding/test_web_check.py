"""The optional web check (`GROUNDING_WEB_CHECK`): unverified citations searched on the
official sites through a loopback search service, as a `source`, never a verification."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aircoach.grounding.guard import ContextIndex, Source, check
from aircoach.grounding.web import official, with_web_sources
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, text
from tests.tools.conftest import tool_urls
from tests.tools.fake_service import FakeToolService, Reply

ANSWER = "Le quote minime sono nella SERA.5010."
EUR_LEX = "https://eur-lex.europa.eu/legal-content/IT/TXT/?uri=CELEX:32012R0923"
pytestmark = pytest.mark.integration  # a loopback search service

RESULTS = {
    "results": [
        {"url": "https://example.com/sera", "title": "SERA.5010 spiegata", "content": "SERA.5010"},
        {"url": "https://eur-lex.europa.eu/x", "title": "Reg. 923/2012", "content": "SERA.5001"},
        {"url": EUR_LEX, "title": "Regolamento (UE) 923/2012", "content": "... SERA.5010 ..."},
    ]
}


@pytest.fixture
def search() -> Iterator[FakeToolService]:
    service = FakeToolService().start()
    yield service
    service.stop()


def test_only_official_domains_count():
    assert official("https://eur-lex.europa.eu/a") and official("https://www.normattiva.it/b")
    assert official("https://www.easa.europa.eu/c") and official("https://www.enac.gov.it/d")
    assert not official("https://easa.europa.eu.example.com/") and not official("http://x.it")


async def test_an_official_page_that_cites_it_is_a_source_not_a_verification(search):
    search.plan("/searx/search", Reply(200, RESULTS))
    result = check(ANSWER, ContextIndex.of([Source("tool", "kb", "Vedi la SERA.5001.")]))
    assert result is not None
    checked = await with_web_sources(result, f"{search.url}/searx/search")
    (citation,) = checked.citations
    assert citation.verified is False and checked.unverified == ["SERA.5010"]
    assert citation.source is not None
    assert (citation.source.url, citation.source.confirms) == (EUR_LEX, True)
    (hit,) = search.hits("/searx/search")
    assert '"SERA.5010"' in hit.query["q"] and "site:eur-lex.europa.eu" in hit.query["q"]


async def test_a_failing_search_leaves_the_verdict_as_it_was(search):
    search.plan("/searx/search", Reply(503))
    result = check(ANSWER, ContextIndex())
    assert result is not None
    assert await with_web_sources(result, f"{search.url}/searx/search") == result


async def test_in_a_turn_it_is_off_by_default_and_on_when_asked(settings, auth, search):
    search.plan("/searx/search", Reply(200, RESULTS))
    base = settings.model_copy(update={"tool_env": tool_urls(search)})
    for web_check in (False, True):
        turn_settings = base.model_copy(update={"grounding_web_check": web_check})
        app = app_with(turn_settings, models=ScriptedModels(Script([text(ANSWER)])))
        async with asgi_client(app) as client:
            events = await chat(client, auth(), "Quote minime?", chat_history=False)
        (grounding,) = [e for e in events if e["type"] == "grounding"]
        (citation,) = grounding["citations"]
        assert citation["verified"] is False
        if web_check:
            assert citation["source"] == {
                "url": EUR_LEX,
                "title": RESULTS["results"][2]["title"],
                "confirms": True,
            }
            assert len(search.hits("/searx/search")) == 1
        else:
            assert citation["source"] is None and search.hits("/searx/search") == []

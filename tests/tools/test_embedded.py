"""kb_search's two backends: the HTTP service when KB_SEARCH_URL is set, the embedded course
index otherwise; the model and the client see the same shapes from both."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from aircoach.knowledge.library import CourseKnowledge, CourseSearch
from aircoach.tools.backends import load_handler
from aircoach.tools.registry import ToolContext, ToolSpec, parse_tools_config
from aircoach.tools.results import failure_data
from tests.helpers import app_with, asgi_client, chat, copy_prompt_docs, shipped_docs
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.tools.conftest import fast, shipped_tools, tool_urls, write_tools
from tests.tools.fake_service import Reply

QUERY = "Come si regola l'altimetro con il QNH?"


@pytest.fixture
def kb() -> ToolSpec:
    specs = {t.name: t for t in parse_tools_config(json.dumps(fast(shipped_tools()))).tools}
    return specs["kb_search"]


@pytest.fixture
def ctx() -> ToolContext:
    knowledge = CourseKnowledge().search_in(shipped_docs())
    return ToolContext(user_id="user-1", env={}, deps={CourseSearch: knowledge})


def _shape(data: dict[str, Any]) -> tuple[Any, ...]:
    items = data.get("items")
    return (
        sorted(data),
        sorted(data["meta"]),
        None if items is None else [sorted(item) for item in items[:1]],
    )


async def test_the_embedded_backend_searches_the_course(kb, ctx):
    out = await load_handler(kb)(ctx, query=QUERY, top_k=50)
    assert out.ok, out.text
    assert out.data["success"] is True
    assert out.data["meta"] == {
        "latency_ms": out.data["meta"]["latency_ms"],
        "source": "kb_search",
        "endpoint": "embedded",
        "attempts": 1,
    }
    items = out.data["items"]
    assert items[0]["riferimento"] == "3.2" and len(items) <= 20  # top_k capped as for HTTP
    lines = out.text.splitlines()
    assert lines[0] == f"[Manuale: {len(items)} risultati]"
    assert lines[1].startswith("- [3.2] (Strumenti di volo) score=")
    assert len(lines) == 1 + min(len(items), kb.format.max_results) + (len(items) > 8)


async def test_a_follow_up_searches_the_topic_first(kb, ctx):
    # "e con il QFE?" after a question on the altimeter: the search names the topic too.
    out = await load_handler(kb)(replace(ctx, topic=("altimetro",)), query="e con il QFE?")
    assert out.ok and out.data["meta"]["expanded_query"].startswith("altimetro ")
    assert out.data["items"][0]["riferimento"] == "3.2"
    alone = await load_handler(kb)(ctx, query="e con il QFE?")
    assert "expanded_query" not in alone.data["meta"]


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"query": ""}, "query: must be a non-empty text"),
        ({"query": "x" * 1001}, "query: at most 1000 characters"),
        ({"query": "stallo", "top_k": 0}, "top_k: must be between 1 and 20"),
    ],
)
async def test_bad_arguments_are_a_failure_the_model_reads(kb, ctx, arguments, reason):
    out = await load_handler(kb)(ctx, **arguments)
    assert not out.ok and out.text == f"[Tool kb_search failed: {reason}]"
    assert out.data == failure_data(reason, out.data["meta"])
    assert QUERY not in json.dumps(out.data)


async def test_no_match_is_a_success_with_no_items(kb, ctx):
    out = await load_handler(kb)(ctx, query="Mi consigli un buon mutuo per la casa?")
    assert out.ok and out.data["items"] == [] and out.text == "[Manuale: nessun risultato]"


@pytest.mark.integration
async def test_embedded_and_remote_give_the_same_shapes(kb, ctx, tool_service):
    embedded = await load_handler(kb)(ctx, query=QUERY)
    hit = {k: embedded.data["items"][0][k] for k in embedded.data["items"][0]}
    tool_service.plan("/kb", Reply(200, {"results": [hit]}))
    remote_ctx = replace(ctx, env=tool_urls(tool_service))
    assert kb.backend(remote_ctx.env) == "remote"
    remote = await load_handler(kb)(remote_ctx, query=QUERY)
    assert len(tool_service.hits("/kb")) == 1  # the service answered, not the index
    assert _shape(remote.data) == _shape(embedded.data)
    assert remote.data["items"] == [hit] and remote.data["meta"]["endpoint"] == "${KB_SEARCH_URL}"
    # The model reads the same line for the same section from both.
    assert remote.text.splitlines()[1] == embedded.text.splitlines()[1]
    tool_service.plan("/kb", Reply(404))
    failed = await load_handler(kb)(remote_ctx, query=QUERY)
    bad = await load_handler(kb)(ctx, query="")
    assert _shape(failed.data) == _shape(bad.data)
    assert sorted(failed.data) == ["error", "meta", "success"] and failed.data["success"] is False


@pytest.mark.integration
async def test_tools_list_and_stream_the_same_with_each_backend(
    settings, auth, tool_service, tmp_path
):
    docs = copy_prompt_docs(tmp_path / "docs")  # with the manual
    write_tools(docs, fast(shipped_tools()))
    remote_settings = settings.model_copy(
        update={"prompt_docs_dir": docs, "tool_env": tool_urls(tool_service)}
    )
    settings = remote_settings.model_copy(update={"tool_env": {}})
    tool_service.plan("/kb", Reply(200, {"results": [{"riferimento": "3.2", "testo": "QNH."}]}))
    results = {}
    for current, backend in ((settings, "embedded"), (remote_settings, "remote")):
        script = Script([call("kb_search", query="QNH altimetro"), text("Ecco.")])
        async with asgi_client(app_with(current, models=ScriptedModels(script))) as client:
            tools = {t["name"]: t for t in (await client.get("/api/tools", headers=auth())).json()}
            assert tools["kb_search"]["available"] and tools["kb_search"]["backend"] == backend
            events = await chat(client, auth(), QUERY)
        assert [e["type"] for e in events][:2] == ["tool_result", "agent_message"]
        results[backend] = events[0]
        assert events[0]["final"] is False and events[0]["data"]["success"] is True
    assert results["embedded"]["data"]["meta"]["endpoint"] == "embedded"
    assert results["remote"]["data"]["meta"]["endpoint"] == "${KB_SEARCH_URL}"
    # The fake service's item has fewer fields than the index's: the envelope is the same.
    assert _shape(results["embedded"]["data"])[:2] == _shape(results["remote"]["data"])[:2]

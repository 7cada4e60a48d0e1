"""The HTTP tool executor against a real HTTP server on loopback: retries, timeouts, failure
shaping, caps and no-results text; and the same failures inside a chat turn."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from aircoach.tools import http as http_tools
from aircoach.tools.formatting import format_result
from aircoach.tools.http import call_http_tool
from aircoach.tools.registry import ResultFormat, ToolContext, ToolSpec, parse_tools_config
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.sse import parse_sse
from tests.tools.conftest import (
    BACKOFF_S,
    HANG,
    HANG_TIMEOUT_S,
    SHARED_TIMEOUT_S,
    fast,
    shipped_tools,
    with_timeout,
    write_tools,
)
from tests.tools.fake_service import Reply

pytestmark = pytest.mark.integration

KB_HIT = {
    "riferimento": "Manuale, cap. 5.2",
    "materia": "meteorologia",
    "testo": "La densità dell'aria diminuisce con la quota e con la temperatura.",
    "rrf_score": 0.87,
}


@pytest.fixture
def specs() -> dict[str, ToolSpec]:
    return {t.name: t for t in parse_tools_config(json.dumps(fast(shipped_tools()))).tools}


@pytest.fixture
def ctx(settings) -> ToolContext:
    return ToolContext(user_id="user-1", env=settings.tool_env)


def with_env(ctx: ToolContext, **variables: str) -> ToolContext:
    return replace(ctx, env={**ctx.env, **variables})


async def test_503_then_200_retries_once_and_records_latency(tool_service, specs, ctx):
    tool_service.plan("/kb", Reply(503), Reply(200, {"results": [KB_HIT]}))
    out = await call_http_tool(specs["kb_search"], ctx, query="densità", top_k=50)
    assert out.ok, out.text
    meta = out.data["meta"]
    assert meta["source"] == "kb_search" and meta["attempts"] == 2
    assert meta["endpoint"] == "${KB_SEARCH_URL}"  # the template, never the expanded URL
    assert meta["latency_ms"] >= BACKOFF_S * 1000
    assert out.data == {"success": True, "items": [KB_HIT], "meta": meta}
    assert out.text == (
        "[Manuale: 1 risultati]\n- [Manuale, cap. 5.2] (meteorologia) score=0.87: "
        "La densità dell'aria diminuisce con la quota e con la temperatura."
    )
    hits = tool_service.hits("/kb")
    assert len(hits) == 2 and all(h.method == "POST" for h in hits)
    assert hits[-1].json == {"query": "densità", "top_k": 20}  # capped at 20


async def test_fixed_fields_are_merged_over_the_model_arguments(tool_service, specs, ctx):
    tool_service.plan("/lex", Reply(200, {"results": []}))
    await call_http_tool(specs["lex_search"], ctx, query="SERA", version="abrogata", top_k=3)
    assert tool_service.hits("/lex")[0].json == {
        "query": "SERA",
        "top_k": 3,
        "version": "vigente",
        "language": "ita",
    }


async def test_timeout_then_success(tool_service, specs, ctx):
    tool_service.plan(
        "/kb", Reply(200, {"results": [KB_HIT]}, delay_s=HANG), Reply(200, {"results": [KB_HIT]})
    )
    kb = with_timeout(specs["kb_search"], SHARED_TIMEOUT_S)
    out = await call_http_tool(kb, ctx, query="densità")
    assert out.ok and out.data["meta"]["attempts"] == 2
    assert out.data["meta"]["latency_ms"] >= (SHARED_TIMEOUT_S + BACKOFF_S) * 1000
    assert len(tool_service.wait_for_hits("/kb", 2)) == 2


async def test_500_is_not_retried(tool_service, specs, ctx):
    tool_service.plan("/kb", Reply(500, {"detail": "boom"}), Reply(200, {"results": [KB_HIT]}))
    out = await call_http_tool(specs["kb_search"], ctx, query="densità")
    assert not out.ok and out.text == "[Tool kb_search failed: HTTP 500]"
    assert out.data["error"] == "HTTP 500" and out.data["meta"]["attempts"] == 1
    assert len(tool_service.hits("/kb")) == 1


async def test_two_timeouts_give_up_after_one_retry(tool_service, specs, ctx):
    tool_service.plan("/lex", Reply(200, delay_s=HANG))
    lex = with_timeout(specs["lex_search"], HANG_TIMEOUT_S)
    out = await call_http_tool(lex, ctx, query="SERA")
    assert out.text == f"[Tool lex_search failed: timeout after {round(HANG_TIMEOUT_S * 1000)}ms]"
    assert out.data["meta"]["attempts"] == 2
    assert len(tool_service.wait_for_hits("/lex", 2)) == 2


async def test_get_tool_sends_query_string_and_honours_zero_retries(tool_service, specs, ctx):
    tool_service.plan("/searx/search", Reply(503))
    out = await call_http_tool(specs["web_search"], ctx, q="aeroclub Milano")
    assert out.text == "[Tool web_search failed: HTTP 503]"
    (hit,) = tool_service.hits("/searx/search")
    assert hit.method == "GET" and hit.json is None
    assert hit.query == {"q": "aeroclub Milano", "format": "json", "language": "it"}


async def test_unreachable_service_and_non_json_fail_without_retry(tool_service, specs, ctx):
    tool_service.plan("/kb", Reply(200, b"<html>oops</html>"))
    out = await call_http_tool(specs["kb_search"], ctx, query="x")
    assert out.text == "[Tool kb_search failed: the service did not answer JSON]"
    refused = with_env(ctx, KB_SEARCH_URL="http://127.0.0.1:9/kb")  # the discard port
    out = await call_http_tool(specs["kb_search"], refused, query="x")
    assert out.text == "[Tool kb_search failed: ConnectError]" and out.data["meta"]["attempts"] == 1


async def test_endpoint_in_meta_never_shows_a_variables_value(tool_service, specs, ctx):
    url = tool_service.url.replace("//", "//user:secret@") + "/kb?key=k"
    tool_service.plan("/kb", Reply(200, {"results": []}))
    out = await call_http_tool(specs["kb_search"], with_env(ctx, KB_SEARCH_URL=url), query="x")
    assert out.data["meta"]["endpoint"] == "${KB_SEARCH_URL}"
    assert "secret" not in json.dumps(out.data) and "key=k" not in json.dumps(out.data)
    assert tool_service.hits("/kb")[0].headers["authorization"].startswith("Basic ")


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("http://HOST/v1/${TOOL_METEO_KEY}/metar", "http://HOST/v1/${TOOL_METEO_KEY}/metar"),
        ("http://u:pw@HOST/metar?key=${TOOL_METEO_KEY}", "http://HOST/metar"),
        ("${TOOL_METEO_URL}/metar?key=${TOOL_METEO_KEY}", "${TOOL_METEO_URL}/metar"),
        ("http://HOST:${TOOL_METEO_PORT}/metar", "http://HOST:${TOOL_METEO_PORT}/metar"),
    ],
)
async def test_endpoint_in_meta_is_the_template_without_credentials_or_query(
    tool_service, ctx, template, shown
):
    host = tool_service.url.removeprefix("http://")
    port = host.rpartition(":")[2]
    spec = ToolSpec.model_validate(
        {
            "name": "meteo",
            "description": "METAR",
            "http": {
                "url": template.replace("HOST", host if "PORT" not in template else "127.0.0.1")
            },
        }
    )
    tool_service.plan("/v1/K3Y/metar", Reply(200, {"results": []}))
    tool_service.plan("/metar", Reply(200, {"results": []}))
    env = {
        "TOOL_METEO_KEY": "K3Y",
        "TOOL_METEO_URL": tool_service.url,
        "TOOL_METEO_PORT": port,
    }
    out = await call_http_tool(spec, with_env(ctx, **env), icao="LIML")
    assert out.ok, out.text
    expected = shown.replace("HOST", host if "PORT" not in template else "127.0.0.1")
    assert out.data["meta"]["endpoint"] == expected
    assert "K3Y" not in json.dumps(out.data)


async def test_oversized_results_are_capped_for_the_model_and_the_client(tool_service, specs, ctx):
    results = [
        {"title": f"Titolo {i} " + "t" * 300, "url": f"https://x.it/{i}", "content": "c" * 5000}
        for i in range(50)
    ]
    tool_service.plan("/lex", Reply(200, {"results": results}))
    out = await call_http_tool(specs["lex_search"], ctx, query="SERA")
    lines = out.text.splitlines()
    assert lines[0] == "[Normativa: 50 risultati]"
    assert len(lines) == 1 + 8 + 1 and lines[-1] == "(altri 42 risultati non mostrati)"
    title, rest = lines[1][2:].split(" (https://x.it/0): ")
    assert len(title) == 100 and title.endswith("…")
    assert len(rest) == 800 and rest.endswith("…")
    # The client gets the items the model was shown, each field capped, never the raw answer.
    assert out.data["success"] is True and "results" not in out.data
    items = out.data["items"]
    assert [item["url"] for item in items] == [f"https://x.it/{i}" for i in range(8)]
    assert all(len(item["title"]) == 100 and len(item["content"]) == 800 for item in items)
    assert len(json.dumps(out.data).encode()) <= ctx.client_max_bytes


async def test_client_data_stays_under_tool_client_max_bytes(tool_service, specs, ctx):
    results = [{"url": f"https://x.it/{i}", "content": "è" * 5000} for i in range(50)]
    tool_service.plan("/lex", Reply(200, {"results": results}))
    small = replace(ctx, client_max_bytes=4096)
    out = await call_http_tool(specs["lex_search"], small, query="SERA")
    size = len(json.dumps(out.data, ensure_ascii=False).encode())
    assert size <= 4096 and out.data["items"]
    assert len(out.data["items"]) + out.data["meta"]["dropped"] == 8
    assert out.text.count("\n- ") == 8  # the model still reads every kept result


async def test_an_answer_over_max_response_bytes_is_a_failure_not_stored(tool_service, specs, ctx):
    spec = specs["lex_search"]
    spec = spec.model_copy(
        update={"http": spec.http.model_copy(update={"max_response_bytes": 10_000})}
    )
    tool_service.plan("/lex", Reply(200, {"results": [{"content": "x" * 20_000}]}))
    out = await call_http_tool(spec, ctx, query="SERA")
    assert not out.ok and out.text == "[Tool lex_search failed: answer larger than 10000 bytes]"
    assert out.data["success"] is False and "items" not in out.data
    assert len(tool_service.hits("/lex")) == 1  # not retried


async def test_empty_results_give_the_no_results_text(tool_service, specs, ctx):
    tool_service.plan("/kb", Reply(200, {"results": []}))
    out = await call_http_tool(specs["kb_search"], ctx, query="x")
    assert out.ok and out.text == "[Manuale: nessun risultato]"


def test_format_falls_back_between_fields_and_lists_fields_without_a_template():
    fmt = ResultFormat(item="- [{riferimento|id}] {testo|text}", max_chars=12)
    body = {"results": [{"id": "m1", "text": "abcdefghijklmnopqrstuvwxyz"}]}
    assert format_result("kb", fmt, body) == "[kb: 1 risultati]\n- [m1] abcdefghijk…"
    plain = ResultFormat(no_results="vuoto")
    assert format_result("t", plain, {"text": "Art. 1", "urn": "u"}) == (
        "[t: 1 risultati]\n- text: Art. 1; urn: u"
    )
    assert format_result("t", plain, {"results": []}) == "vuoto"


async def test_two_failures_reach_the_model_as_a_shaped_message_and_the_turn_ends_normally(
    tool_service, client, auth, script
):
    tool_service.plan("/kb", Reply(503), Reply(502))
    s = script([call("kb_search", query="densità dell'aria"), text("Il manuale non risponde ora.")])
    events = await chat(client, auth(), "Cosa dice il manuale sulla densità dell'aria?")
    assert events[0]["type"] == "tool_result"
    data = events[0]["data"]
    assert data["success"] is False and data["error"] == "HTTP 502"
    assert data["meta"]["attempts"] == 2 and data["meta"]["source"] == "kb_search"
    assert events[0]["final"] is False
    assert "".join(e["content"] for e in events if e["type"] == "agent_message") == (
        "Il manuale non risponde ora."
    )
    assert events[-1]["type"] == "done" and not [e for e in events if e["type"] == "error"]
    last = s.calls[-1][-1]
    assert isinstance(last, ToolMessage) and last.content == "[Tool kb_search failed: HTTP 502]"
    assert len(tool_service.hits("/kb")) == 2


async def test_a_result_reaches_the_client_shaped_and_the_model_formatted(
    tool_service, client, auth, script
):
    tool_service.plan("/kb", Reply(503), Reply(200, {"results": [KB_HIT]}))
    s = script([call("kb_search", query="densità"), text("Diminuisce con la quota.")])
    events = await chat(client, auth(), "Cosa dice il manuale sulla densità dell'aria?")
    result = events[0]
    assert result["type"] == "tool_result" and result["tool_name"] == "kb_search"
    assert result["data"]["success"] is True and result["data"]["items"] == [KB_HIT]
    assert result["data"]["meta"]["attempts"] == 2 and result["data"]["meta"]["latency_ms"] >= 50
    tool_message = s.calls[-1][-1]
    assert isinstance(tool_message, ToolMessage)
    assert tool_message.content.startswith("[Manuale: 1 risultati]\n- [Manuale, cap. 5.2]")
    history = (await client.get("/api/history", headers=auth())).json()["turns"]
    assert history[0]["tool"]["data"]["items"] == [KB_HIT]


async def test_calls_share_one_ssl_context(tool_service, specs, ctx, monkeypatch):
    """Building an SSL context loads the CA bundle (~45 ms of blocking work): a client per
    call with the default `verify=True` did it on the event loop at every tool call, halving
    the throughput of tool turns under load (tests/load)."""
    import ssl

    from aircoach.tls import tls_context

    made: list[object] = []
    real = ssl.create_default_context

    def counting(*args, **kwargs):
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    tls_context.cache_clear()  # as in a new process
    tool_service.plan("/kb", Reply(200, {"results": [KB_HIT]}))
    for _ in range(3):
        assert (await call_http_tool(specs["kb_search"], ctx, query="densità")).ok
    assert len(made) == 1


async def test_a_key_in_the_url_never_reaches_the_client_or_the_store(
    tool_service, settings, docs_dir, auth
):
    config = fast(shipped_tools())
    meteo = {
        "name": "meteo",
        "description": "METAR di un aeroporto.",
        "parameters": {"type": "object", "properties": {"icao": {"type": "string"}}},
        "http": {"url": f"{tool_service.url}/v1/${{TOOL_METEO_KEY}}/metar", "method": "GET"},
    }
    config["tools"].append(meteo)
    write_tools(docs_dir, config)
    tool_service.plan("/v1/S3GRETO/metar", Reply(200, {"results": [{"raw": "LIML 221020Z"}]}))
    env = {**settings.tool_env, "TOOL_METEO_KEY": "S3GRETO"}
    s = Script([call("meteo", icao="LIML"), text("C'è vento debole.")])
    app = app_with(settings.model_copy(update={"tool_env": env}), models=ScriptedModels(s))
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query",
            json={"query": "METAR di Linate", "tools": {"meteo": True}},
            headers=auth(),
        )
        history = await client.get("/api/history", headers=auth())
    assert response.status_code == 200 and len(tool_service.hits("/v1/S3GRETO/metar")) == 1
    events = parse_sse(response.text)
    assert events[0]["data"]["meta"]["endpoint"] == (
        f"{tool_service.url}/v1/${{TOOL_METEO_KEY}}/metar"
    )
    assert "S3GRETO" not in response.text and "S3GRETO" not in history.text
    assert history.json()["turns"][0]["tool"]["tool_name"] == "meteo"


async def test_a_follow_up_whose_topic_finds_nothing_searches_the_query_as_asked(
    tool_service, specs, ctx
):
    tool_service.plan("/kb", Reply(200, {"results": []}), Reply(200, {"results": [KB_HIT]}))
    follow_up = replace(ctx, topic=("altimetro",))
    out = await call_http_tool(specs["kb_search"], follow_up, query="e la densità?")
    assert out.ok, out.text
    first, second = tool_service.wait_for_hits("/kb", 2)
    searched = [hit.json or hit.query for hit in (first, second)]
    assert "altimetro" in json.dumps(searched[0]) and "altimetro" not in json.dumps(searched[1])
    assert out.data["meta"]["attempts"] == 2
    assert "expanded_query" not in out.data["meta"]  # what was searched in the end: the query
    assert KB_HIT["testo"] in out.text  # the plain search's result reached the model


def _many_small_objects(size: int) -> dict[str, Any]:
    """An answer of about `size` bytes of small objects: the slowest kind to parse."""
    item = {"title": "Titolo", "url": "https://x.it/1", "score": 0.5, "tags": ["a", "b"]}
    return {"results": [item] * (size // len(json.dumps(item)))}


async def test_a_large_answer_is_parsed_off_the_event_loop(tool_service, specs, ctx, monkeypatch):
    """A 2 MB answer of small objects took the parser about 20 ms on the loop, where every
    other request of the instance waited. A small one is parsed in place."""
    loop_thread = threading.get_ident()
    parsed_on: dict[int, int] = {}

    def spying_loads(raw: bytes) -> Any:
        parsed_on[len(raw)] = threading.get_ident()
        return json.loads(raw)

    monkeypatch.setattr(http_tools, "json", SimpleNamespace(loads=spying_loads))
    tool_service.plan("/lex", Reply(200, _many_small_objects(1_900_000)))
    large = await call_http_tool(specs["lex_search"], ctx, query="SERA")
    tool_service.plan("/lex", Reply(200, {"results": [{"content": "c" * 1000}]}))
    small = await call_http_tool(specs["lex_search"], ctx, query="SERA")
    assert large.ok and small.ok
    assert large.text.startswith("[Normativa: ") and len(large.data["items"]) == 8
    sizes = sorted(parsed_on)
    assert sizes[0] < 10_000 and sizes[-1] > 1_800_000
    assert parsed_on[sizes[0]] == loop_thread
    assert parsed_on[sizes[-1]] != loop_thread


@pytest.mark.parametrize("size", [1_000, 300_000])
async def test_an_answer_nested_too_deep_is_a_failure_not_an_exception(
    tool_service, specs, ctx, size
):
    """Past the parser's nesting limit `json.loads` raises RecursionError, not ValueError: it
    escaped into the turn (on the loop, and off it for a large answer)."""
    tool_service.plan("/lex", Reply(200, b"[" * size + b"]" * size))
    out = await call_http_tool(specs["lex_search"], ctx, query="SERA")
    assert not out.ok and out.text == "[Tool lex_search failed: the service did not answer JSON]"

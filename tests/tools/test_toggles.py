"""Per-request tool switches, /api/tools, the sources-off warning, the compact log line, and
the offline model's choice among the shipped tools."""

from __future__ import annotations

import logging

import pytest
from langchain_core.messages import SystemMessage

from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import text
from tests.tools.conftest import shipped_tools
from tests.tools.fake_service import Reply

QUIZ, GRADE = "domanda_teoria", "verifica_risposta"

WARNING = shipped_tools()["sources_off_warning"]


def _system(script_calls) -> str:
    first = script_calls[0][0]
    assert isinstance(first, SystemMessage)
    return first.text


async def test_tools_lists_every_declared_tool_with_its_availability(settings, auth):
    only_lex = settings.model_copy(
        update={"tool_env": {"LEX_SEARCH_URL": "http://127.0.0.1:9/lex"}}
    )
    async with asgi_client(app_with(only_lex)) as client:
        response = await client.get("/api/tools", headers=auth())
        anonymous = await client.get("/api/tools")
    assert response.status_code == 200
    tools = {t["name"]: t for t in response.json()}
    assert list(tools) == [
        "domanda_teoria",
        "verifica_risposta",
        "web_search",
        "kb_search",
        "lex_search",
    ]
    assert tools["domanda_teoria"] == {
        "name": "domanda_teoria",
        "label": "Quiz di teoria",
        "description": shipped_tools()["tools"][0]["description"],
        "default_enabled": True,
        "source": False,
        "return_direct": True,
        "available": True,
        "backend": "python",
        "unavailable_reason": None,
    }
    assert tools["web_search"]["label"] == "Ricerca sul web"
    assert tools["web_search"]["unavailable_reason"] == (
        "Non disponibile: il servizio non è configurato su questo server."
    )
    assert tools["lex_search"]["unavailable_reason"] is None
    assert tools["kb_search"]["unavailable_reason"] is None  # embedded: available
    async with asgi_client(app_with(only_lex)) as client:
        english = await client.get("/api/tools", headers={**auth(), "Accept-Language": "en"})
    assert english.json()[2]["unavailable_reason"] == (
        "Unavailable: its service is not configured on this server."
    )
    assert {
        n: (t["available"], t["default_enabled"], t["source"], t["backend"])
        for n, t in tools.items()
    } == {
        "domanda_teoria": (True, True, False, "python"),
        "verifica_risposta": (True, True, False, "python"),
        "web_search": (False, False, False, None),
        "kb_search": (True, True, True, "embedded"),  # no KB_SEARCH_URL: the course on board
        "lex_search": (True, True, True, "remote"),
    }
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    ("switches", "bound"),
    [
        (None, [QUIZ, GRADE, "kb_search", "lex_search"]),
        ({}, [QUIZ, GRADE, "kb_search", "lex_search"]),
        ({"web_search": True}, [QUIZ, GRADE, "web_search", "kb_search", "lex_search"]),
        ({"kb_search": False, QUIZ: False}, [GRADE, "lex_search"]),
        (
            {"web_search": True, "kb_search": False, "lex_search": False},
            [QUIZ, GRADE, "web_search"],
        ),
    ],
)
async def test_only_the_tools_switched_on_are_bound(
    client, auth, script, tool_service, switches, bound
):
    s = script([text("Ciao.")])
    body = {} if switches is None else {"tools": switches}
    await chat(client, auth(), "Ciao", **body)
    assert s.bound == [bound]


@pytest.mark.parametrize(
    "body",
    [
        {"kb_search_enabled": False, "domanda_teoria_enabled": False},
        {"kb_search_enabled": False, "tools": {QUIZ: False}},
        {"kb_search_enabled": False, "tools": {"kb_search": False, QUIZ: False}},
    ],
)
async def test_flat_switches_of_older_clients_are_tools_aliases(
    client, auth, script, tool_service, body
):
    s = script([text("Ciao.")])
    await chat(client, auth(), "Ciao", **body)
    assert s.bound == [[GRADE, "lex_search"]]


async def test_an_unavailable_tool_stays_off_even_when_switched_on(client, auth, script):
    s = script([text("Ciao.")])
    await chat(client, auth(), "Ciao", tools={"web_search": True})
    assert s.bound == [[QUIZ, GRADE, "kb_search"]]


async def test_unknown_tool_name_is_a_422_listing_the_valid_ones(client, auth):
    response = await client.post(
        "/api/stream_query",
        json={"query": "Ciao", "tools": {"kb_search": True, "meteo": True}},
        headers=auth(),
    )
    assert response.status_code == 422
    (detail,) = response.json()["detail"]
    assert detail["loc"] == ["body", "tools", "meteo"]
    assert detail["msg"] == (
        "unknown tool 'meteo'; valid: ['domanda_teoria', 'kb_search', 'lex_search', "
        "'verifica_risposta', 'web_search']"
    )


@pytest.mark.parametrize(
    ("switches", "warned"),
    [
        (None, False),
        ({"kb_search": False}, False),
        ({"lex_search": False}, False),
        ({"kb_search": False, "lex_search": False}, True),
        ({"kb_search": False, "lex_search": False, "web_search": True}, True),
        ({"domanda_teoria": False, "kb_search": False, "lex_search": False}, True),
    ],
)
async def test_sources_off_warning_is_added_exactly_when_every_source_is_off(
    client, auth, script, tool_service, switches, warned
):
    s = script([text("Ciao.")])
    await chat(client, auth(), "Cosa dice il regolamento SERA?", tools=switches)
    system = _system(s.calls)
    assert system.count(WARNING.strip()) == (1 if warned else 0)
    assert system.startswith("# Ruolo")
    if warned:
        assert system.endswith(WARNING.strip())


async def test_unconfigured_sources_count_as_off(client, auth, script):
    s = script([text("Ciao."), text("Ciao.")])  # no tool service: no URL variable is set
    await chat(client, auth(), "Ciao")  # kb_search runs embedded: a source is on
    await chat(client, auth(), "Ciao", tools={"kb_search": False})  # lex_search is not set
    assert WARNING.strip() not in _system(s.calls[:1])
    assert _system(s.calls[1:]).endswith(WARNING.strip())


async def test_one_compact_log_line_per_request(client, auth, script, tool_service, caplog):
    script([text("Uno."), text("Due.")])
    with caplog.at_level(logging.INFO, logger="aircoach.turn.prepare"):
        await chat(client, auth(), "Ciao")
        await chat(client, auth(), "Ciao", tools={"web_search": True, "lex_search": False})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tools ")]
    assert lines == [
        "tools domanda_teoria=1 verifica_risposta=1 web_search=0 kb_search=1 lex_search=1",
        "tools domanda_teoria=1 verifica_risposta=1 web_search=1 kb_search=1 lex_search=0",
    ]


@pytest.mark.parametrize(
    "query",
    [
        "Dammi una domanda del capitolo 2",
        "Fammi un quiz",
        "Fammi una domanda sul QNH",
        "Cerca una domanda sull'altimetro",
        "Dammi una domanda sulla normativa SERA",
        "Fammi una domanda dal manuale sulla densità dell'aria",
        "Mettimi alla prova con una domanda sulle notizie di meteorologia",
    ],
)
async def test_offline_model_keeps_quiz_requests_on_the_quiz_tool(
    client, auth, tool_service, query
):
    events = await chat(client, auth(), query, tools={"web_search": True})
    assert events[0]["type"] == "tool_result" and events[0]["tool_name"] == "domanda_teoria"
    assert tool_service.hits() == []


@pytest.mark.parametrize(
    ("query", "tool", "path"),
    [
        ("Cosa prevede il regolamento SERA sulle quote minime di sorvolo?", "lex_search", "/lex"),
        ("Cosa dice il manuale sulla densità dell'aria?", "kb_search", "/kb"),
        ("Cerca sul web le ultime notizie sull'aviazione generale", "web_search", "/searx/search"),
    ],
)
async def test_offline_model_picks_the_shipped_search_tools(
    client, auth, tool_service, query, tool, path
):
    tool_service.plan(
        path, Reply(200, {"results": [{"title": "T", "url": "https://x.it", "content": "C"}]})
    )
    events = await chat(client, auth(), query, tools={"web_search": True})
    assert events[0]["type"] == "tool_result" and events[0]["tool_name"] == tool
    assert events[0]["data"]["meta"]["source"] == tool
    assert len(tool_service.hits(path)) == 1 and len(tool_service.hits()) == 1
    assert events[-1]["type"] == "done"

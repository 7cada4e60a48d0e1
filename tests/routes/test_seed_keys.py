"""The seed's tool platform's request keys: accepted, and those this deployment does not use
named in a `Warning` header."""

from __future__ import annotations

import logging

import pytest

from tests.scripted_model import text
from tests.sse import parse_sse


async def _ask(client, auth, **body):
    return await client.post("/api/stream_query", json={"query": "ciao", **body}, headers=auth())


async def test_use_memory_retrieval_is_accepted_without_a_warning(client, auth, script):
    script([text("ok")])
    response = await _ask(client, auth, use_memory_retrieval=False)
    assert response.status_code == 200, response.text
    assert "Warning" not in response.headers
    assert parse_sse(response.text)[-1]["type"] == "done"


async def test_unused_keys_are_ignored_and_named_in_a_warning(client, auth, script, caplog):
    script([text("ok")])
    caplog.set_level(logging.INFO, logger="aircoach.routes.chat")
    response = await _ask(
        client,
        auth,
        use_rag_v3_retrieval=True,
        normattiva_enabled=True,
        kb_search_enabled=False,
    )
    assert response.status_code == 200, response.text
    warning = response.headers["Warning"]
    assert warning == '299 - "ignored request keys: use_rag_v3_retrieval, normattiva_enabled"'
    assert "kb_search" not in warning  # a configured tool's switch is used, not ignored
    assert "use_rag_v3_retrieval, normattiva_enabled" in caplog.text
    assert parse_sse(response.text)[-1]["status"] == "ok"


async def test_a_configured_tools_flat_switch_still_switches_it(client, auth, script):
    # The scripted model would call the quiz tool: switched off by its flat key, the model's
    # tools do not include it, so the script sees no such tool.
    model = script([text("ok")])
    response = await _ask(client, auth, domanda_teoria_enabled=False, normattiva_enabled=False)
    assert response.status_code == 200, response.text
    assert model.bound and all("domanda_teoria" not in names for names in model.bound)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tools": {"normattiva": True}}, ["body", "tools", "normattiva"]),
        ({"use_memory_retrieval": "yes"}, ["body", "use_memory_retrieval"]),
        ({"use_rag_v3_retrieval": 1}, ["body", "use_rag_v3_retrieval"]),
        ({"normattiva_enabled": "yes"}, ["body", "normattiva_enabled"]),
        ({"use_memory_retrival": True}, ["body", "use_memory_retrival"]),
        ({"kb_search_enabled": False, "tools": {"kb_search": True}}, ["body", "kb_search_enabled"]),
    ],
)
async def test_what_stays_a_422(client, auth, body, field):
    response = await _ask(client, auth, **body)
    assert response.status_code == 422, response.text
    assert field in [err["loc"] for err in response.json()["detail"]]

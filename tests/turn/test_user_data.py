"""The personalised prompt end to end: an Auth0 token from the fake tenant, the profile from
its Management API, the system prompt the scripted model received."""

from __future__ import annotations

import logging

import pytest
from langchain_core.messages import SystemMessage

from aircoach.auth.userdata import SECTION_TITLE
from aircoach.settings import Settings
from tests.fake_auth0 import FakeTenant
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, text

SUB = "auth0|mario"


@pytest.fixture
def settings(data_dir, tenant: FakeTenant) -> Settings:
    tenant.users[SUB] = {
        "user_id": SUB,
        "name": "Mario Rossi",
        "email": "mario@example.com",
        "locale": "it",
        "user_metadata": {"course": "VDS", "api_key": "sk-do-not-leak"},
    }
    # Generous: these deadlines bound calls that should succeed (the test of a slow tenant
    # sets a short turn deadline for the one call that hangs).
    return tenant.settings(data_dir, user_data_timeout_s=30, auth0_timeout_s=30)


@pytest.fixture
def headers(tenant: FakeTenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.mint(SUB)}"}


def system_prompt(script) -> str:
    first = script.calls[-1][0]
    assert isinstance(first, SystemMessage)
    return first.text


async def test_user_data_true_adds_the_section(client, headers, script, tenant):
    s = script([text("Ciao Mario!")])
    events = await chat(client, headers, "Ciao", user_data=True)
    prompt = system_prompt(s)
    assert SECTION_TITLE in prompt
    assert "- nome: Mario Rossi" in prompt and "- course: VDS" in prompt
    assert "sk-do-not-leak" not in prompt and "mario@example.com" not in prompt
    assert prompt.startswith("# Ruolo")  # the base prompt comes first, unchanged
    assert events[-1]["type"] == "done"
    assert tenant.hits["users"] == 1


async def test_user_data_false_leaves_it_out_and_calls_nobody(client, headers, script, tenant):
    s = script([text("Ciao!")])
    await chat(client, headers, "Ciao", user_data=False)
    assert SECTION_TITLE not in system_prompt(s) and "Mario" not in system_prompt(s)
    assert tenant.hits["users"] == 0 and tenant.hits["token"] == 0


async def test_old_clients_get_user_data_by_default(client, headers, script):
    s = script([text("Ciao!")])
    await chat(client, headers, "Ciao")
    assert "- nome: Mario Rossi" in system_prompt(s)


async def test_prompt_version_and_thread_stay_the_base_prompts(client, headers, script):
    s = script([text("uno"), text("due")])
    with_data = await chat(client, headers, "Ciao", user_data=True)
    without = await chat(client, headers, "Ciao di nuovo", user_data=False)
    shown = [calls[0].text for calls in s.calls]
    assert SECTION_TITLE in shown[0] and SECTION_TITLE not in shown[1]  # different prompts...
    assert with_data[-1]["prompt_version"] == without[-1]["prompt_version"]  # ...one version
    # ...and one thread: the second turn saw the first one.
    assert without[-1]["context_turns"] == 1


async def test_profile_is_cached_across_turns(client, headers, script, tenant):
    script([text("uno"), text("due")])
    await chat(client, headers, "Ciao")
    await chat(client, headers, "Ancora")
    assert tenant.hits["users"] == 1 and tenant.hits["token"] == 1


@pytest.mark.parametrize("trouble", ["down", "slow"])
async def test_auth0_down_or_slow_the_chat_answers_without_user_data(
    settings, headers, tenant, caplog, trouble
):
    caplog.set_level(logging.WARNING, "aircoach.auth.userdata")
    s = Script([text("Ecco la risposta.")])
    # The turn waits 0.5 s for the profile; only the hanging token call is subject to it.
    impatient = settings.model_copy(update={"user_data_timeout_s": 0.5})
    async with asgi_client(app_with(impatient, models=ScriptedModels(s))) as client:
        await client.get(
            "/api/tools", headers=headers
        )  # JWKS cached: only the Management API fails
        if trouble == "down":
            tenant.down.update({"token", "users"})
        else:
            tenant.slow_s["token"] = 600  # until the tenant stops at teardown
        events = await chat(client, headers, "Cos'è la portanza?")
    s.assert_used()
    assert "".join(e["content"] for e in events if e["type"] == "agent_message") == (
        "Ecco la risposta."
    )
    assert events[-1]["type"] == "done"
    assert SECTION_TITLE not in system_prompt(s)
    assert f"no user data for {SUB!r}" in caplog.text


async def test_without_management_credentials_no_call_is_made(data_dir, tenant):
    app = app_with(
        tenant.settings(data_dir, auth0_mgmt_client_id=None, auth0_mgmt_client_secret=None)
    )
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query",
            json={"query": "Ciao", "user_data": True},
            headers={"Authorization": f"Bearer {tenant.mint(SUB)}"},
        )
    assert response.status_code == 200
    assert tenant.hits["token"] == 0 and tenant.hits["users"] == 0
    assert app.state.services.user_data is None

"""The prompt across app instances and S3 outages, through the HTTP API."""

from __future__ import annotations

import asyncio
import threading
from contextlib import asynccontextmanager

import pytest

from aircoach.auth.webhook import signed_headers
from aircoach.services import build_prompt_store
from tests.clock import FakeClock
from tests.helpers import app_with, asgi_client
from tests.loopback import free_port
from tests.s3 import CallCounter, s3_settings
from tests.scripted_model import Script, ScriptedModels, text

TTL = 30.0
WAIT_S = 60.0  # generous: these waits end as soon as what they wait for happens


@asynccontextmanager
async def instance(settings, **parts):
    """One app instance with its own clock, as a separate serverless container would be."""
    clock = FakeClock()
    app = app_with(settings, prompts=build_prompt_store(settings, clock=clock), **parts)
    async with asgi_client(app) as client:
        client.clock = clock  # type: ignore[attr-defined]
        client.app = app  # type: ignore[attr-defined]
        yield client


async def ask(client, headers, query="Come si chiama il coach?"):
    response = await client.post(
        "/api/stream_query", json={"query": query, "stream": False}, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()


async def update_docs(client, secret="s3cret"):
    body = b"{}"
    return await client.post("/api/update_docs", content=body, headers=signed_headers(secret, body))


@pytest.mark.integration
async def test_two_instances_converge_after_update_docs(s3_server, data_dir, auth):
    settings = s3_settings(data_dir, aws_endpoint_url=s3_server.endpoint_url, prompt_ttl_s=TTL)
    async with instance(settings) as first, instance(settings) as second:
        old = (await ask(first, auth()))["prompt_version"]
        assert (await ask(second, auth("user-2")))["prompt_version"] == old

        s3_server.put("10_stile.md", "Rispondi sempre con una checklist.")
        reloaded = await update_docs(first)
        assert reloaded.status_code == 200, reloaded.text
        new = reloaded.json()["prompt_version"]
        assert new != old and reloaded.json()["previous_version"] == old
        assert (await ask(first, auth()))["prompt_version"] == new  # at once

        second.clock.advance(TTL - 1)
        assert (await ask(second, auth("user-2")))["prompt_version"] == old  # still cached
        second.clock.advance(1)
        assert (await ask(second, auth("user-2")))["prompt_version"] == new  # within one TTL

        assert s3_server.version_count(f"_built/{new}.md") == 1  # archived once, not twice


@pytest.mark.integration
async def test_s3_outage_after_a_good_load_keeps_serving_the_last_good_prompt(
    s3_server, moto_server, data_dir, auth
):
    settings = s3_settings(data_dir, aws_endpoint_url=s3_server.endpoint_url, prompt_ttl_s=TTL)
    async with instance(settings) as app:
        good = (await ask(app, auth()))["prompt_version"]
        moto_server.stop()
        app.clock.advance(TTL + 5)
        assert (await ask(app, auth()))["prompt_version"] == good

        health = (await app.get("/api/health")).json()
        assert health["status"] == "degraded"
        prompt = health["prompt"]
        assert prompt["source"] == "s3" and prompt["status"] == "degraded"
        assert prompt["version"] == good and prompt["age_s"] == TTL + 5
        assert prompt["error"] == "EndpointConnectionError"

        failed = await update_docs(app)  # a forced reload says it failed...
        assert failed.status_code == 503 and failed.json()["error"] == "prompt_unavailable"
        assert (await ask(app, auth()))["prompt_version"] == good  # ...and changes nothing


async def test_cold_start_during_an_outage_is_503_prompt_unavailable(aws_env, data_dir, auth):
    nothing_listens = f"http://127.0.0.1:{free_port()}"
    async with instance(s3_settings(data_dir, aws_endpoint_url=nothing_listens)) as app:
        assert (await app.get("/api/health")).json()["prompt"]["status"] == "not_loaded"
        response = await app.post("/api/stream_query", json={"query": "ciao"}, headers=auth())
        assert response.status_code == 503
        assert response.json()["error"] == "prompt_unavailable"
        health = (await app.get("/api/health")).json()
        assert health["status"] == "degraded" and health["prompt"]["status"] == "unavailable"


async def test_fifty_concurrent_requests_as_the_ttl_expires_make_one_listing(s3, data_dir, auth):
    # A scripted model keeps the 50 turns cheap; the prompt path is what is under test.
    script = Script([text("Pronto.") for _ in range(50)])
    settings = s3_settings(data_dir, prompt_ttl_s=TTL)
    async with instance(settings, models=ScriptedModels(script)) as app:
        old = (await ask(app, auth()))["prompt_version"]
        s3.put("00_ruolo.md", "Sei un coach per piloti di aliante.")
        app.clock.advance(TTL)

        release = threading.Event()
        listing_started = threading.Event()

        def hold_the_listing(operation: str) -> None:
            # Runs in boto3's worker thread: keep the one refresh in flight until the test
            # has seen the other requests finish on the cached prompt.
            if operation == "ListObjectsV2":
                listing_started.set()
                release.wait(timeout=WAIT_S)

        source = app.app.state.services.prompts.source
        calls = CallCounter(on_call=hold_the_listing).attach(source.client)
        tasks = [asyncio.create_task(ask(app, auth(f"user-{i}"))) for i in range(50)]
        finished = []
        async with asyncio.timeout(WAIT_S):
            for next_done in asyncio.as_completed(tasks):
                finished.append(await next_done)
                if len(finished) == 49:
                    break
        assert listing_started.is_set()
        release.set()
        answers = await asyncio.gather(*tasks)
        versions = sorted(a["prompt_version"] for a in answers)
        new = app.app.state.services.prompts.snapshot.version
        assert new != old
        assert calls.count("ListObjectsV2") == 1
        assert versions.count(old) == 49 and versions.count(new) == 1
        assert calls.count("GetObject") == 1  # only the changed doc
        script.assert_used()
        # The model was shown the new prompt once, the cached one 49 times.
        systems = [c[0].content for c in script.calls]
        assert sum("aliante" in s for s in systems) == 1

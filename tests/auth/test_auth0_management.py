"""The Management API client against the fake tenant: token and profile caching, one call per
concurrent miss, backing off while the tenant is down."""

from __future__ import annotations

import asyncio

import anyio
import httpx
import pytest

from aircoach.auth.auth0 import PROFILE_FIELDS, Auth0Management
from aircoach.services import build_user_data_source
from aircoach.settings import Settings
from tests.clock import FakeClock
from tests.fake_auth0 import FakeTenant

MARIO = {"user_id": "auth0|mario", "name": "Mario Rossi", "locale": "it"}


@pytest.fixture
def mgmt(tenant: FakeTenant, data_dir, clock: FakeClock) -> Auth0Management:
    tenant.users["auth0|mario"] = MARIO
    tenant.users["auth0|anna"] = {"user_id": "auth0|anna", "name": "Anna"}
    return Auth0Management(tenant.settings(data_dir), clock=clock)


def test_no_credentials_no_user_data_source(data_dir):
    assert build_user_data_source(Settings(_env_file=None, data_dir=data_dir)) is None
    with_domain_only = Settings(_env_file=None, data_dir=data_dir, auth0_domain="tenant.test")
    assert build_user_data_source(with_domain_only) is None


async def test_token_request_is_client_credentials_for_the_management_audience(mgmt, tenant):
    assert await mgmt.profile("auth0|mario") == MARIO
    assert tenant.token_requests == [
        {
            "grant_type": "client_credentials",
            "client_id": "mgmt-client",
            "client_secret": "mgmt-secret",
            "audience": "https://tenant.test/api/v2/",
        }
    ]
    (request,) = tenant.user_requests
    assert request["auth"] == "Bearer mgmt-token-1"
    assert request["query"]["fields"] == [",".join(PROFILE_FIELDS)]
    assert request["query"]["include_fields"] == ["true"]


async def test_token_is_reused_until_shortly_before_it_expires(mgmt, tenant, clock):
    tenant.token_ttl_s = 600  # renewed a tenth of its life (60 s) early
    await mgmt.profile("auth0|mario")
    clock.advance(539)
    await mgmt.profile("auth0|anna")
    assert tenant.hits["token"] == 1 and tenant.hits["users"] == 2
    clock.advance(2)  # 541 s: within the last minute
    await mgmt.profile("auth0|luca")
    assert tenant.hits["token"] == 2
    assert tenant.user_requests[-1]["auth"] == "Bearer mgmt-token-2"


async def test_short_lived_token_is_not_assumed_to_last_a_day(mgmt, tenant, clock):
    tenant.token_ttl_s = 20
    await mgmt.profile("auth0|mario")
    clock.advance(19)
    await mgmt.profile("auth0|anna")
    assert tenant.hits["token"] == 2


async def test_profile_is_fetched_once_per_ten_minutes_per_user(mgmt, tenant, clock):
    for _ in range(3):
        assert await mgmt.profile("auth0|mario") == MARIO
    await mgmt.profile("auth0|anna")
    assert tenant.hits["users"] == 2
    clock.advance(599)
    await mgmt.profile("auth0|mario")
    assert tenant.hits["users"] == 2
    clock.advance(1)
    tenant.users["auth0|mario"] = {**MARIO, "name": "Mario R."}
    assert (await mgmt.profile("auth0|mario"))["name"] == "Mario R."
    assert tenant.hits["users"] == 3


async def test_profile_cache_is_bounded(tenant, data_dir, clock):
    mgmt = Auth0Management(tenant.settings(data_dir, user_data_cache_size=2), clock=clock)
    for sub in ("a", "b", "c", "a"):
        await mgmt.profile(f"auth0|{sub}")
    assert tenant.hits["users"] == 4  # "a" was evicted by "c"


async def test_concurrent_misses_for_one_user_make_one_call(mgmt, tenant):
    tenant.slow_s["users"] = 0.2
    profiles = await asyncio.gather(*(mgmt.profile("auth0|mario") for _ in range(20)))
    assert all(p == MARIO for p in profiles)
    assert tenant.hits["users"] == 1 and tenant.hits["token"] == 1


async def test_user_id_is_url_quoted(mgmt, tenant):
    sub = "google-oauth2|12/../../clients?x=1"
    tenant.users[sub] = {"user_id": sub, "name": "Path Tricks"}
    assert (await mgmt.profile(sub))["name"] == "Path Tricks"
    assert tenant.user_requests[-1]["raw_id"] == "google-oauth2%7C12%2F..%2F..%2Fclients%3Fx%3D1"


async def test_unknown_user_is_an_empty_profile_and_cached(mgmt, tenant):
    assert await mgmt.profile("auth0|nobody") == {}
    assert await mgmt.profile("auth0|nobody") == {}
    assert tenant.hits["users"] == 1


async def test_tenant_down_raises_then_backs_off(mgmt, tenant, clock):
    tenant.down.add("token")
    with pytest.raises(httpx.HTTPStatusError):
        await mgmt.profile("auth0|mario")
    with pytest.raises(LookupError, match="backing off"):
        await mgmt.profile("auth0|anna")
    assert tenant.hits["token"] == 1
    tenant.down.clear()
    clock.advance(30)
    assert await mgmt.profile("auth0|mario") == MARIO


async def test_rejected_token_is_dropped(mgmt, tenant):
    await mgmt.profile("auth0|mario")
    tenant.issued_tokens.clear()  # the tenant revoked it
    with pytest.raises(httpx.HTTPStatusError):
        await mgmt.profile("auth0|anna")
    assert await mgmt.profile("auth0|anna") == tenant.users["auth0|anna"]
    assert tenant.hits["token"] == 2


async def test_a_cancelled_lookup_does_not_cancel_the_others(mgmt, tenant):
    await mgmt.profile("auth0|anna")  # token cached: the next call goes straight to /users
    tenant.slow_s["users"] = 5
    results: dict[str, object] = {}
    leader_scope = anyio.CancelScope()

    async def leader() -> None:
        with leader_scope:
            results["leader"] = await mgmt.profile("auth0|mario")

    async def follower() -> None:
        try:
            results["follower"] = await mgmt.profile("auth0|mario")
        except Exception as exc:
            results["follower"] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(leader)
        assert await anyio.to_thread.run_sync(tenant.in_flight.acquire, True, 5)
        tg.start_soon(follower)
        await anyio.wait_all_tasks_blocked()
        leader_scope.cancel()
    assert "leader" not in results
    # The follower shared the leader's call, which was cancelled: it fails, but not as a
    # cancellation of its own request.
    assert isinstance(results["follower"], RuntimeError)
    assert tenant.hits["users"] == 2
    tenant.slow_s.clear()
    assert await mgmt.profile("auth0|mario") == MARIO


def test_works_from_one_event_loop_after_another(mgmt, tenant, clock):
    # Serverless runtimes may run each invocation in a new loop: nothing loop-bound is kept.
    assert asyncio.run(mgmt.profile("auth0|mario")) == MARIO
    clock.advance(600)
    assert asyncio.run(mgmt.profile("auth0|mario")) == MARIO
    assert tenant.hits["users"] == 2 and tenant.hits["token"] == 1


async def test_slow_tenant_times_out_then_backs_off(tenant, data_dir, clock):
    mgmt = Auth0Management(tenant.settings(data_dir, auth0_timeout_s=0.1), clock=clock)
    tenant.slow_s["token"] = 5
    with pytest.raises(httpx.TimeoutException):
        await mgmt.profile("auth0|mario")
    with pytest.raises(LookupError, match="ReadTimeout"):
        await mgmt.profile("auth0|mario")
    assert tenant.hits["token"] == 1


async def test_a_cached_profile_keeps_only_what_the_prompt_may_use_each_value_bounded(
    tenant, data_dir, clock
):
    """`user_metadata` is the user's to edit: megabytes of it were cached as they came, for
    each of up to 1,000 users, and flattened with a regex on every turn."""
    huge = "x" * 1_000_000
    tenant.users["auth0|big"] = {
        "user_id": "auth0|big",
        "name": "Giulia " + huge,
        "user_metadata": {"course": "PPL " + huge, "notes": huge, "licenze": ["LAPL", huge] * 50},
        "app_metadata": {"nested": {"deep": huge}},
    }
    settings = tenant.settings(data_dir).model_copy(
        update={"user_data_fields": ["course", "licenze"]}
    )
    profile = await Auth0Management(settings, clock=clock).profile("auth0|big")
    assert len(repr(profile)) < 10_000
    assert (
        profile["name"].startswith("Giulia x") and profile["user_metadata"]["course"][:5] == "PPL x"
    )
    assert set(profile["user_metadata"]) == {"course", "licenze"}  # `notes` is not asked for
    assert profile["user_metadata"]["licenze"][:2] == ["LAPL", "x" * 500]
    assert len(profile["user_metadata"]["licenze"]) == 10 and profile["app_metadata"] == {}

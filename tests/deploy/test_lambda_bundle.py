"""The streaming Lambda function as Lambda runs it: the zip `make bundle` builds, unzipped, its
entry script (run.sh, the Web Adapter's handler) started with python3.12 first on PATH, PORT
and AWS_LAMBDA_FUNCTION_NAME set. The Web Adapter waits for /api/health, then forwards each
request and streams the response: so health must answer, and a turn's events must reach the
client while the model is still writing (here a fake model that holds its stream open)."""

from __future__ import annotations

import json
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy import bundle
from tests.fake_auth0 import FakeTenant
from tests.llm.fakes import FakeModelServer, openai_text
from tests.loopback import free_port

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 120.0  # generous: a busy machine
TURN_TIMEOUT_S = 60.0


def test_a_cold_start_compiles_no_module_of_the_bundle(lambda_bundle, python312_first, tmp_path):
    """Lambda's /var/task is read-only: a module without its python3.12 bytecode would be
    compiled again, in memory, at every cold start. Both entries (the Mangum handler and the
    server run.sh starts) and a turn's modules are read from the shipped bytecode."""
    task_root = bundle.unzip_as_lambda(lambda_bundle, tmp_path / "task")
    environment = {
        "PATH": python312_first,
        "PYTHONPATH": str(task_root),
        "PYTHONDONTWRITEBYTECODE": "1",  # as on Lambda: nothing can be written beside them
        "HOME": str(tmp_path),
        "DATA_DIR": str(tmp_path / "data"),
    }
    imported = subprocess.run(
        [
            "python3",
            "-v",
            "-c",
            "import functions.chat, aircoach.entry.server, aircoach.turn.prepare",
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    prefix = f"# code object from '{task_root}/"  # a module read from its bytecode is quoted
    loaded = [line for line in imported.stderr.splitlines() if str(task_root) in line]
    from_bytecode = [line for line in loaded if line.startswith(prefix)]
    compiled = [line for line in loaded if line.startswith(f"# code object from {task_root}/")]
    assert compiled == []
    assert all(line.endswith(".cpython-312.pyc'") for line in from_bytecode)
    assert len(from_bytecode) > 500, imported.stderr[-2000:]  # the app, FastAPI, LangGraph...
    print(f"\n{len(from_bytecode)} modules of the bundle read from their bytecode, 0 compiled")


def test_the_bundle_holds_the_entry_script_and_nothing_local(lambda_bundle, capsys):
    assert bundle.check(lambda_bundle) == 0
    report = capsys.readouterr().out
    with zipfile.ZipFile(lambda_bundle) as zipped:
        infos = [i for i in zipped.infolist() if not i.is_dir()]
        script = zipped.getinfo("run.sh")
    assert (script.external_attr >> 16) & 0o777 == bundle.ENTRY_MODE
    unzipped_mb = sum(i.file_size for i in infos) / 2**20
    assert unzipped_mb < 150, report  # our target; Lambda refuses more than 250
    print(f"\n{report.splitlines()[0]}; unzipped {unzipped_mb:.1f} MB")


@pytest.fixture
def openai_api() -> Iterator[FakeModelServer]:
    server = FakeModelServer().start()
    yield server
    server.stop()
    server.assert_used()


@pytest.fixture
def function(
    lambda_bundle: Path,
    python312_first: str,
    tmp_path: Path,
    tenant: FakeTenant,
    openai_api: FakeModelServer,
) -> Iterator[str]:
    """run.sh started as the Web Adapter starts it; yields the URL it serves once healthy."""
    task_root = bundle.unzip_as_lambda(lambda_bundle, tmp_path / "task")
    port = free_port()
    environment = {
        "PATH": python312_first,
        "HOME": str(tmp_path),
        "PORT": str(port),
        "AWS_LAMBDA_FUNCTION_NAME": "aircoach-api-test-stream",
        "LAMBDA_TASK_ROOT": str(task_root),
        "AUTH0_DOMAIN": tenant.domain,
        "AUTH0_AUDIENCE": tenant.audience,
        "AUTH0_BASE_URL": tenant.base_url,
        "STORE": "sqlite",  # refused on Lambda unless chosen: a test has no MongoDB
        "DATA_DIR": str(tmp_path / "data"),
        "MODEL_PROVIDER": "openai",
        "MODEL_NAME": "fake-llama",
        "OPENAI_BASE_URL": f"{openai_api.url}/v1",
        "MODEL_TIMEOUT_S": str(TURN_TIMEOUT_S),
        "MODEL_MAX_RETRIES": "0",
    }
    log = tmp_path / "function.log"
    with log.open("wb") as output:
        # Started from elsewhere: run.sh must find the app from its own location.
        process = subprocess.Popen(
            [str(task_root / "run.sh")],
            cwd=tmp_path,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        health = _wait_until_healthy(url, process, log)
        print(f"\nrun.sh under python3.12: /api/health answered {time.monotonic() - started:.1f} s")
        print(f"health: {json.dumps(health)}")
        assert health["store"] == {**health["store"], "backend": "sqlite", "status": "ok"}
        assert health["model"]["provider"] == "openai"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_healthy(url: str, process: subprocess.Popen, log: Path) -> dict[str, Any]:
    """Poll /api/health as the Web Adapter's readiness check does, until it answers 200."""
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(timeout=10) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"run.sh exited ({process.returncode}):\n{log.read_text()}")
            try:
                response = client.get(f"{url}/api/health")
            except httpx.TransportError:
                time.sleep(0.1)  # not listening yet: the next poll
                continue
            assert response.status_code == 200, response.text
            return response.json()
    raise AssertionError(f"/api/health did not answer in {START_TIMEOUT_S} s:\n{log.read_text()}")


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def test_run_sh_serves_a_turn_whose_events_arrive_before_it_ends(
    function: str, tenant: FakeTenant, openai_api: FakeModelServer
):
    reply = openai_text("Prima parte, ", "poi il resto.")
    reply.hang_after = 2  # the role chunk and the first words, then the model holds its stream
    openai_api.script(reply)
    token = tenant.mint("auth0|lambda-user")
    headers = {"Authorization": f"Bearer {token}"}
    body = {"query": "Spiegami il capitolo 3"}

    with (
        httpx.Client(timeout=TURN_TIMEOUT_S) as client,
        client.stream("POST", f"{function}/api/stream_query", json=body, headers=headers) as r,
    ):
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        turn_id = r.headers["x-turn-id"]
        events = _events(r.iter_lines())
        first: list[dict[str, Any]] = []
        for event in events:
            first.append(event)
            if event["type"] == "agent_message":
                break
        # The first words reached us while the model still holds the rest: streamed, not
        # buffered until the turn ends.
        assert first[-1] == {**first[-1], "type": "agent_message", "content": "Prima parte, "}
        assert openai_api.hanging.is_set() and not openai_api.release.is_set()
        assert "done" not in [e["type"] for e in first]
        arrived = time.monotonic()
        openai_api.release.set()
        rest = list(events)

    print(f"\nbefore the model finished: {[e['type'] for e in first]}")
    print(f"after: {[e['type'] for e in rest]} ({time.monotonic() - arrived:.2f} s later)")
    answer = "".join(e["content"] for e in first + rest if e["type"] == "agent_message")
    assert answer == "Prima parte, poi il resto."
    assert rest[-1]["type"] == "done" and "error" not in [e["type"] for e in rest]
    assert rest[-1]["turn_id"] == turn_id  # the id the client had from the first byte

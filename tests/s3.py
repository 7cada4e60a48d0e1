"""S3 test helpers: fake AWS credentials, a moto bucket (in process with `mock_aws`, or behind
a `ThreadedMotoServer` on loopback for the `AWS_ENDPOINT_URL` path), a controllable clock.

Test modules load the fixtures with `pytest_plugins = ["tests.s3"]`. boto3 and moto are
imported by the fixtures that use them: a unit run (which starts no fake backend) never pays
for them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.loopback import free_port

if TYPE_CHECKING:  # imported where used: tests/conftest.py loads this file (see there)
    from aircoach.settings import Settings

BUCKET = "aircoach-prompts"
PREFIX = "prompt_docs/"
REGION = "eu-west-1"


@dataclass
class Bucket:
    client: Any
    name: str = BUCKET
    prefix: str = PREFIX
    endpoint_url: str | None = None

    def put(self, key: str, text: str) -> str:
        response = self.client.put_object(
            Bucket=self.name, Key=self.prefix + key, Body=text.encode()
        )
        return response["VersionId"]

    def get(self, key: str) -> str:
        body = self.client.get_object(Bucket=self.name, Key=self.prefix + key)["Body"]
        return body.read().decode()

    def all_keys(self) -> list[str]:
        page = self.client.list_objects_v2(Bucket=self.name)
        return [obj["Key"] for obj in page.get("Contents", [])]

    def version_count(self, key: str) -> int:
        page = self.client.list_object_versions(Bucket=self.name, Prefix=self.prefix + key)
        return sum(v["Key"] == self.prefix + key for v in page.get("Versions", []))


@dataclass
class CallCounter:
    """Counts S3 operations made by one boto3 client (botocore `before-call` events)."""

    calls: list[str] = field(default_factory=list)
    on_call: Callable[[str], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> CallCounter:
        client.meta.events.register("before-call.s3", self._seen)
        return self

    def _seen(self, model: Any, **kwargs: Any) -> None:
        with self._lock:
            self.calls.append(model.name)
        if self.on_call is not None:
            self.on_call(model.name)

    def count(self, operation: str) -> int:
        return self.calls.count(operation)


def make_bucket(client: Any, *, versioned: bool = True, docs: Path | None = None) -> None:
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    if versioned:
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    from aircoach.settings import ROOT

    root = docs or ROOT / "prompt_docs"
    for path in sorted(root.rglob("*")):
        if path.is_file():
            key = PREFIX + path.relative_to(root).as_posix()
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())


def s3_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "prompt_bucket": BUCKET,
        "prompt_prefix": PREFIX,
        "aws_region": REGION,
        "prompt_ttl_s": 60.0,
        "s3_max_attempts": 1,  # an outage fails at once instead of backing off
        "s3_timeout_s": 30.0,  # reads should succeed; an outage is a refused connection
        "update_docs_secret": "s3cret",
    }
    values.update(overrides)
    from aircoach.settings import Settings

    return Settings(_env_file=None, **values)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials, and no AWS config of the machine running the tests."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def s3(aws_env: None) -> Iterator[Bucket]:
    """A versioned bucket holding the repo's prompt_docs/, in process (moto `mock_aws`)."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        make_bucket(client)
        yield Bucket(client)


class MotoServer:
    """A moto S3 server over real HTTP on a free loopback port."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.running = False

    def start(self) -> None:
        self._server.start()
        self.running = True

    def stop(self) -> None:
        """An outage: afterwards a connection to the port is refused."""
        if not self.running:
            return
        self.running = False
        self._server.stop()
        # moto's stop() leaves the listening socket open (connections would hang, not fail).
        wsgi = getattr(self._server, "_server", None)
        if wsgi is not None:
            wsgi.server_close()


@pytest.fixture
def moto_server(aws_env: None) -> Iterator[MotoServer]:
    from moto.moto_api._internal.models import moto_api_backend

    server = MotoServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        # The server's backends live in this process: leave no bucket to the next test, also
        # when the test stopped the server itself (an outage).
        moto_api_backend.reset()


@pytest.fixture
def s3_server(moto_server: MotoServer) -> Bucket:
    """The same bucket as `s3`, behind the moto server (the `AWS_ENDPOINT_URL` path)."""
    import boto3

    client = boto3.client("s3", region_name=REGION, endpoint_url=moto_server.url)
    make_bucket(client)
    return Bucket(client, endpoint_url=moto_server.url)

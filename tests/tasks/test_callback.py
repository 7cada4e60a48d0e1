"""The signed callback of a queued run, against an HTTPS receiver on loopback (a self-signed
certificate the process trusts through SSL_CERT_FILE): sent before the worker returns the
batch, signed, HTTPS only, allow-listed, no redirects, no loopback unless allowed, bounded."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aircoach.entry.tasks_worker import SqsTaskWorker
from aircoach.services import Services
from aircoach.tasks.callback import CallbackTarget, send_callback
from aircoach.tls import tls_context

pytestmark = pytest.mark.integration

SECRET = "callback-secret"
MAIL = {"subject": "Fattura", "from": "a@b.it", "body": "Non ho ricevuto la fattura di marzo."}


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("callback.example"),  # a name only the test's resolver knows
                    x509.IPAddress(ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class Receiver:
    def __init__(self, port: int):
        self.port = port
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200
        self.location: str | None = None
        self.release = threading.Event()
        self.hang = False

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}/hook"


@pytest.fixture
def receiver(tmp_path, monkeypatch) -> Iterator[Receiver]:
    cert_file, key_file = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    tls_context.cache_clear()  # the shared context is built once per process: trust the cert
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            current = state["r"]
            current.requests.append((self.path, dict(self.headers), body))
            if current.hang:
                current.release.wait(10)
            self.send_response(current.status)
            if current.location:
                self.send_header("Location", current.location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state["r"] = Receiver(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state["r"]
    state["r"].release.set()
    server.shutdown()
    server.server_close()
    tls_context.cache_clear()


def _target(receiver: Receiver, **overrides: Any) -> CallbackTarget:
    values: dict[str, Any] = {
        "url": receiver.url,
        "secret": SECRET,
        "hosts": ("localhost",),
        "timeout_s": 5.0,
        "allow_private": True,
    }
    return CallbackTarget(**{**values, **overrides})


def _verify(headers: dict[str, str], body: bytes) -> None:
    timestamp = headers["X-Aircoach-Timestamp"]
    mac = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    assert headers["X-Aircoach-Signature"] == "sha256=" + mac.hexdigest()


def test_the_worker_sends_the_signed_callback_before_it_returns(receiver, settings):
    configured = settings.model_copy(
        update={
            "task_callback_url": receiver.url,
            "task_callback_secret": SECRET,
            "task_callback_hosts": ["localhost"],
            "task_callback_allow_private": True,
        }
    )
    worker = SqsTaskWorker(Services.build(configured))
    record = {"messageId": "m-1", "body": json.dumps({"task": "email_triage", "input": MAIL})}
    assert worker.handle({"Records": [record]}) == {"batchItemFailures": []}
    ((path, headers, body),) = receiver.requests
    assert path == "/hook" and headers["Content-Type"] == "application/json"
    _verify(headers, body)
    sent = json.loads(body)
    assert set(sent) == {"run_id", "status", "output"} and sent["status"] == "ok"
    assert sent["output"]["topics"][0]["label"] == "PAGAMENTO"

    # The receiver fails: the message fails, and its redelivery sends the same run again.
    receiver.status = 500
    assert worker.handle({"Records": [record]}) == {
        "batchItemFailures": [{"itemIdentifier": "m-1"}]
    }
    receiver.status = 200
    assert worker.handle({"Records": [record]}) == {"batchItemFailures": []}
    assert {json.loads(b)["run_id"] for _, _, b in receiver.requests} == {sent["run_id"]}


async def test_loopback_is_refused_unless_allowed(receiver):
    assert not await send_callback(_target(receiver, allow_private=False), {"run_id": "r"})
    assert receiver.requests == []


async def test_a_host_off_the_list_and_plain_http_are_refused(receiver):
    assert not await send_callback(_target(receiver, hosts=("example.org",)), {"run_id": "r"})
    plain = receiver.url.replace("https://", "http://")
    assert not await send_callback(_target(receiver, url=plain), {"run_id": "r"})
    assert receiver.requests == []


async def test_a_redirect_is_not_followed(receiver):
    receiver.status, receiver.location = 302, "https://localhost:1/elsewhere"
    assert not await send_callback(_target(receiver), {"run_id": "r"})
    assert len(receiver.requests) == 1


async def test_a_receiver_that_hangs_costs_the_timeout_only(receiver):
    receiver.hang = True
    assert not await send_callback(_target(receiver, timeout_s=0.5), {"run_id": "r"})
    receiver.release.set()


async def test_the_connection_goes_to_the_address_that_was_checked(receiver):
    """DNS rebinding: the host's name is resolved once, and the connection goes to that
    address with the name in `Host` and in TLS's SNI (the certificate is checked against the
    name). A second resolution, which would now answer another address, never happens; and
    `callback.example` exists for no resolver but this test's, so a client that resolved the
    name again could not connect at all."""
    answers = [["127.0.0.1"], ["10.20.30.40"]]
    asked: list[tuple[str, int]] = []

    async def rebinding(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return answers[min(len(asked), len(answers)) - 1]

    target = _target(
        receiver,
        url=f"https://callback.example:{receiver.port}/hook?x=1",
        hosts=("callback.example",),
        resolver=rebinding,
    )
    assert await send_callback(target, {"run_id": "r"})
    assert asked == [("callback.example", receiver.port)]
    ((path, headers, body),) = receiver.requests
    assert path == "/hook?x=1" and headers["Host"] == f"callback.example:{receiver.port}"
    _verify(headers, body)


async def test_a_host_with_any_private_address_is_refused_before_connecting(receiver):
    async def mixed(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "127.0.0.1"]

    target = _target(receiver, allow_private=False, resolver=mixed)
    assert not await send_callback(target, {"run_id": "r"})
    assert receiver.requests == []

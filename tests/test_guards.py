"""The suite's own guards (tests/conftest.py) hold in every test: nothing leaves loopback, and
a unit test starts no server and no subprocess (those are integration tests)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest
import uvloop

from tests.conftest import NetworkBlocked


def test_a_test_cannot_resolve_or_reach_a_host_off_loopback():
    with pytest.raises(NetworkBlocked, match="tests stay on loopback"):
        socket.getaddrinfo("generativelanguage.googleapis.com", 443)
    with socket.socket() as sock, pytest.raises(NetworkBlocked, match="tests stay on loopback"):
        sock.connect(("8.8.8.8", 53))


def test_a_unit_test_cannot_listen_start_a_subprocess_or_a_uvloop_loop():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(AssertionError, match="listens on a socket: mark it integration"):
            sock.listen()
    with pytest.raises(AssertionError, match="starts a subprocess: mark it integration"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    # uvicorn's loop: its servers listen in C, where `socket.listen` is not called.
    with pytest.raises(AssertionError, match=r"uvloop loop .* mark it integration"):
        uvloop.new_event_loop()


@pytest.mark.integration
def test_an_integration_test_may_serve_on_loopback():
    loop = uvloop.new_event_loop()
    try:
        server = loop.run_until_complete(
            loop.create_server(asyncio.Protocol, "127.0.0.1", 0, backlog=128)
        )
        server.close()
        loop.run_until_complete(server.wait_closed())
    finally:
        loop.close()

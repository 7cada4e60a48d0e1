"""The command line: tokens from the dev issuer verify through the server's code path."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from aircoach.auth.tokens import build_verifier
from aircoach.settings import ROOT


@pytest.mark.integration
def test_token_command_prints_a_verifiable_token(settings):
    env = {"PATH": "/usr/bin:/bin", "DATA_DIR": str(settings.data_dir)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "aircoach",
            "token",
            "--sub",
            "cli-user",
            "--permission",
            "admin:docs",
            "--ttl",
            "60",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    principal = asyncio.run(build_verifier(settings).verify(out.stdout.strip()))
    assert principal.sub == "cli-user" and "admin:docs" in principal.permissions
    assert principal.claims["exp"] - principal.claims["iat"] == 60


def test_seed_contacts_loads_the_demo_contacts(monkeypatch, data_dir, capsys):
    from aircoach.__main__ import main
    from aircoach.settings import Settings
    from aircoach.store import build_task_stores
    from aircoach.tasks.contacts import demo_contacts

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)  # no stray .env
    main(["seed-contacts"])
    main(["seed-contacts"])  # idempotent
    assert capsys.readouterr().out.count(f"{len(demo_contacts())} demo contacts loaded") == 2
    contacts = build_task_stores(Settings(_env_file=None, data_dir=data_dir)).contacts
    found = asyncio.run(contacts.find_contact("domain:aeroclubmilano.it"))
    assert found is not None and found.name == "Aero Club Milano"

"""The command line: tokens from the dev issuer verify through the server's code path."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from aircoach.services import build_verifier
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
    from aircoach.services import build_task_stores
    from aircoach.settings import Settings
    from aircoach.tasks.contacts import demo_contacts

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)  # no stray .env
    main(["seed-contacts"])
    main(["seed-contacts"])  # idempotent
    assert capsys.readouterr().out.count(f"{len(demo_contacts())} demo contacts loaded") == 2
    contacts = build_task_stores(Settings(_env_file=None, data_dir=data_dir)).contacts
    found = asyncio.run(contacts.find_contact("domain:aeroclubmilano.it"))
    assert found is not None and found.name == "Aero Club Milano"


@pytest.mark.integration
def test_the_installed_command_works_from_any_directory(tmp_path, data_dir, settings):
    """`make` installs the package editable: `aircoach` is on the venv's PATH and finds its
    docs and data dir from its own location, whatever the working directory."""
    command = Path(sys.executable).parent / "aircoach"
    assert command.exists(), "make did not install the package into the venv"
    env = {"PATH": "/usr/bin:/bin", "DATA_DIR": str(data_dir)}
    out = subprocess.run(
        [str(command), "token", "--sub", "anywhere"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    principal = asyncio.run(build_verifier(settings).verify(out.stdout.strip()))
    assert principal.sub == "anywhere"


def test_chat_says_in_one_line_that_nothing_listens(monkeypatch, data_dir, capsys):
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    monkeypatch.setenv("PORT", "9")  # the discard port: nothing listens there
    with pytest.raises(SystemExit) as exited:
        main(["chat"])
    message = str(exited.value.code)
    assert message == (
        "error: nothing is listening at http://127.0.0.1:9: start the server (make run) "
        "or pass --url"
    )
    with pytest.raises(SystemExit) as exited:
        main(["chat", "--url", "http://127.0.0.1:9/"])
    assert "http://127.0.0.1:9/" in str(exited.value.code)


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("TURN_TIMEOUT_S", "soon", "error: TURN_TIMEOUT_S: Input should be a valid number"),
        ("HISTORY_LIMIT", "-1", "error: HISTORY_LIMIT: Input should be greater than or equal"),
        ("CORS_ORIGINS", '["http://a', "error: CORS_ORIGINS: Value error, not a valid JSON list"),
        ("STORE", "mongodb", "error: STORE=mongodb needs MONGODB_URI"),
        ("PORT", "eighty", "error: PORT must be a port number (1-65535)"),
        ("LOG_LEVEL", "verbose", "error: LOG_LEVEL must be one of DEBUG, INFO, WARNING"),
        ("GROUNDING_WEB_CHECK", "true", "error: GROUNDING_WEB_CHECK=true needs SEARXNG_URL"),
    ],
)
def test_a_configuration_error_is_one_line_naming_the_setting(
    monkeypatch, data_dir, variable, value, line
):
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exited:
        main(["chat"])
    message = str(exited.value.code)
    assert message.startswith(line) and "\n" not in message
    assert "Traceback" not in message


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"AUTH_LEEWAY_S": "s3cr3t-value"}, "error: AUTH_LEEWAY_S:"),
        ({"AUTH0_DOMAIN": "user:s3cr3t@tenant.eu.auth0.com/x"}, "error: AUTH0_DOMAIN must"),
        ({"AUTH0_BASE_URL": "ftp://user:s3cr3t@tenant.example"}, "error: AUTH0_BASE_URL must"),
        ({"MODEL_FALLBACK": "s3cr3t"}, "error: MODEL_FALLBACK must"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318/?key=s3cr3t"},
            "error: OTEL_EXPORTER_OTLP_ENDPOINT must",
        ),
        (
            {"GROUNDING_POLICY": "withhold", "GROUNDING_REGENERATE": "true"},
            "error: GROUNDING_POLICY and GROUNDING_REGENERATE disagree",
        ),
        (
            {
                "PROMPT_BUCKET": "s3cr3t-bucket",
                "DEADLETTER_BUCKET": "s3cr3t-bucket",
                "DEADLETTER_PREFIX": "prompt_docs/s3cr3t/",
            },
            "error: DEADLETTER_PREFIX and PROMPT_PREFIX overlap",
        ),
        ({"LOG_LEVEL": "s3cr3t"}, "error: LOG_LEVEL must"),
        (
            {"MONGODB_URI": "mongodb+srv://app:s3cr3t@cluster0.example.net\n"},
            "error: MONGODB_URI must",
        ),
        ({"OPENAI_BASE_URL": "localhost:11434/s3cr3t"}, "error: OPENAI_BASE_URL must"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example",
                "OTEL_EXPORTER_OTLP_HEADERS": "Authorization: Basic s3cr3t",
            },
            "error: OTEL_EXPORTER_OTLP_HEADERS must",
        ),
        ({"PORT": "s3cr3t"}, "error: PORT must"),
    ],
)
def test_a_configuration_error_names_the_setting_never_its_value(
    monkeypatch, data_dir, settings, line
):
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        main(["chat"])
    message = str(exited.value.code)
    assert message.startswith(line) and "\n" not in message
    assert "s3cr3t" not in message and "withhold" not in message


@pytest.mark.integration
@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--token", "not-a-token"],
            "error: the server at {url} refused the token (invalid_token)",
        ),
        ([], "error: the server at {url} refused the dev issuer's token (invalid_token)"),
    ],
)
def test_chat_with_a_token_the_server_refuses_stops_with_one_line(
    monkeypatch, tmp_path, settings, argv, line
):
    """A bad --token, or a dev token minted from another DATA_DIR than the server's: every turn
    would be a 401, so chat says so once and exits non-zero instead of asking for input."""
    from aircoach.__main__ import main
    from aircoach.auth.tokens import DevIssuer
    from tests.helpers import app_with, served

    other = tmp_path / "other-data"
    other.mkdir()
    DevIssuer(other).private_key  # noqa: B018 - another key than the server's
    monkeypatch.setenv("DATA_DIR", str(other))
    monkeypatch.chdir(other)
    monkeypatch.setattr("builtins.input", lambda prompt="": pytest.fail("chat asked for input"))
    with served(app_with(settings)) as url, pytest.raises(SystemExit) as exited:
        main(["chat", "--url", url, *argv])
    message = str(exited.value.code)
    assert message.startswith(line.format(url=url)) and "\n" not in message


@pytest.mark.parametrize("value", ["70000", "0", "-1"])
def test_serve_refuses_a_port_out_of_range(monkeypatch, data_dir, capsys, value):
    """--port 70000 listened on 4464 (getaddrinfo wraps it) while the log said 70000, and
    --port 0 served on 8000: the value is checked as PORT is."""
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", value])
    assert exited.value.code == 2
    assert "argument --port: must be a port number (1-65535)" in capsys.readouterr().err


def test_serve_on_a_port_in_use_says_so_in_one_line(monkeypatch, data_dir, capsys):
    """Before: the banner ("chat with --url http://127.0.0.1:PORT", pointing at whatever holds
    the port), uvicorn's start-up lines, one ERROR log line among them, exit 3."""
    import socket

    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            main(["serve", "--port", str(port)])
    message = str(exited.value.code)
    assert message == (
        f"error: 127.0.0.1:{port} is in use: stop what listens there, or pass --port (or PORT)"
    )
    assert "Dev token issuer" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["token", "--sub", ""], "argument --sub: must not be empty"),
        (["token", "--sub", "  "], "argument --sub: must not be empty"),
        (["chat", "--sub", ""], "argument --sub: must not be empty"),
        (["token", "--sub", "x", "--ttl", "0"], "argument --ttl: must be a number of seconds > 0"),
        (["token", "--sub", "x", "--ttl", "-600"], "argument --ttl: must be a number of seconds"),
    ],
)
def test_token_refuses_values_that_make_a_token_the_server_refuses(
    monkeypatch, data_dir, capsys, argv, line
):
    """An empty --sub or a --ttl of 0 or less printed a token (exit 0) that the server then
    refused: 'Il token non ha un soggetto (sub)', or expired."""
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    monkeypatch.setenv("PORT", "9")  # chat: nothing listens there
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    assert exited.value.code == 2 and line in captured.err
    assert captured.out == ""


def test_chat_says_when_the_url_lacks_its_scheme(monkeypatch, data_dir):
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    with pytest.raises(SystemExit) as exited:
        main(["chat", "--url", "localhost:9"])
    assert (
        str(exited.value.code) == "error: --url needs its scheme: http://localhost:9 (or https://)"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--since", "yesterday"], "argument --since: must be an ISO 8601 time"),
        (["--since", ""], "argument --since: must be an ISO 8601 time"),
        # before year 1 in UTC: a traceback (an OverflowError)
        (["--since", "0001-01-01T00:00:00+01:00"], "argument --since: must be an ISO 8601 time"),
    ],
)
def test_export_reviews_refuses_a_since_that_is_not_a_time(
    monkeypatch, data_dir, capsys, argv, line
):
    """`--since yesterday` compared as text against the runs' times: it exported nothing,
    with exit 0."""
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    with pytest.raises(SystemExit) as exited:
        main(["tasks", "export-reviews", *argv])
    assert exited.value.code == 2 and line in capsys.readouterr().err


def test_export_reviews_into_a_missing_folder_is_one_line(monkeypatch, data_dir, tmp_path):
    from aircoach.__main__ import main

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    out = tmp_path / "missing" / "reviews.jsonl"
    with pytest.raises(SystemExit) as exited:
        main(["tasks", "export-reviews", "--out", str(out)])
    assert str(exited.value.code) == (
        f"error: cannot write {str(out)!r}: No such file or directory"
    )


@pytest.mark.integration
def test_chat_shows_a_refused_message_as_a_line_not_json(monkeypatch, settings, capsys):
    """Over the minute's quota: the terminal shows the code, the message the client would
    show and when to retry, as it shows a turn's error, not the response's JSON."""
    from aircoach.__main__ import main
    from tests.helpers import app_with, served

    settings = settings.model_copy(update={"quota_turns_per_minute": 1})
    monkeypatch.setenv("DATA_DIR", str(settings.data_dir))
    monkeypatch.chdir(settings.data_dir)
    said = iter(["Che cos'è il QNH?", "E il QFE?", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(said))
    with served(app_with(settings)) as url:
        main(["chat", "--url", url])
    out = capsys.readouterr().out
    (refused,) = [line for line in out.splitlines() if line.startswith("[error")]
    assert refused.startswith("[error quota_exceeded] ") and refused.endswith(" s)"), refused
    assert "{" not in refused


@pytest.mark.integration  # it waits out the store's timeout
def test_a_store_that_does_not_answer_is_one_line(monkeypatch, data_dir):
    """`seed-quiz` against a MongoDB that is not there printed 87 lines of traceback."""
    from aircoach.__main__ import main
    from tests.loopback import free_port

    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)
    monkeypatch.setenv("MONGODB_URI", f"mongodb://admin:s3cr3t@127.0.0.1:{free_port()}/x")
    monkeypatch.setenv("STORE_TIMEOUT_S", "0.3")  # nothing listens: the refusal is the point
    with pytest.raises(SystemExit) as exited:
        main(["seed-quiz"])
    message = str(exited.value.code)
    assert message.startswith("error: the mongodb store did not answer (") and "\n" not in message
    assert "MONGODB_URI" in message and "s3cr3t" not in message

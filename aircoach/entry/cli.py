"""Command line: `aircoach serve | token | chat | seed-quiz | seed-contacts | docs ...`."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
from collections.abc import Iterable
from typing import TextIO

import httpx

from aircoach.errors import StoreUnavailable
from aircoach.settings import get_settings, startup_error

DEFAULT_PORT = 8000


_NOT_A_PORT = "must be a port number (1-65535)"


def _port_number(raw: str) -> int:
    """`--port`'s value, checked as `PORT` is: getaddrinfo wraps 70000 to 4464, and 0 is any
    free port, neither of which the banner and the README's commands would find."""
    raw = raw.strip()
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise argparse.ArgumentTypeError(_NOT_A_PORT)
    return int(raw)


def _subject(raw: str) -> str:
    """`--sub`: a token without a subject is refused by the server."""
    if not raw.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return raw


def _lifetime(raw: str) -> int:
    """`--ttl`: a token of 0 seconds or less is expired when printed."""
    try:
        seconds = int(raw)
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be a number of seconds > 0")
    return seconds


def _since(raw: str) -> str:
    """`--since`: an ISO time (a date alone is its midnight UTC), as the stores compare it."""
    from aircoach.tasks.ports import utc_time

    try:
        return utc_time(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "must be an ISO 8601 time, e.g. 2026-11-01 or 2026-11-01T08:00:00+01:00"
        ) from None


def _port() -> int:
    """`PORT` (the Makefile's and the platforms' variable), else 8000."""
    raw = os.environ.get("PORT", "").strip()
    if not raw:
        return DEFAULT_PORT
    try:
        return _port_number(raw)
    except argparse.ArgumentTypeError:
        sys.exit(f"error: PORT {_NOT_A_PORT}")


def _serve(args: argparse.Namespace) -> None:
    from aircoach.startup import starting

    port = args.port if args.port is not None else _port()
    # The imports and the app, without the cyclic GC (aircoach/startup.py).
    with starting():
        from aircoach.entry.server import PortUnavailable, listen_socket, serve, url_of

        try:
            # Bound before the app is built and the banner printed: a port in use is one line.
            sock = listen_socket(args.host, port)
        except PortUnavailable as exc:
            sys.exit(f"error: {exc}")
        from aircoach.app import create_app

        settings = get_settings()
        app = create_app(settings)
    if settings.uses_dev_issuer:
        print(
            "Dev token issuer on. Get a token with:\n"
            "  TOKEN=$(.venv/bin/python -m aircoach token --sub demo-user)\n"
            "then chat with:\n"
            f"  .venv/bin/python -m aircoach chat --url {url_of(sock)}\n",
            flush=True,
        )
    serve(app, sock, receipt_timeout_s=settings.request_receipt_timeout_s)


def _dev_token(settings, sub: str, ttl: int, permissions: list[str]) -> str:
    from aircoach.auth.tokens import mint_dev_token
    from aircoach.errors import ConfigError

    try:
        return mint_dev_token(settings, sub, ttl_s=ttl, permissions=permissions)
    except ConfigError as exc:
        sys.exit(str(exc))


def _token(args: argparse.Namespace) -> None:
    print(_dev_token(get_settings(), args.sub, args.ttl, args.permission))


class _TokenRefused(Exception):
    """The server answered 401 to the chat's token: every turn would fail the same way."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


def _chat(args: argparse.Namespace) -> None:
    url = args.url or f"http://127.0.0.1:{_port()}"
    if not url.startswith(("http://", "https://")):
        sys.exit(f"error: --url needs its scheme: http://{url} (or https://)")
    token = args.token or _dev_token(get_settings(), args.sub, 3600, [])
    try:
        _converse(url, token, args.sub, raw=args.raw)
    except _TokenRefused as exc:
        if args.token:
            sys.exit(f"error: the server at {url} refused the token ({exc.code})")
        sys.exit(
            f"error: the server at {url} refused the dev issuer's token ({exc.code}): "
            "start it with the same DATA_DIR and no AUTH0_DOMAIN, or pass --token"
        )
    except httpx.ConnectError:
        sys.exit(f"error: nothing is listening at {url}: start the server (make run) or pass --url")
    except httpx.TransportError as exc:
        sys.exit(f"error: the connection to {url} failed ({type(exc).__name__})")


def _converse(url: str, token: str, sub: str, *, raw: bool = False) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=None) as client:
        client.get("/api/health", timeout=10)  # says at once when nothing listens there
        # A token the server refuses would fail every turn: say so before the first.
        probe = client.get("/api/tools", timeout=10)
        if probe.status_code == 401:
            raise _TokenRefused(_error_code(probe))
        print(f"Chatting with {url} as {sub!r}. Empty line or Ctrl-D to quit.")
        while True:
            try:
                query = input("\nyou> ").strip()
            except EOFError:
                break
            if not query:
                break
            with client.stream("POST", "/api/stream_query", json={"query": query}) as response:
                if response.status_code != 200:
                    response.read()
                    print(_refusal(response))
                    continue
                _print_turn(response.iter_lines(), raw=raw)


def _refusal(response: httpx.Response) -> str:
    """A refused message as the terminal shows a turn's error: `[error code] message`, and
    when to try again."""
    try:
        body = response.json()
        line = f"[error {body['error']}] {body['message']}"
    except (ValueError, KeyError, TypeError):
        line = f"[error HTTP {response.status_code}] {response.text[:200]}"
    if retry := response.headers.get("Retry-After"):
        line += f" (retry in {retry} s)"
    return line


def _error_code(response: httpx.Response) -> str:
    """The API's error code (`invalid_token`, ...), else the status."""
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def _print_turn(lines: Iterable[str], *, raw: bool) -> None:
    """One streamed turn as the terminal shows it: the answer as it arrives, each tool result
    as a line (or a question card), the JSON instead with `raw`."""
    from aircoach.entry.chat_view import tool_lines

    writing = False  # in the middle of the coach's text
    for line in lines:
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        if event["type"] == "agent_message":
            if not writing:
                print("coach> ", end="")
                writing = True
            print(event["content"], end="", flush=True)
            continue
        if writing:
            print()
            writing = False
        if event["type"] == "tool_result":
            print("\n".join(tool_lines(event["tool_name"], event.get("data"), raw=raw)))
        elif event["type"] == "error":
            print(f"[error {event['code']}] {event['message']}")
        elif event["type"] == "done":
            print(
                f"(turn {event['turn_id']}, prompt v{event['prompt_version']}, "
                f"{event['model']}, {event['context_turns']} earlier turns shown)"
            )


def _seed_quiz(args: argparse.Namespace) -> None:
    from aircoach.quiz.bank import seed_demo_questions
    from aircoach.services import build_stores

    _, quiz = build_stores(get_settings())

    async def seed() -> int:
        try:
            return await seed_demo_questions(quiz, only_if_empty=False)
        finally:
            # A MongoDB client must be closed inside the loop that made it.
            if aclose := getattr(quiz, "aclose", None):
                await aclose()

    written = asyncio.run(seed())
    print(f"{written} questions loaded (existing ones with the same capitolo+numero replaced)")


def _export_reviews(args: argparse.Namespace) -> None:
    from aircoach.services import build_task_stores
    from aircoach.tasks.export import as_jsonl, reviewed_examples

    runs = build_task_stores(get_settings()).runs

    async def export(out: TextIO) -> int:
        count = 0
        async for example in reviewed_examples(runs, task=args.task, since=args.since):
            out.write(as_jsonl(example) + "\n")
            count += 1
        return count

    if args.out:
        try:
            out_file = open(args.out, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            sys.exit(f"error: cannot write {args.out!r}: {exc.strerror or exc}")
        with out_file as out:
            written = asyncio.run(export(out))
    else:
        written = asyncio.run(export(sys.stdout))
    print(f"{written} reviewed runs exported", file=sys.stderr)


def _seed_contacts(args: argparse.Namespace) -> None:
    from aircoach.services import build_task_stores
    from aircoach.tasks.contacts import seed_demo_contacts

    contacts = build_task_stores(get_settings()).contacts

    async def seed() -> int:
        try:
            return await seed_demo_contacts(contacts)
        finally:
            if aclose := getattr(contacts, "aclose", None):
                await aclose()

    written = asyncio.run(seed())
    print(
        f"{written} demo contacts loaded (existing ones with the same address or domain replaced)"
    )


def _docs(args: argparse.Namespace) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    from aircoach.errors import ConfigError
    from aircoach.prompts.publish import DocsBucket, DocsCommandError
    from aircoach.services import check_docs

    try:
        settings = get_settings()
        validate = functools.partial(check_docs, python_tool_modules=settings.python_tool_modules)
        bucket = DocsBucket(settings, validate=validate)
        where = f"s3://{bucket.bucket}/{bucket.prefix}"
        if args.docs_command == "push":
            results = bucket.push(delete=args.delete)
            for r in results:
                version = f" (version {r.version_id})" if r.version_id else ""
                print(f"{r.action:>11}  {r.key}{version}")
            uploaded = sum(r.action in ("uploaded", "deleted") for r in results)
            print(f"{uploaded} change(s) pushed from {str(bucket.folder)!r} to {where}")
            if uploaded:
                print(
                    "Instances pick them up within PROMPT_TTL_S, or now via POST /api/update_docs"
                )
        elif args.docs_command == "status":
            st = bucket.status()
            print(f"local  {st.local_version or '(no docs)'}  {bucket.folder}")
            print(f"remote {st.remote_version or '(no docs)'}  {where}")
            for name, (local_task, remote_task) in st.tasks.items():
                print(f"  task {name}: local {local_task or '-'}  remote {remote_task or '-'}")
            for label, keys in (
                ("only local", st.only_local),
                ("only remote", st.only_remote),
                ("different", st.different),
                ("not the manifest's", st.unpublished),
            ):
                for key in keys:
                    print(f"  {label}: {key}")
            print("in sync" if st.in_sync else "differs: run `docs push` to publish local docs")
        elif args.docs_command == "history":
            for v in bucket.history(args.key):
                what = "delete marker" if v.delete_marker else f"etag {v.etag}  {v.size} bytes"
                latest = "latest" if v.latest else "      "
                print(f"{v.version_id}  {latest}  {v.last_modified}  {what}")
        elif args.docs_command == "rollback":
            new_id = bucket.rollback(args.key, args.version_id)
            print(f"{args.key!r} is now version {args.version_id!r} again (new version {new_id})")
    except (ConfigError, DocsCommandError, BotoCoreError, ClientError) as exc:
        sys.exit(f"error: {exc}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="aircoach", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the API server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port_number, help="default: $PORT, else 8000")
    serve.set_defaults(func=_serve)

    token = sub.add_parser("token", help="print a bearer token from the local dev issuer")
    token.add_argument("--sub", type=_subject, required=True, help="the user id (token subject)")
    token.add_argument("--ttl", type=_lifetime, default=3600, help="lifetime in seconds")
    token.add_argument("--permission", action="append", default=[], help="e.g. admin:docs")
    token.set_defaults(func=_token)

    chat = sub.add_parser("chat", help="chat with a running server in the terminal")
    chat.add_argument("--url", help="default: http://127.0.0.1:$PORT (PORT default 8000)")
    chat.add_argument("--sub", type=_subject, default="demo-user")
    chat.add_argument("--token", help="bearer token (default: mint one from the dev issuer)")
    chat.add_argument(
        "--raw", action="store_true", help="print each tool result's JSON, not a summary"
    )
    chat.set_defaults(func=_chat)

    seed = sub.add_parser(
        "seed-quiz", help="load the demo quiz questions into the configured store"
    )
    seed.set_defaults(func=_seed_quiz)

    contacts = sub.add_parser(
        "seed-contacts", help="load the demo contacts (customer status of the e-mail triage)"
    )
    contacts.set_defaults(func=_seed_contacts)

    tasks = sub.add_parser("tasks", help="structured tasks: export the reviewers' verdicts")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    export = tasks_sub.add_parser(
        "export-reviews", help="the confirmed and corrected runs as JSON lines (an eval set)"
    )
    export.add_argument("--task", default=None)
    export.add_argument("--since", type=_since, default=None, help="ISO time: runs created since")
    export.add_argument("--out", default=None, help="a file (default: standard output)")
    export.set_defaults(func=_export_reviews)

    docs = sub.add_parser("docs", help="manage the prompt docs in the S3 bucket (PROMPT_BUCKET)")
    docs.set_defaults(func=_docs)
    docs_sub = docs.add_subparsers(dest="docs_command", required=True)
    push = docs_sub.add_parser("push", help="upload changed files of prompt_docs/ (MD5 vs ETag)")
    push.add_argument(
        "--delete", action="store_true", help="also delete remote docs missing locally"
    )
    docs_sub.add_parser("status", help="local prompt version vs remote prompt version")
    history = docs_sub.add_parser("history", help="the object versions of one doc")
    history.add_argument("key", help="the doc's key relative to PROMPT_PREFIX, e.g. 00_ruolo.md")
    rollback = docs_sub.add_parser("rollback", help="make an earlier version the latest again")
    rollback.add_argument("key")
    rollback.add_argument("version_id", help="from `docs history KEY`")

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except StoreUnavailable as exc:  # an unreachable database: one line, not 87 of traceback
        cause = type(exc.__cause__ or exc).__name__
        sys.exit(
            f"error: the {get_settings().store_kind} store did not answer ({cause}): check "
            "MONGODB_URI (or SQLITE_PATH) and that the database is reachable"
        )
    except Exception as exc:
        # A configuration error is one line naming the setting, not a traceback.
        line = startup_error(exc)
        if line is None:
            raise
        sys.exit(f"error: {line}")


if __name__ == "__main__":
    main()

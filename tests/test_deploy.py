"""The deploy files ship exactly the app and configure everything: Vercel's ignore rules, the
Lambda bundle's check, and serverless.yml's environment against the settings model."""

from __future__ import annotations

import json
import re
import shutil
import zipfile

import pathspec

from aircoach.settings import ROOT, Settings
from deploy import bundle, vercel_build
from tests.helpers import load_serverless_yml

# What a developer's work tree holds that must never reach a deploy.
LOCAL = [
    ".env",
    ".env.local",
    ".env.production",
    ".aircoach/dev_issuer_key.pem",
    ".aircoach/aircoach.sqlite3",
    ".aircoach/deadletter/18ea.json",
    ".venv/lib/python3.11/site-packages/fastapi/__init__.py",
    "tests/conftest.py",
    "bench/bench_bundle.py",
    "aircoach/__pycache__/app.cpython-311.pyc",
    ".pytest_cache/v/cache/nodeids",
    ".mypy_cache/3.11/aircoach/app.data.json",
    ".ruff_cache/content",
    "node_modules/serverless/package.json",
    "dist/aircoach-lambda.zip",
    "deploy/bundle.py",
    "aircoach/.env",
]
# What the Vercel function needs.
APP = [
    "api/index.py",
    "aircoach/app.py",
    "aircoach/turn/turn.py",
    "aircoach/data/quiz_questions.json",
    "aircoach/playground/static/index.html",
    "prompt_docs/tools.json",
    "prompt_docs/00_ruolo.md",
    "requirements.txt",
    "vercel.json",
]


def _gitignore(lines: list[str]) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(lines)


def test_vercel_uploads_the_app_and_nothing_local():
    ignore = _gitignore((ROOT / ".vercelignore").read_text().splitlines())
    assert [path for path in LOCAL if not ignore.match_file(path)] == []
    assert [path for path in APP if ignore.match_file(path)] == []
    # pyproject.toml stays local too: Vercel would install from it instead of requirements.txt.
    assert ignore.match_file("pyproject.toml")


def test_the_vercel_function_excludes_local_files_too():
    config = json.loads((ROOT / "vercel.json").read_text())
    function = config["functions"]["api/index.py"]
    patterns = re.fullmatch(r"\{(.*)\}", function["excludeFiles"])[1].split(",")
    excluded = _gitignore(patterns)
    inside_the_function = [p for p in LOCAL if not p.startswith(("deploy/", "dist/"))]
    assert [path for path in inside_the_function if not excluded.match_file(path)] == []
    assert [path for path in APP if excluded.match_file(path)] == []


def test_the_vercel_function_includes_every_data_file_of_the_package():
    """Vercel bundles the Python modules an import reaches; every other file of the package
    (the quiz bank, the playground's page) must be named in `includeFiles`."""
    config = json.loads((ROOT / "vercel.json").read_text())
    patterns = re.fullmatch(r"\{(.*)\}", config["functions"]["api/index.py"]["includeFiles"])[1]
    included = _gitignore(patterns.split(","))
    data = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "aircoach").rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc")
    ]
    assert "aircoach/playground/static/app.js" in data
    assert [path for path in data if not included.match_file(path)] == []


def test_git_ignores_local_files_but_not_the_example():
    ignore = _gitignore((ROOT / ".gitignore").read_text().splitlines())
    for path in (".env", ".env.local", "node_modules/x/package.json", "dist/aircoach-lambda.zip"):
        assert ignore.match_file(path), path
    assert not ignore.match_file(".env.example")


# --- serverless.yml ---------------------------------------------------------------------------

# Settings deliberately not passed to Lambda, and why.
NOT_ON_LAMBDA = {
    "DATA_DIR": "only /tmp is writable there, and /tmp/aircoach is the default",
    "PROMPT_DOCS_DIR": "the docs folder in the zip is the default; production docs are on S3",
    "AWS_REGION": "reserved: the Lambda runtime sets it, a function may not",
    "AWS_ENDPOINT_URL": "S3 emulators (MinIO, LocalStack, moto) on a laptop only",
    "REQUEST_RECEIPT_TIMEOUT_S": "the Web Adapter sends each request whole over loopback",
}


def _serverless() -> dict:
    return load_serverless_yml()


def _tools_json_variables() -> set[str]:
    return set(re.findall(r"\$\{([A-Z0-9_]+)\}", (ROOT / "prompt_docs" / "tools.json").read_text()))


def test_every_setting_reaches_lambda():
    """A setting added to the model (or a variable to the shipped tools.json) and not to
    serverless.yml fails here, and so does one passed that nothing reads."""
    settings = {name.upper() for name in Settings.model_fields} - {"TOOL_ENV"}
    aliases = {"GEMINI_API_KEY"}  # GOOGLE_API_KEY's alias: a user may set only that one
    expected = (settings | aliases | _tools_json_variables()) - set(NOT_ON_LAMBDA)
    environment = set(_serverless()["provider"]["environment"])
    assert sorted(expected - environment) == [], "missing from serverless.yml"
    assert sorted(environment - expected) == [], "passed but not a setting"


def test_optional_settings_default_to_empty_so_the_app_default_applies():
    environment = _serverless()["provider"]["environment"]
    required = {"AUTH0_DOMAIN", "PROMPT_BUCKET"}  # a deploy without them fails to resolve
    for name, value in environment.items():
        expected = f"${{env:{name}}}" if name in required else f"${{env:{name}, ''}}"
        assert value == expected, name


def test_lambda_ships_the_checked_bundle():
    config = _serverless()
    assert ROOT / config["package"]["artifact"] == bundle.ZIP
    assert "plugins" not in config  # nothing repackages the work tree
    assert config["provider"]["runtime"] == f"python{bundle.PYTHON_VERSION}"
    assert config["provider"]["architecture"] == "x86_64"  # the manylinux x86_64 wheels
    stream = config["functions"]["stream"]
    assert stream["handler"] in bundle.ENTRY_SCRIPTS
    assert stream["url"]["invokeMode"] == "RESPONSE_STREAM"
    assert stream["environment"]["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    gateway = config["custom"]["apiGateway"]["true"]
    assert gateway["handler"] == "functions/chat.handler"
    assert (
        config["functions"]["api"] == "${self:custom.apiGateway.${env:API_GATEWAY, 'false'}, null}"
    )


def test_the_gateway_function_fits_its_turns_in_the_gateway_timeout():
    gateway = _serverless()["custom"]["apiGateway"]["true"]
    turn = float(gateway["environment"]["TURN_TIMEOUT_S"])
    defaults = Settings(_env_file=None)
    assert turn == 25 and turn + defaults.store_timeout_s <= 30
    assert defaults.turn_timeout_s == 45  # everywhere else


def test_run_sh_starts_the_app_with_python3_on_port():
    script = (ROOT / "deploy" / "run.sh").read_text()
    assert script.startswith("#!/bin/sh\n")
    command = script.strip().splitlines()[-1]
    assert command == 'exec python3 -m aircoach serve --host 127.0.0.1 --port "${PORT:-8080}"'
    environment = _serverless()["functions"]["stream"]["environment"]
    assert environment["PORT"] == environment["AWS_LWA_PORT"]
    assert environment["AWS_LWA_READINESS_CHECK_PATH"] == "/api/health"


def test_function_timeouts_leave_room_for_the_turn_cap_and_the_store():
    defaults = Settings(_env_file=None)
    needed = defaults.turn_timeout_s + defaults.store_timeout_s
    assert _serverless()["provider"]["timeout"] > needed
    vercel = json.loads((ROOT / "vercel.json").read_text())
    assert vercel["functions"]["api/index.py"]["maxDuration"] > needed


def test_the_deploy_tool_is_pinned():
    package = json.loads((ROOT / "package.json").read_text())
    version = package["devDependencies"]["serverless"]
    assert re.fullmatch(r"3\.\d+\.\d+", version)  # exact, v3 (v4 needs a login)
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/serverless"]["version"] == version
    vercel = package["devDependencies"]["vercel"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", vercel)  # exact
    assert lock["packages"]["node_modules/vercel"]["version"] == vercel


# --- the bundle check -------------------------------------------------------------------------


def test_the_bundle_check_accepts_the_app_and_installed_files_only():
    recorded = {"fastapi/__init__.py", "fastapi-0.1.dist-info/RECORD", "google/genai/tests/t.py"}
    clean = ["aircoach/app.py", "functions/chat.py", "prompt_docs/tools.json", *sorted(recorded)]
    assert bundle.problems(clean, recorded) == []
    local = [
        ".env",
        "aircoach/.env.local",
        ".aircoach/aircoach.sqlite3",
        "aircoach/dev_issuer_key.pem",
        "aircoach/__pycache__/app.cpython-311.pyc",
        "tests/conftest.py",
        "bench/bench_bundle.py",
        "node_modules/x/index.js",
        "notes.txt",
        "boto3/__init__.py",
    ]
    found = bundle.problems(local, recorded)
    assert [line.split(":")[0] for line in found] == local
    assert "boto3/__init__.py: provided by the Lambda runtime" in found
    assert ".env: a local file" in found
    assert "notes.txt: neither the app's nor an installed distribution's" in found


def test_the_bundle_ships_bytecode_for_the_runtime_beside_each_module_and_no_other():
    recorded = {"fastapi/__init__.py"}
    compiled = [
        "aircoach/app.py",
        "aircoach/__pycache__/app.cpython-312.pyc",
        "fastapi/__init__.py",
        "fastapi/__pycache__/__init__.cpython-312.pyc",
    ]
    assert bundle.problems(compiled, recorded) == []
    assert bundle.uncompiled(compiled) == []
    stray = [
        "aircoach/__pycache__/app.cpython-311.pyc",  # the host's Python: useless on Lambda
        "aircoach/__pycache__/gone.cpython-312.pyc",  # its module is not in the zip
        "aircoach/app.cpython-312.pyc",  # not in __pycache__
    ]
    found = bundle.problems(["aircoach/app.py", *stray], recorded)
    assert [line.split(":")[0] for line in found] == stray
    assert bundle.uncompiled(["aircoach/app.py", "aircoach/other.py", *compiled[2:]]) == [
        "aircoach/app.py",
        "aircoach/other.py",
    ]


def test_the_bundle_check_wants_an_executable_entry_script():
    def info(name: str, mode: int) -> zipfile.ZipInfo:
        entry = zipfile.ZipInfo(name)
        entry.external_attr = mode << 16
        return entry

    assert bundle.entry_problems([info("run.sh", 0o100755)]) == []
    assert bundle.entry_problems([info("run.sh", 0o100644)]) == [
        "run.sh: not executable (mode 644)"
    ]
    assert bundle.entry_problems([info("functions/chat.py", 0o100644)]) == [
        "run.sh: missing (the streaming function's handler)"
    ]
    assert bundle.problems(["run.sh", "tools/run.sh"], set()) == [
        "tools/run.sh: neither the app's nor an installed distribution's"
    ]


def test_vercel_staging_copies_what_vercel_deploy_uploads_and_nothing_local(tmp_path):
    source = tmp_path / "tree"
    for path in [*LOCAL, *APP, "pyproject.toml", "uv.lock", "build/lib/aircoach/app.py"]:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(path)
    shutil.copy2(ROOT / ".vercelignore", source / ".vercelignore")

    staged = vercel_build.stage(tmp_path / "staging", source=source)

    copied = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    assert copied == sorted(APP)
    assert (staged / "aircoach" / "app.py").read_text() == "aircoach/app.py"


def test_the_bundle_leaves_out_what_the_lambda_runtime_provides():
    requirements = bundle._runtime_requirements()
    assert "fastapi" in requirements and "mangum" in requirements
    assert not re.search(r"^boto3", requirements, re.MULTILINE)


def test_the_function_url_cors_lets_through_what_the_app_does(app):
    """Lambda answers the Function URL's preflight itself, so its CORS must allow every
    header a client of docs/http.md sends (`Last-Event-ID` to rejoin a turn with `fetch`) and
    expose what the app's own CORS exposes (`Warning`, the AI SDK stream's header)."""
    from starlette.middleware.cors import CORSMiddleware

    extensions = load_serverless_yml()["resources"]["extensions"]
    cors = extensions["StreamLambdaFunctionUrl"]["Properties"]["Cors"]
    sent = {
        "authorization",
        "content-type",
        "accept-language",
        "idempotency-key",
        "x-request-id",
        "last-event-id",
    }
    assert sent <= set(cors["AllowHeaders"])
    (middleware,) = [m for m in app.user_middleware if m.cls is CORSMiddleware]
    exposed = {name.lower() for name in middleware.kwargs["expose_headers"]}
    assert set(cors["ExposeHeaders"]) == exposed

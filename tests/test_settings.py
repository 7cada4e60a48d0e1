"""Settings: embedded defaults, and the local stand-ins (dev issuer, offline model, SQLite in
/tmp) refused on Lambda/Vercel unless chosen explicitly."""

from __future__ import annotations

import traceback

import pytest

from aircoach.errors import ConfigError
from aircoach.settings import ROOT, Settings, get_settings


def test_embedded_defaults_need_no_environment(tmp_path):
    s = Settings(_env_file=None, data_dir=tmp_path)
    assert s.uses_dev_issuer and s.resolved_model_provider == "offline"
    assert s.sqlite_file == tmp_path / "aircoach.sqlite3"
    assert (s.history_limit, s.memory_max_threads, s.prompt_ttl_s) == (10, 1000, 60.0)


SERVERLESS = ["AWS_LAMBDA_FUNCTION_NAME", "VERCEL"]


def _production(monkeypatch: pytest.MonkeyPatch, variable: str, **settings: str) -> None:
    """A Lambda or Vercel environment with everything it needs, plus `settings`."""
    monkeypatch.setenv(variable, "1")
    env = {
        "AUTH0_DOMAIN": "tenant.eu.auth0.com",
        "GOOGLE_API_KEY": "k",
        "MONGODB_URI": "mongodb://db.example:27017",
        **settings,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("variable", SERVERLESS)
def test_dev_issuer_is_refused_on_serverless(monkeypatch, variable):
    _production(monkeypatch, variable, AUTH0_DOMAIN="")
    with pytest.raises(ConfigError, match=r"^AUTH0_DOMAIN is not set"):
        Settings(_env_file=None)
    monkeypatch.setenv("AUTH0_DOMAIN", "tenant.eu.auth0.com")
    assert not Settings(_env_file=None).uses_dev_issuer


@pytest.mark.parametrize("variable", SERVERLESS)
def test_no_model_is_refused_on_serverless_unless_offline_is_chosen(monkeypatch, variable):
    _production(monkeypatch, variable, GOOGLE_API_KEY="")
    with pytest.raises(ConfigError, match="MODEL_PROVIDER=offline") as refused:
        Settings(_env_file=None)
    assert "\n" not in str(refused.value)  # one line, naming the setting
    monkeypatch.setenv("MODEL_PROVIDER", "offline")
    assert Settings(_env_file=None).resolved_model_provider == "offline"
    monkeypatch.setenv("MODEL_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert Settings(_env_file=None).resolved_model_provider == "openai"


@pytest.mark.parametrize("variable", SERVERLESS)
def test_no_mongodb_is_refused_on_serverless_unless_sqlite_is_chosen(monkeypatch, variable):
    _production(monkeypatch, variable, MONGODB_URI="")
    with pytest.raises(ConfigError, match=r"^MONGODB_URI is not set.*STORE=sqlite"):
        Settings(_env_file=None)
    monkeypatch.setenv("STORE", "sqlite")
    assert Settings(_env_file=None).store_kind == "sqlite"


def test_locally_nothing_is_required(monkeypatch):
    settings = Settings(_env_file=None)
    assert settings.store is None and settings.store_kind == "sqlite"
    assert settings.resolved_model_provider == "offline" and settings.uses_dev_issuer
    assert settings.resolved_log_format == "text"
    monkeypatch.setenv("MONGODB_URI", "mongodb://127.0.0.1:1")
    assert Settings(_env_file=None).store_kind == "mongodb"


def test_an_explicit_store_must_agree_with_mongodb_uri(monkeypatch):
    monkeypatch.setenv("STORE", "mongodb")
    with pytest.raises(ConfigError, match="STORE=mongodb needs MONGODB_URI"):
        Settings(_env_file=None)
    monkeypatch.setenv("STORE", "sqlite")
    monkeypatch.setenv("MONGODB_URI", "mongodb://127.0.0.1:1")
    with pytest.raises(ConfigError, match="STORE=sqlite but MONGODB_URI is set"):
        Settings(_env_file=None)


@pytest.mark.parametrize("variable", SERVERLESS)
def test_serverless_reads_no_dotenv_and_logs_json(monkeypatch, tmp_path, variable):
    """A `.env` shipped by mistake must not fill in what the platform left unset."""
    dotenv = tmp_path / ".env"
    dotenv.write_text("MONGODB_URI=mongodb://laptop:27017\nHISTORY_LIMIT=3\nTOOL_X=local\n")
    _production(monkeypatch, variable, MONGODB_URI="", STORE="sqlite")
    monkeypatch.setenv("KB_SEARCH_URL", "http://kb.internal")
    settings = Settings(_env_file=dotenv)
    assert settings.mongodb_uri is None and settings.history_limit == 10
    assert settings.tool_env == {"KB_SEARCH_URL": "http://kb.internal"}
    assert settings.resolved_log_format == "json"
    assert Settings(_env_file=dotenv, log_format="text").resolved_log_format == "text"


@pytest.mark.parametrize(
    ("prompt_prefix", "deadletter_prefix"),
    [("prompt_docs/", "prompt_docs/deadletter/"), ("", "deadletter/"), ("docs/", "docs")],
)
def test_dead_letters_may_not_share_the_docs_folder(prompt_prefix, deadletter_prefix):
    with pytest.raises(ConfigError, match=r"DEADLETTER_PREFIX and PROMPT_PREFIX overlap"):
        Settings(
            _env_file=None,
            prompt_bucket="b",
            prompt_prefix=prompt_prefix,
            deadletter_bucket="b",
            deadletter_prefix=deadletter_prefix,
        )


def test_dead_letters_beside_the_docs_or_in_another_bucket_are_fine():
    beside = Settings(_env_file=None, prompt_bucket="b", deadletter_bucket="b")
    assert (beside.prompt_prefix, beside.deadletter_prefix) == ("prompt_docs/", "deadletter/")
    other = Settings(_env_file=None, prompt_bucket="b", prompt_prefix="", deadletter_bucket="c")
    assert other.deadletter_bucket == "c"


def test_deadletter_prefix_is_a_folder():
    assert Settings(_env_file=None, deadletter_prefix="/spool").deadletter_prefix == "spool/"
    with pytest.raises(ConfigError, match="DEADLETTER_PREFIX"):
        Settings(_env_file=None, deadletter_prefix="/")


def test_gemini_is_chosen_when_a_key_is_present(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    assert Settings(_env_file=None).resolved_model_provider == "gemini"


def test_bad_values_name_the_setting(monkeypatch):
    monkeypatch.setenv("HISTORY_LIMIT", "-1")
    with pytest.raises(ValueError, match="history_limit"):
        Settings(_env_file=None)


@pytest.mark.parametrize(("given", "level"), [("debug", "DEBUG"), (" Warn ", "WARNING")])
def test_log_level_takes_a_logging_level_in_any_case(monkeypatch, given, level):
    monkeypatch.setenv("LOG_LEVEL", given)
    assert Settings(_env_file=None).log_level == level


def test_an_unknown_log_level_is_a_configuration_error(monkeypatch):
    monkeypatch.setenv("LOG_LEVEL", "verbose")
    with pytest.raises(ConfigError, match=r"^LOG_LEVEL must be one of DEBUG, INFO, WARNING"):
        Settings(_env_file=None)


def test_the_web_check_needs_its_search_service(monkeypatch):
    monkeypatch.setenv("GROUNDING_WEB_CHECK", "true")
    monkeypatch.delenv("SEARXNG_URL", raising=False)
    with pytest.raises(ConfigError, match=r"^GROUNDING_WEB_CHECK=true needs SEARXNG_URL"):
        Settings(_env_file=None)
    monkeypatch.setenv("SEARXNG_URL", "http://127.0.0.1:8888")
    assert Settings(_env_file=None).grounding_web_check


def test_env_example_documents_every_setting():
    documented = (ROOT / ".env.example").read_text()
    variables = [name.upper() for name in Settings.model_fields if name != "tool_env"]
    assert [name for name in variables if f"# {name}=" not in documented] == []
    assert "# TOOL_" in documented  # the variables tools.json may name


def test_gemini_api_key_is_an_alias_of_google_api_key(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    settings = Settings(_env_file=None)
    assert settings.google_api_key == "k" and settings.resolved_model_provider == "gemini"


def test_an_empty_variable_means_unset(monkeypatch):
    """serverless.yml passes `${env:X, ''}` for every setting it forwards."""
    for name in ("MONGODB_URI", "AUTH0_DOMAIN", "MODEL_PROVIDER", "HISTORY_LIMIT"):
        monkeypatch.setenv(name, "")
    settings = Settings(_env_file=None)
    assert settings.mongodb_uri is None and settings.uses_dev_issuer
    assert settings.resolved_model_provider == "offline" and settings.history_limit == 10


def test_a_dotenv_fills_what_the_environment_leaves_unset(monkeypatch, tmp_path):
    """Read when it holds a value (a `.env` that is missing or empty is not a source at all:
    walking every field for it was 40 % of building the settings)."""
    monkeypatch.delenv("HISTORY_LIMIT", raising=False)
    dotenv = tmp_path / ".env"
    dotenv.write_text("HISTORY_LIMIT=3\n")
    assert Settings(_env_file=dotenv).history_limit == 3
    monkeypatch.setenv("HISTORY_LIMIT", "5")  # the environment wins
    assert Settings(_env_file=dotenv).history_limit == 5
    dotenv.write_text("")
    assert Settings(_env_file=dotenv).history_limit == 5
    monkeypatch.delenv("HISTORY_LIMIT")
    assert Settings(_env_file=tmp_path / "missing.env").history_limit == 10


def test_tool_variables_come_from_the_environment_and_dotenv(monkeypatch, tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "KB_SEARCH_URL=http://kb.local\nTOOL_METEO_KEY=from-file\n"
        "LEX_SEARCH_URL=http://lex.file\nUPDATE_DOCS_SECRET=not-for-tools\n"
    )
    monkeypatch.setenv("LEX_SEARCH_URL", "http://lex.env")  # the environment wins, as always
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-for-tools")
    monkeypatch.delenv("SEARXNG_URL", raising=False)
    env = Settings(_env_file=dotenv).tool_env
    assert env["KB_SEARCH_URL"] == "http://kb.local" and env["TOOL_METEO_KEY"] == "from-file"
    assert env["LEX_SEARCH_URL"] == "http://lex.env"
    assert "SEARXNG_URL" not in env
    assert not {"UPDATE_DOCS_SECRET", "AWS_SECRET_ACCESS_KEY"} & set(env)


async def test_a_tool_url_set_only_in_dotenv_makes_the_tool_available(tmp_path, data_dir):
    """The bug: `${KB_SEARCH_URL}` in tools.json was read from os.environ only."""
    from aircoach.services import Services

    dotenv = tmp_path / ".env"
    dotenv.write_text("KB_SEARCH_URL=http://127.0.0.1:9/kb\n")
    services = Services.build(Settings(_env_file=dotenv, data_dir=data_dir))
    registry = services.tools_for(await services.prompts.current())
    assert registry.available(registry.specs["kb_search"])
    assert not registry.available(registry.specs["lex_search"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://a.example", ["http://a.example"]),
        ("http://a.example, https://b.example,", ["http://a.example", "https://b.example"]),
        ('["http://a.example","https://b.example"]', ["http://a.example", "https://b.example"]),
        ("*", ["*"]),
    ],
)
def test_list_settings_take_json_or_comma_separated_values(monkeypatch, value, expected):
    monkeypatch.setenv("CORS_ORIGINS", value)
    monkeypatch.setenv("USER_DATA_FIELDS", value)
    settings = Settings(_env_file=None)
    assert settings.cors_origins == expected and settings.user_data_fields == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TURN_TIMEOUT_S", "inf"),
        ("MODEL_TIMEOUT_S", "Infinity"),
        ("STORE_TIMEOUT_S", "nan"),
        ("AUTH_LEEWAY_S", "-30"),
    ],
)
def test_a_deadline_without_end_or_a_negative_leeway_stops_the_start(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=rf"^{name}"):
        get_settings()


def test_python_tool_modules_take_comma_separated_packages(monkeypatch):
    monkeypatch.setenv("PYTHON_TOOL_MODULES", "aircoach, my_tools")
    assert Settings(_env_file=None).python_tool_modules == ("aircoach", "my_tools")


def test_an_entry_that_fails_on_its_settings_logs_no_value(monkeypatch):
    """Lambda and Vercel log the traceback of a failed start: it names the setting, and
    neither its message nor its chain quotes the value (which may be a secret)."""
    monkeypatch.setenv("AUTH_LEEWAY_S", "s3cr3t-value")
    with pytest.raises(ConfigError) as raised:
        get_settings()
    printed = "".join(traceback.format_exception(raised.value))
    assert "AUTH_LEEWAY_S" in str(raised.value)
    assert "s3cr3t-value" not in printed


def test_the_docs_webhook_and_the_task_callback_may_not_share_a_secret():
    """Both sign `"{timestamp}.{body}"`: with one secret, the headers of a callback its
    receiver got sign a docs reload too (whose response holds the system prompt)."""
    from aircoach.auth import webhook
    from aircoach.tasks import callback

    secret, timestamp, body = "s3cret-shared", "1700000000", b'{"run_id": "r1"}'
    sent = callback.sign(secret, timestamp, body)
    webhook.verify(secret, timestamp, sent, body, max_skew_s=300, now=1700000000)  # the hazard
    with pytest.raises(ConfigError, match="UPDATE_DOCS_SECRET and TASK_CALLBACK_SECRET") as info:
        Settings(_env_file=None, update_docs_secret=secret, task_callback_secret=secret)
    assert secret not in str(info.value)
    apart = Settings(_env_file=None, update_docs_secret="a" * 32, task_callback_secret="b" * 32)
    assert apart.update_docs_secret != apart.task_callback_secret


SECRETS = {
    "mongodb_uri": "mongodb://app:s3cr3t-pw@db.example:27017",
    "google_api_key": "s3cr3t-google",
    "openai_api_key": "s3cr3t-openai",
    "auth0_mgmt_client_secret": "s3cr3t-mgmt",
    "update_docs_secret": "s3cr3t-webhook",
    "task_callback_secret": "s3cr3t-callback",
    "otel_exporter_otlp_headers": "authorization=Basic s3cr3t-otel",
}


def test_repr_of_the_settings_shows_no_secret():
    """A traceback with locals, a debugger or a `log.debug("%r", settings)` prints the repr:
    it showed the MongoDB password, both model keys and every signing secret."""
    settings = Settings(
        _env_file=None,
        auth0_domain="tenant.eu.auth0.com",
        auth0_mgmt_client_id="client-id",
        otel_exporter_otlp_endpoint="https://collector.example",
        **SECRETS,
    )
    assert settings.mongodb_uri == SECRETS["mongodb_uri"]  # still there for the code
    shown = repr(settings) + str(settings)
    assert [name for name, value in SECRETS.items() if value in shown] == []
    assert "mongodb_db='aircoach'" in shown  # what is not secret is still shown
    # A secret added later is kept out of the repr too.
    secret_like = ("_secret", "_key", "_uri", "_headers")
    shown_secrets = [
        name
        for name, field in Settings.model_fields.items()
        if name.endswith(secret_like) and field.repr
    ]
    assert shown_secrets == []


@pytest.mark.parametrize(
    "headers",
    [
        "Authorization: Basic s3cr3t-otel",  # a colon for the `=`
        "authorization=Basic s3cr3t-otel,x-langfuse",  # a second entry without a value
        'authorization="Basic s3cr3t-otel"',  # quoted
    ],
)
def test_malformed_otlp_headers_stop_the_start_without_showing_them(monkeypatch, headers):
    """They were parsed when telemetry was built: the OTel SDK logged a warning quoting the
    entry (a collector's key), dropped it, and every export was then refused (401)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
    with pytest.raises(ConfigError) as refused:
        get_settings()
    line = str(refused.value)
    assert line.startswith("OTEL_EXPORTER_OTLP_HEADERS must be") and "\n" not in line
    assert "s3cr3t" not in "".join(traceback.format_exception(refused.value))


@pytest.mark.parametrize(
    "headers",
    [
        "Authorization=Basic%20cGs6c2s=",
        "authorization=Basic cGs6c2s=, x-langfuse-ingestion-version=4",
    ],
)
def test_otlp_headers_take_name_value_pairs(monkeypatch, headers):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
    assert get_settings().otel_exporter_otlp_headers == headers


def test_otlp_headers_without_the_endpoint_stop_the_start(monkeypatch):
    """Headers without OTEL_EXPORTER_OTLP_ENDPOINT (e.g. with the SDK's
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, which the app does not read) meant no telemetry at
    all, in silence."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic s3cr3t-otel")
    with pytest.raises(ConfigError, match=r"^OTEL_EXPORTER_OTLP_HEADERS is set without") as info:
        get_settings()
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MONGODB_URI", "mongodb//app:s3cr3t@db.example"),  # no scheme: a host name to pymongo
        ("MONGODB_URI", "mongodb+srv://app:s3cr3t@cluster0.example.net\n"),  # a pasted newline
        ("MONGODB_URI", "postgres://app:s3cr3t@db.example/aircoach"),
        ("MONGODB_URI", "mongodb://"),
        ("MONGODB_DB", "air coach"),
        ("MONGODB_DB", "air.coach"),
        ("AWS_ENDPOINT_URL", "localhost:4566"),  # boto3: "Invalid endpoint" at the first read
        ("MODEL_BASE_URL", "gateway.example/v1?key=s3cr3t"),
        ("OPENAI_BASE_URL", "localhost:11434/v1"),
        ("GEMINI_BASE_URL", "https://"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"),
        ("AUTH0_BASE_URL", "https://tenant.example:port"),
        ("KB_SEARCH_URL", "kb.internal/search?token=s3cr3t"),
        ("SEARXNG_URL", "searx.example"),
        ("PROMPT_BUCKET", "s3://aircoach-docs"),  # boto3: "Invalid bucket name" at a request
        ("PROMPT_BUCKET", "aircoach-docs/prompt_docs"),
        ("DEADLETTER_BUCKET", "aircoach dead letters"),
    ],
)
def test_a_malformed_url_or_connection_string_stops_the_start(monkeypatch, variable, value):
    """They were used as given at the first request that needed them (the store, the prompt
    docs, the model, a tool): a 503 or a failed turn, and the operator learnt it from a user."""
    monkeypatch.setenv("MONGODB_URI", "mongodb://127.0.0.1:1")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as refused:
        get_settings()
    line = str(refused.value)
    assert line.startswith(f"{variable} must") and "\n" not in line
    assert "s3cr3t" not in "".join(traceback.format_exception(refused.value))


@pytest.mark.parametrize(
    "uri",
    [
        "mongodb://app:s3cr3t@db.example:abc/aircoach",  # a port that is no number
        "mongodb://app:s3cr3t@db.example:99999/aircoach",
        "mongodb://app:s3@cr3t@db.example/aircoach",  # a password's unescaped @
        "mongodb://app:s3cr3t@db.example/aircoach?tls=s3cr3t",  # a value pymongo does not take
        "mongodb://app:s3cr3t@db.example/aircoach?s3cr3t=1",  # an option it does not know
        "mongodb+srv://app:s3cr3t@cluster0.example.net:27017/aircoach",  # SRV takes no port
    ],
)
def test_a_connection_string_pymongo_refuses_stops_the_start(monkeypatch, uri):
    """They started, `/api/health` said the store was unavailable (`ValueError`), every turn
    was a 503 whose log line did not name MONGODB_URI, and the CLI printed a traceback."""
    monkeypatch.setenv("MONGODB_URI", uri)
    with pytest.raises(ConfigError) as refused:
        get_settings()
    line = str(refused.value)
    assert line.startswith("MONGODB_URI is not a connection string pymongo takes: ")
    assert "\n" not in line and len(line) < 300
    for secret in ("s3cr3t", "cr3t", "db.example", "cluster0"):
        assert secret not in "".join(traceback.format_exception(refused.value))


def test_a_local_docs_folder_that_is_not_there_stops_the_start(monkeypatch, tmp_path):
    """It started and passed /api/health; every chat was then a 503 `prompt_unavailable`."""
    monkeypatch.setenv("PROMPT_DOCS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"^PROMPT_DOCS_DIR is not a folder"):
        get_settings()
    monkeypatch.setenv("PROMPT_BUCKET", "aircoach-docs")  # then the folder is not read
    assert get_settings().prompt_bucket == "aircoach-docs"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MONGODB_URI", "mongodb://app:p%40ss@db1.example:27017,db2.example/admin?replicaSet=rs"),
        ("MONGODB_URI", "mongodb+srv://app:pw@cluster0.example.net/?retryWrites=true&w=majority"),
        # SRV's own options, which pymongo refuses on a mongodb:// string
        ("MONGODB_URI", "mongodb+srv://app:pw@c0.example.net/db?w=1&srvMaxHosts=2"),
        ("MONGODB_URI", "mongodb+srv://app:pw@c0.example.net/?srvServiceName=mongo&tls=true"),
        ("MONGODB_DB", "aircoach_prod-2"),
        ("AWS_ENDPOINT_URL", "http://localhost:4566"),
        ("OPENAI_BASE_URL", "http://[::1]:11434/v1"),
        ("KB_SEARCH_URL", "https://kb.internal/search"),
        ("PROMPT_BUCKET", "aircoach-docs.eu-west-1"),
        ("DEADLETTER_BUCKET", "Legacy_Bucket"),  # us-east-1 names of before 2018
    ],
)
def test_well_formed_urls_and_connection_strings_are_kept(monkeypatch, variable, value):
    monkeypatch.setenv("MONGODB_URI", "mongodb://127.0.0.1:1")
    monkeypatch.setenv(variable, value)
    settings = get_settings()
    assert value in (getattr(settings, variable.lower(), None), settings.tool_env.get(variable))

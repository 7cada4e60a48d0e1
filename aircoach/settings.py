"""Validated settings, read from the environment (and `.env`), injected where needed.

There is no module-level instance: `create_app(settings)` takes one, and `get_settings()`
builds one from the environment for the entry points.

Settings are grouped by concern, one class each (`AuthSettings`, `PromptSettings`, ...), and
`Settings` combines them. A component's signature names only its group, so it is given (and
type-checked to use) only its part, while deployments keep their flat environment variable
names (`AUTH0_DOMAIN`, `MONGODB_URI`, ...): every field's name is its variable's name.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from aircoach.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

DEV_ISSUER = "https://aircoach.dev.local/"

MODEL_PROVIDERS = ("gemini", "openai", "offline")

# Variables `tools.json` may reference as `${NAME}`: the documented tool endpoints, and any
# variable whose name starts with TOOL_. Nothing else of the environment (model keys, AWS
# credentials, the webhook secret) can be put in a tool's URL or headers.
TOOL_VARIABLE_PREFIX = "TOOL_"
TOOL_URL_VARIABLES = ("SEARXNG_URL", "KB_SEARCH_URL", "LEX_SEARCH_URL")

# Packages whose functions `tools.json` may name as `python:` handlers (PYTHON_TOOL_MODULES).
DEFAULT_PYTHON_TOOL_MODULES = ("aircoach",)


def running_on_serverless(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get("AWS_LAMBDA_FUNCTION_NAME") or env.get("VERCEL"))


def tool_variable_allowed(name: str) -> bool:
    return name.startswith(TOOL_VARIABLE_PREFIX) or name in TOOL_URL_VARIABLES


def _is_http_url(value: str) -> bool:
    if any(char.isspace() for char in value):
        return False  # a pasted line break, or a space where %20 belongs
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _http_url(name: str, value: str | None) -> str | None:
    """`value` if it is an http(s) URL with a host (or unset); checked at start, since each was
    first used at the request that needed it. The message never quotes the value."""
    if value and not _is_http_url(value):
        raise ConfigError(f"{name} must be an http(s) URL with a host, e.g. 'https://host/path'")
    return value


_SRV_OPTIONS = re.compile(r"(?i)(?<=[?&])srv(?:maxhosts|servicename)=[^&]*&?")


def _mongodb_uri_problem(uri: str) -> str | None:
    """What pymongo refuses in a connection string when its client is made, at the first store
    call (a port that is no number, a password's unescaped `@`, an option it does not know or a
    value it does not take), in its words with every part of the string left out; None when it
    parses. A `mongodb+srv` string is read as `mongodb` with its one host: its hosts come from
    DNS, which the client looks up, not the start."""
    from pymongo.uri_parser import parse_uri  # only when the setting is set

    scheme, _, rest = uri.partition("://")
    if scheme == "mongodb+srv":
        if re.search(r"[:,]", rest.split("/")[0].rpartition("@")[2]):
            return "a mongodb+srv:// string names one host, without a port"
        rest = _SRV_OPTIONS.sub("", rest).rstrip("&?")  # read as mongodb://, which refuses them
    try:
        parse_uri(f"mongodb://{rest}")
    except Exception as exc:  # pymongo's InvalidURI, ConfigurationError, ValueError...
        problem = str(exc)
    else:
        return None
    for part in sorted(set(re.split(r"[:/@?&=,;]+", uri)), key=len, reverse=True):
        if len(part) > 3:  # a host, a user, a password, an option's value
            problem = problem.replace(part, "...")
    return problem[:200]


def _bucket(name: str, value: str | None) -> str | None:
    """`value` if it can be an S3 bucket's name (or unset): `s3://docs` or `docs/prompts`
    failed at the first request that read the bucket. Loose enough for the legacy names of
    us-east-1 (capitals, underscores); the message never quotes the value."""
    if value and (
        len(value) > 255
        or any(char in value for char in ":/")
        or value != value.strip()
        or any(char.isspace() for char in value)
    ):
        raise ConfigError(
            f"{name} must be a bucket's name, e.g. 'aircoach-docs': no s3:// and no folder "
            "(the folder goes in the matching _PREFIX setting)"
        )
    return value


def _names(value: Any) -> Any:
    """A list setting from the environment: JSON (`["a","b"]`) or comma-separated (`a,b`;
    `CORS_ORIGINS=http://a.example` was a crash at start-up). Blank entries are dropped."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError:
            raise ValueError("not a valid JSON list; use JSON or comma-separated values") from None
    return [part.strip() for part in text.split(",") if part.strip()]


# A list of strings given as JSON or as comma-separated values.
NameList = Annotated[list[str], NoDecode, BeforeValidator(_names)]
NameTuple = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_names)]


class _Group(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env",
        extra="ignore",
        frozen=True,
        # serverless.yml passes `${env:X, ''}`: an empty variable means "not set".
        env_ignore_empty=True,
        populate_by_name=True,
        # `TURN_TIMEOUT_S=inf` (or nan) passed every bound: a turn with no deadline.
        allow_inf_nan=False,
    )

    # Local state (dev keys, SQLite). On Lambda and Vercel only /tmp is writable.
    data_dir: Path = Field(
        default_factory=lambda: (
            Path("/tmp/aircoach") if running_on_serverless() else ROOT / ".aircoach"
        )
    )


class ServerSettings(_Group):
    """The HTTP server: logging, CORS, and the wall-clock cap of a chat turn."""

    log_level: str = "INFO"
    # JSON lines where a log service reads them (default on Lambda/Vercel), text on a laptop.
    log_format: Literal["text", "json"] | None = None
    cors_origins: NameList = Field(default_factory=lambda: ["*"])
    # The whole agent run of one turn (every model call and tool call). Keep it below the
    # platform's function timeout minus the store's: the turn is stored after the cap.
    turn_timeout_s: float = Field(default=45.0, gt=0)

    @field_validator("log_level", mode="before")
    @classmethod
    def _a_logging_level(cls, value: object) -> object:
        # Checked here, or a typo (`verbose`) was a traceback from logging at start-up.
        if not isinstance(value, str):
            return value
        level = logging.getLevelNamesMapping().get(value.strip().upper())
        if level is None:
            raise ConfigError("LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return logging.getLevelName(level)  # WARN -> WARNING, FATAL -> CRITICAL

    @property
    def resolved_log_format(self) -> str:
        if self.log_format:
            return self.log_format
        return "json" if running_on_serverless() else "text"

    # Largest request body a route reads (a route may declare its own: aircoach.bodies).
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    # `POST /api/chat`: the AI SDK resends the whole conversation with every message.
    chat_max_body_bytes: int = Field(default=1_000_000, ge=1024, le=6_000_000)
    # `serve` only: a request (headers and body) must arrive within this many seconds of its
    # first byte (aircoach.entry.server).
    request_receipt_timeout_s: float = Field(default=20.0, gt=0)
    # /docs, /redoc and /openapi.json: the contract clients implement, no secret in it.
    api_docs: bool = True
    # The playground page (`GET /`): a developer's view of what a student sees. Off on
    # Lambda/Vercel unless chosen, since a production API serves apps, not a page.
    playground: bool = Field(default_factory=lambda: not running_on_serverless())
    # Chat turns one user may start, counted in the store across every instance (0 = no
    # limit; off locally, set them in production). Replays of a stored turn are free.
    quota_turns_per_day: int = Field(default=0, ge=0)
    quota_turns_per_minute: int = Field(default=0, ge=0)
    # Quiz answers one user may have graded per minute through `POST /api/quiz/answers` (0 =
    # no limit): a human answers a few a minute; a script sending hundreds would inflate the
    # progress figures. Answers given in the chat are charged as turns.
    quota_answers_per_minute: int = Field(default=30, ge=0)


class AuthSettings(_Group):
    """Auth0 when AUTH0_DOMAIN is set, else the local dev issuer; and the admin permission."""

    auth0_domain: str | None = None
    auth0_audience: str = "https://api.aircoach.dev"
    auth0_mgmt_client_id: str | None = None
    auth0_mgmt_client_secret: str | None = Field(default=None, repr=False)
    auth_leeway_s: int = Field(default=30, ge=0, le=300)  # negative: tokens expire early
    auth_cache_ttl_s: float = Field(default=60.0, ge=0)  # verified tokens remembered; 0 = off
    jwks_refetch_cooldown_s: float = Field(default=30.0, ge=0)
    jwks_max_age_s: float = Field(default=600.0, gt=0)
    admin_permission: str = "admin:docs"
    # Where the tenant's endpoints are reached (JWKS, /oauth/token, /api/v2); default
    # https://{AUTH0_DOMAIN}. The token issuer stays https://{AUTH0_DOMAIN}/ regardless.
    auth0_base_url: str | None = None
    auth0_timeout_s: float = Field(default=2.0, gt=0)
    # The user's profile in the prompt (Auth0 Management API; needs the mgmt client above).
    # The turn waits at most user_data_timeout_s; keep it above auth0_timeout_s, so that a
    # slow tenant times out inside the client and the client backs off for the next turns.
    user_data_timeout_s: float = Field(default=3.0, gt=0)
    user_data_ttl_s: float = Field(default=600.0, gt=0)
    user_data_cache_size: int = Field(default=1000, ge=1)
    user_data_fields: NameList = Field(
        default_factory=lambda: [
            "preferred_name",
            "language",
            "course",
            "licence",
            "level",
            "goal",
            "exam_date",
            "flight_hours",
            "school",
            "aircraft",
        ]
    )

    @property
    def uses_dev_issuer(self) -> bool:
        return not self.auth0_domain

    @property
    def auth0_url(self) -> str:
        """Base URL of the tenant's endpoints (never taken from a token)."""
        return (self.auth0_base_url or f"https://{self.auth0_domain}").rstrip("/")

    @property
    def auth0_management_enabled(self) -> bool:
        return bool(
            self.auth0_domain and self.auth0_mgmt_client_id and self.auth0_mgmt_client_secret
        )

    @field_validator("auth0_domain", mode="before")
    @classmethod
    def _bare_domain(cls, value: object) -> object:
        # People paste the tenant URL; the issuer must come out as exactly https://{domain}/.
        if isinstance(value, str):
            value = value.strip().removeprefix("https://").rstrip("/")
            return value or None
        return value

    @model_validator(mode="after")
    def _auth0_settings_make_sense(self) -> AuthSettings:
        if self.uses_dev_issuer and running_on_serverless():
            raise ConfigError(
                "AUTH0_DOMAIN is not set: the local dev token issuer is refused on "
                "Lambda/Vercel (AWS_LAMBDA_FUNCTION_NAME or VERCEL is set)"
            )
        if self.auth0_domain and "/" in self.auth0_domain:
            raise ConfigError(
                "AUTH0_DOMAIN must be a host name such as 'tenant.eu.auth0.com', without a path"
            )
        _http_url("AUTH0_BASE_URL", self.auth0_base_url)
        if bool(self.auth0_mgmt_client_id) != bool(self.auth0_mgmt_client_secret):
            raise ConfigError(
                "set both AUTH0_MGMT_CLIENT_ID and AUTH0_MGMT_CLIENT_SECRET, or neither"
            )
        return self


class PromptSettings(_Group):
    """Prompt docs: the local folder, or S3 when PROMPT_BUCKET is set; the reload webhook."""

    prompt_docs_dir: Path = Field(default=ROOT / "prompt_docs")
    prompt_bucket: str | None = None
    prompt_prefix: str = "prompt_docs/"
    aws_region: str = "eu-west-1"
    aws_endpoint_url: str | None = None
    prompt_ttl_s: float = Field(default=60.0, ge=0)
    s3_timeout_s: float = Field(default=5.0, gt=0)
    s3_max_attempts: int = Field(default=3, ge=1, le=10)
    update_docs_secret: str | None = Field(default=None, repr=False)
    update_docs_max_skew_s: int = Field(default=300, ge=1)

    @model_validator(mode="after")
    def _local_docs_are_a_folder(self) -> PromptSettings:
        # A wrong folder started and passed /api/health (the docs load at the first request),
        # then every chat was a 503 `prompt_unavailable`.
        if not self.prompt_bucket and not self.prompt_docs_dir.is_dir():
            raise ConfigError(
                "PROMPT_DOCS_DIR is not a folder: set it to the prompt docs' folder, or leave "
                "it unset for the shipped docs (or set PROMPT_BUCKET to read them from S3)"
            )
        return self

    @field_validator("aws_endpoint_url")
    @classmethod
    def _s3_endpoint_is_a_url(cls, value: str | None) -> str | None:
        return _http_url("AWS_ENDPOINT_URL", value)

    @field_validator("prompt_bucket")
    @classmethod
    def _prompt_bucket_is_a_name(cls, value: str | None) -> str | None:
        return _bucket("PROMPT_BUCKET", value)


class StoreSettings(_Group):
    """Chat store: SQLite under data_dir, or MongoDB when MONGODB_URI is set; and the
    dead-letter spool for turns the store refused (S3, or files under data_dir)."""

    # An explicit choice; unset means MongoDB when MONGODB_URI is set, else SQLite (refused
    # on Lambda/Vercel, where a /tmp file dies with the instance).
    store: Literal["sqlite", "mongodb"] | None = None
    sqlite_path: Path | None = None
    mongodb_uri: str | None = Field(default=None, repr=False)  # may hold a password
    mongodb_db: str = "aircoach"
    mongodb_chats_collection: str = "chats"
    mongodb_quiz_collection: str = "quiz"
    mongodb_attempts_collection: str = "quiz_attempts"
    store_timeout_s: float = Field(default=5.0, gt=0)
    deadletter_bucket: str | None = None
    deadletter_prefix: str = "deadletter/"

    @property
    def sqlite_file(self) -> Path:
        return self.sqlite_path or self.data_dir / "aircoach.sqlite3"

    @property
    def store_kind(self) -> Literal["sqlite", "mongodb"]:
        if self.store:
            return self.store
        return "mongodb" if self.mongodb_uri else "sqlite"

    @property
    def deadletter_folder(self) -> Path:
        """Where turns the store refused wait when no DEADLETTER_BUCKET is set."""
        return self.data_dir / "deadletter"

    @field_validator("mongodb_uri")
    @classmethod
    def _a_connection_string(cls, value: str | None) -> str | None:
        # pymongo reads a string without a scheme as a host name (a DNS failure at the first
        # store call), and refuses a malformed one only when its client is made.
        scheme, _, rest = (value or "").partition("://")
        malformed = scheme not in ("mongodb", "mongodb+srv") or not rest[:1].strip("/?")
        if value is not None and (malformed or any(char.isspace() for char in value)):
            raise ConfigError(
                "MONGODB_URI must be a connection string, mongodb://HOST[:PORT][,HOST...]/... "
                "or mongodb+srv://HOST/..., without spaces or line breaks (URL-encode a "
                "password's special characters)"
            )
        if value is not None and (problem := _mongodb_uri_problem(value)):
            raise ConfigError(f"MONGODB_URI is not a connection string pymongo takes: {problem}")
        return value

    @field_validator("deadletter_bucket")
    @classmethod
    def _deadletter_bucket_is_a_name(cls, value: str | None) -> str | None:
        return _bucket("DEADLETTER_BUCKET", value)

    @field_validator("mongodb_db")
    @classmethod
    def _a_database_name(cls, value: str) -> str:
        # MongoDB's rules; pymongo checked them at the first store call.
        if not value or len(value.encode()) > 63 or any(char in value for char in ' ./\\"$\0'):
            raise ConfigError(
                "MONGODB_DB must be a database name: 1 to 63 bytes, without spaces or "
                'any of . / \\ " $'
            )
        return value

    @field_validator("deadletter_prefix")
    @classmethod
    def _prefix_is_a_folder(cls, value: str) -> str:
        value = value.strip().lstrip("/")
        if not value:
            raise ConfigError("DEADLETTER_PREFIX must name a folder, e.g. 'deadletter/'")
        return value if value.endswith("/") else f"{value}/"

    @model_validator(mode="after")
    def _store_is_chosen(self) -> StoreSettings:
        if self.store == "mongodb" and not self.mongodb_uri:
            raise ConfigError("STORE=mongodb needs MONGODB_URI")
        if self.store == "sqlite" and self.mongodb_uri:
            raise ConfigError("STORE=sqlite but MONGODB_URI is set: unset one of them")
        if self.store is None and not self.mongodb_uri and running_on_serverless():
            raise ConfigError(
                "MONGODB_URI is not set: a SQLite file in /tmp dies with the instance, so it "
                "is refused on Lambda/Vercel unless chosen with STORE=sqlite"
            )
        return self


class MemorySettings(_Group):
    history_limit: int = Field(default=10, ge=0, le=200)
    memory_max_threads: int = Field(default=1000, ge=1)
    # Long-term memory (issue 34): items kept per user, and the most the prompt shows.
    memory_max_items: int = Field(default=200, ge=1, le=10_000)
    memory_prompt_items: int = Field(default=5, ge=0, le=50)
    memory_prompt_chars: int = Field(default=800, ge=0, le=8_000)


class ModelSettings(_Group):
    model_provider: Literal["gemini", "openai", "offline"] | None = None
    model_name: str = "gemini-2.5-flash"
    model_temperature: float = Field(default=0.3, ge=0, le=2)
    model_timeout_s: float = Field(default=30.0, gt=0)
    model_max_retries: int = Field(default=1, ge=0, le=5)
    # Tokens one model call may write (Gemini's `max_output_tokens`, where a 2.5 model's
    # thinking counts too; `max_tokens` on an OpenAI-compatible server): bounds an answer's
    # length, its cost and the citation guard's work on it.
    model_max_output_tokens: int = Field(default=4096, ge=256, le=65_536)
    model_base_url: str | None = None  # the primary model's endpoint (a gateway, a test fake)
    model_fallback: str | None = None  # "provider:model" tried when the first fails early
    google_api_key: str | None = Field(
        default=None,
        repr=False,
        validation_alias=AliasChoices("google_api_key", "gemini_api_key"),
    )
    gemini_base_url: str | None = None
    openai_api_key: str | None = Field(default=None, repr=False)
    openai_base_url: str | None = None

    @property
    def resolved_model_provider(self) -> str:
        if self.model_provider:
            return self.model_provider
        return "gemini" if self.google_api_key else "offline"

    @field_validator("model_fallback")
    @classmethod
    def _fallback_names_a_provider(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        provider, _, name = value.strip().partition(":")
        if provider not in MODEL_PROVIDERS or (provider != "offline" and not name):
            raise ConfigError(
                "MODEL_FALLBACK must be 'offline' or 'PROVIDER:MODEL' with PROVIDER one of "
                f"{MODEL_PROVIDERS}, e.g. 'openai:gpt-4o-mini'"
            )
        return value.strip()

    @field_validator("model_base_url", "gemini_base_url", "openai_base_url")
    @classmethod
    def _base_url_is_a_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _http_url(str(info.field_name).upper(), value)

    @model_validator(mode="after")
    def _model_credentials(self) -> ModelSettings:
        if not self.model_provider and not self.google_api_key and running_on_serverless():
            raise ConfigError(
                "no model is configured (GOOGLE_API_KEY, or MODEL_PROVIDER=gemini|openai): "
                "the offline stand-in is refused on Lambda/Vercel unless chosen with "
                "MODEL_PROVIDER=offline"
            )
        providers = {self.resolved_model_provider: "MODEL_PROVIDER"}
        if self.model_fallback:
            providers.setdefault(self.model_fallback.partition(":")[0], "MODEL_FALLBACK")
        if "gemini" in providers and not self.google_api_key:
            raise ConfigError(
                f"{providers['gemini']} uses Gemini: set GOOGLE_API_KEY (or GEMINI_API_KEY)"
            )
        if "openai" in providers and not (self.openai_api_key or self._openai_url_set):
            raise ConfigError(
                f"{providers['openai']} uses OpenAI: set OPENAI_API_KEY, or OPENAI_BASE_URL "
                "for a local OpenAI-compatible server (Ollama, vLLM)"
            )
        return self

    @property
    def _openai_url_set(self) -> bool:
        primary_url = self.model_base_url if self.model_provider == "openai" else None
        return bool(self.openai_base_url or primary_url)


class ToolSettings(_Group):
    """The variables `tools.json` may reference (`${NAME}`), read like every other setting
    from the environment and `.env`: the documented tool URLs and every `TOOL_*` variable."""

    tool_env: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    # Packages (with their sub-modules) a `python:` tool handler may come from: importing a
    # module runs its code, so the docs may name only these.
    python_tool_modules: NameTuple = DEFAULT_PYTHON_TOOL_MODULES
    # What a tool result sends to the client and the stored turn at most (the kept items,
    # capped); separate from the read cap of an HTTP answer (`max_response_bytes`, 2 MB).
    tool_client_max_bytes: int = Field(default=16_384, ge=1024, le=1_000_000)

    @field_validator("tool_env")
    @classmethod
    def _only_tool_variables(cls, env: dict[str, str]) -> dict[str, str]:
        kept = {name: value for name, value in env.items() if tool_variable_allowed(name) and value}
        for name in TOOL_URL_VARIABLES:
            _http_url(name, kept.get(name))
        return kept


class GroundingSettings(_Group):
    """The citation guard (aircoach/grounding): what a turn does with an answer that cites
    what its sources do not say (`GROUNDING_POLICY`), and whether the caveat is sent."""

    # caveat | regenerate | withhold; unset: `regenerate`, or `caveat` when the older
    # GROUNDING_REGENERATE=false is set (deployments keep their behaviour).
    grounding_policy: Literal["caveat", "regenerate", "withhold"] | None = None
    grounding_caveat: bool = True
    grounding_regenerate: bool = True  # superseded by GROUNDING_POLICY
    # Search each unverified citation on the official sites through the web_search tool's
    # service (SEARXNG_URL): a `source` in the event, never a verification.
    grounding_web_check: bool = False

    @property
    def grounding_mode(self) -> Literal["caveat", "regenerate", "withhold"]:
        """The policy in force: GROUNDING_POLICY, else what GROUNDING_REGENERATE meant."""
        if self.grounding_policy is not None:
            return self.grounding_policy
        return "regenerate" if self.grounding_regenerate else "caveat"

    @model_validator(mode="after")
    def _one_grounding_policy(self) -> GroundingSettings:
        if (
            self.grounding_policy is not None
            and "grounding_regenerate" in self.model_fields_set
            and self.grounding_regenerate != (self.grounding_policy == "regenerate")
        ):
            raise ConfigError(
                "GROUNDING_POLICY and GROUNDING_REGENERATE disagree (GROUNDING_REGENERATE=true "
                "means GROUNDING_POLICY=regenerate); set only GROUNDING_POLICY"
            )
        return self


class TaskSettings(_Group):
    """Structured tasks (`/api/tasks`): body limits, batch concurrency, the review permission,
    and the code version stored with every run."""

    # The task routes read bigger bodies than the chat: an e-mail, or a batch of them.
    task_max_body_bytes: int = Field(default=1_000_000, ge=1024, le=6_000_000)
    task_batch_max_body_bytes: int = Field(default=5_000_000, ge=1024, le=6_000_000)
    task_batch_concurrency: int = Field(default=4, ge=1, le=32)
    task_review_permission: str = "tasks:review"
    # A valid output whose confidence is under its task's threshold is also queued for review
    # (JSON: `{"email_triage": 0.5}`); a task not named here never is.
    task_review_below: dict[str, float] = Field(default_factory=lambda: {"email_triage": 0.5})
    # A claimed Idempotency-Key or SQS message id whose run has not ended after this long (its
    # instance died) may be run again; above the SQS worker's timeout.
    task_run_lease_s: float = Field(default=300.0, ge=1, le=3600)
    # Where a queued (SQS) run's end is POSTed, signed with the secret: HTTPS, to a host of the
    # allow-list, no redirects, public addresses only unless allowed (tests, private networks).
    task_callback_url: str | None = Field(default=None, max_length=2000)
    task_callback_secret: str | None = Field(default=None, repr=False)
    task_callback_hosts: NameList = Field(default_factory=list)
    task_callback_timeout_s: float = Field(default=5.0, gt=0, le=30)
    task_callback_allow_private: bool = False
    # Deployments set it to the commit they ship (e.g. `git rev-parse --short HEAD`).
    code_version: str | None = None

    @model_validator(mode="after")
    def _callback_is_complete(self) -> TaskSettings:
        if self.task_callback_url is None:
            return self
        from urllib.parse import urlsplit

        parts = urlsplit(self.task_callback_url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError("TASK_CALLBACK_URL must be https://<host>/...")
        if (parts.hostname or "").lower() not in {h.lower() for h in self.task_callback_hosts}:
            raise ValueError("TASK_CALLBACK_URL's host must be one of TASK_CALLBACK_HOSTS")
        if self.task_callback_secret is None:
            raise ValueError("TASK_CALLBACK_URL needs TASK_CALLBACK_SECRET")
        return self

    @field_validator("task_review_below")
    @classmethod
    def _thresholds_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for task, threshold in value.items():
            if not 0 <= threshold <= 1:
                raise ValueError(f"TASK_REVIEW_BELOW: {task!r} must be between 0 and 1")
        return value


# One entry of OTEL_EXPORTER_OTLP_HEADERS as the OTel SDK accepts it (its liberal pattern):
# an HTTP token, `=`, and printable ASCII without `"`, `;` or `\\`.
_HEADER = re.compile(r"[ \t]*[!#$%&'*+\-.^_`|~0-9A-Za-z]+[ \t]*=[ \t]*[ !#-+\--:<-\[\]-~]*[ \t]*")


class TelemetrySettings(_Group):
    """OpenTelemetry traces and metrics (aircoach/telemetry): off, and not even loaded, unless
    OTEL_EXPORTER_OTLP_ENDPOINT is set (OTLP over HTTP) or OTEL=console (a trace per request
    on stderr)."""

    otel: Literal["console"] | None = None
    otel_exporter_otlp_endpoint: str | None = None  # the collector's base URL (/v1/... added)
    otel_exporter_otlp_headers: str | None = Field(default=None, repr=False)  # `k=v,k2=v2`
    otel_service_name: str = "aircoach-api"
    otel_metric_export_interval: int = Field(default=60_000, ge=1000)  # ms, long-running servers
    # Lambda/Vercel may freeze an instance once its response ends: there each request's spans
    # and metrics are flushed before its last byte, waiting at most OTEL_FLUSH_TIMEOUT_MS.
    otel_flush_each_request: bool = Field(default_factory=running_on_serverless)
    otel_flush_timeout_ms: int = Field(default=250, ge=0, le=10_000)

    @property
    def telemetry_enabled(self) -> bool:
        return bool(self.otel_exporter_otlp_endpoint or self.otel == "console")

    @field_validator("otel_exporter_otlp_endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None) -> str | None:
        return _http_url("OTEL_EXPORTER_OTLP_ENDPOINT", value)

    @field_validator("otel_exporter_otlp_headers")
    @classmethod
    def _headers_are_name_value_pairs(cls, value: str | None) -> str | None:
        # Checked here: the OTel SDK logs a malformed entry (quoting it: a collector's key)
        # and drops it, and every export is then refused.
        if value is not None and not all(
            _HEADER.fullmatch(entry) for entry in value.split(",") if entry.strip()
        ):
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_HEADERS must be comma-separated name=value pairs, "
                "e.g. 'authorization=Basic%20...' (no quotes)"
            )
        return value

    @model_validator(mode="after")
    def _headers_go_with_the_endpoint(self) -> TelemetrySettings:
        if self.otel_exporter_otlp_headers and not self.otel_exporter_otlp_endpoint:
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_HEADERS is set without OTEL_EXPORTER_OTLP_ENDPOINT, the "
                "collector's base URL (the only endpoint variable read): set it, or unset "
                "the headers"
            )
        return self


class _ToolVariables(PydanticBaseSettingsSource):
    """Fills `tool_env` from `.env` and the environment (the environment wins, as for every
    other setting), unless the caller passed `tool_env` itself."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        dotenv: PydanticBaseSettingsSource | None,
        given: Mapping[str, Any],
    ):
        super().__init__(settings_cls)
        self._dotenv = dotenv
        self._given = given

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if "tool_env" in self._given:
            return {}
        from_file = self._dotenv.env_vars if isinstance(self._dotenv, DotEnvSettingsSource) else {}
        variables = {
            name.upper(): value for name, value in from_file.items() if isinstance(value, str)
        }
        variables.update(os.environ)
        return {"tool_env": variables}


class QuizSettings(_Group):
    """The quiz's spaced review and mock exams (aircoach/quiz; docs/quiz.md)."""

    # An answer to a question within this many seconds of the last one that counted (the
    # same question asked again in a session) moves neither its review schedule nor its
    # "seen" and "mastered" counts; it is still an attempt in the progress.
    quiz_repeat_window_s: float = Field(default=300.0, ge=0)
    # A mock exam's default size, time and pass mark: 30 questions (3 from each of the ten
    # chapters), 45 minutes (an exam of another size gets as much time per question), and
    # 75%, EASA's pass mark for the PPL/LAPL theory exams.
    exam_questions: int = Field(default=30, ge=5, le=60)
    exam_duration_s: int = Field(default=45 * 60, ge=60, le=6 * 3600)
    exam_pass_mark: float = Field(default=0.75, gt=0, le=1)


class Settings(
    QuizSettings,
    ServerSettings,
    AuthSettings,
    PromptSettings,
    StoreSettings,
    MemorySettings,
    ModelSettings,
    ToolSettings,
    TaskSettings,
    GroundingSettings,
    TelemetrySettings,
):
    """Every setting. Components take the group they need (`AuthSettings`, ...)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        given = getattr(init_settings, "init_kwargs", {})

        def tool_variables(dotenv: PydanticBaseSettingsSource | None) -> _ToolVariables:
            return _ToolVariables(settings_cls, dotenv, given)

        if running_on_serverless():
            # A `.env` that slipped into a deploy would fill every setting the platform leaves
            # unset with a developer's local value: there, the environment is the only source.
            return (init_settings, env_settings, tool_variables(None), file_secret_settings)
        if isinstance(dotenv_settings, DotEnvSettingsSource) and not dotenv_settings.env_vars:
            # No `.env` (or an empty one): the source would still walk every field for nothing,
            # about 40 % of the settings' build.
            return (init_settings, env_settings, tool_variables(None), file_secret_settings)
        return (
            init_settings,
            env_settings,
            dotenv_settings,
            tool_variables(dotenv_settings),
            file_secret_settings,
        )

    @model_validator(mode="after")
    def _web_check_has_its_service(self) -> Settings:
        # Without the service the check was skipped in silence: the operator asked for it.
        if self.grounding_web_check and not self.tool_env.get("SEARXNG_URL"):
            raise ConfigError(
                "GROUNDING_WEB_CHECK=true needs SEARXNG_URL (the web_search service it searches "
                "through): set SEARXNG_URL, or GROUNDING_WEB_CHECK=false"
            )
        return self

    @model_validator(mode="after")
    def _dead_letters_stay_out_of_the_docs(self) -> Settings:
        # The docs listing reads every key under PROMPT_PREFIX: a spooled turn there would
        # become a prompt doc (and change prompt_version); and the replay would read docs.
        if self.deadletter_bucket and self.deadletter_bucket == self.prompt_bucket:
            spool, docs = self.deadletter_prefix, self.prompt_prefix
            if spool.startswith(docs) or docs.startswith(spool):
                raise ConfigError(
                    "DEADLETTER_PREFIX and PROMPT_PREFIX overlap in the same bucket "
                    "(DEADLETTER_BUCKET = PROMPT_BUCKET): use a folder outside the prompt docs"
                )
        return self

    @model_validator(mode="after")
    def _webhook_and_callback_secrets_differ(self) -> Settings:
        # Both sign "{timestamp}.{body}" the same way: a callback's receiver could replay it
        # to POST /api/update_docs (which ignores its body) and read the system prompt.
        if self.update_docs_secret and self.update_docs_secret == self.task_callback_secret:
            raise ConfigError(
                "UPDATE_DOCS_SECRET and TASK_CALLBACK_SECRET are the same: a callback's "
                "receiver could sign docs reloads with it; give each its own secret"
            )
        return self


def get_settings() -> Settings:
    """Build settings from the environment; the entry points call this once per app. A
    configuration error is one `ConfigError` naming each setting at fault, raised without its
    cause: a platform that logs a failed start's traceback (Lambda, Vercel) then logs no value
    (pydantic's error quotes the input, which may be a secret)."""
    try:
        return Settings()
    except (ValidationError, SettingsError) as exc:
        line = startup_error(exc)
    raise ConfigError(line or "the settings cannot be read")


def startup_error(exc: BaseException) -> str | None:
    """A configuration error as one line naming each setting at fault (never its value,
    which may be a secret), or None when `exc` is not one."""
    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{_setting_name(error['loc'])}: {error['msg']}" for error in exc.errors()[:5]
        )
    if isinstance(exc, SettingsError):
        # pydantic-settings' message is `error parsing value for field "x" from source "..."`.
        found = re.search(r'field "(\w+)"', str(exc))
        name = found.group(1).upper() if found else "a setting"
        return f"{name}: cannot be parsed (give a JSON value, or comma-separated names)"
    return None


def _setting_name(loc: tuple[int | str, ...]) -> str:
    return str(loc[0]).upper() if loc else "settings"

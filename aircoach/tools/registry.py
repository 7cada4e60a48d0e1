"""Tool specifications, their configuration file and the registry. Pure data: importing this
never imports LangChain or httpx.

Tools are declared in `tools.json` among the prompt docs, so they are versioned, reloaded and
counted in the prompt version together with the prompt. A `ToolSpec` says what a tool is
(name, description, JSON Schema parameters, defaults, examples for the offline model's
scoring) and what runs it: a Python handler `handler(ctx: ToolContext, **arguments) ->
ToolOutput`, or an HTTP endpoint (see `aircoach.tools.http`), optionally with an `embedded`
backend used while the endpoint is not configured (see `aircoach.tools.embedded`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from aircoach.errors import ConfigError
from aircoach.json_schema import schema_problem
from aircoach.settings import (
    DEFAULT_PYTHON_TOOL_MODULES,
    ROOT,
    TOOL_URL_VARIABLES,
    tool_variable_allowed,
)

T = TypeVar("T")

TOOLS_DOC = "tools.json"
# The most tools a `tools.json` may declare, and so the most switches a request may send.
MAX_TOOLS = 64
SCHEMA_FILE = ROOT / "docs" / "tools.schema.json"

_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use while it runs: injected per request, never a module global.
    `env` holds the variables a tool's `${NAME}` may name (`Settings.tool_env`); `turn_id`
    is the chat turn the tool runs in (a graded quiz answer records it); `topic` holds the
    conversation's keywords when the question is a follow-up (a source tool searches them
    first, see `aircoach.grounding.followups`); `deps` the services this turn provides to
    the tools, by type (the coach's tools ask for theirs with `need`: the quiz service, the
    course search), so this platform knows none of them."""

    user_id: str
    env: Mapping[str, str] = field(default_factory=dict)
    turn_id: str | None = None
    client_max_bytes: int = 16_384  # TOOL_CLIENT_MAX_BYTES: a result's client data at most
    topic: tuple[str, ...] = ()
    deps: Mapping[type, object] = field(default_factory=dict)

    def get(self, kind: type[T]) -> T | None:
        """The `kind` service this turn provides, or None."""
        return cast("T | None", self.deps.get(kind))

    def need(self, kind: type[T]) -> T:
        """The `kind` service this turn provides; a tool that runs without it fails with an
        error naming it (the turn's wiring is at fault, not the model)."""
        found = self.get(kind)
        if found is None:
            raise RuntimeError(f"no {kind.__name__!r} in this tool context")
        return found


@dataclass(frozen=True)
class ToolOutput:
    """`text` is what the model reads; `data` is the raw result the client gets. `final`:
    whether the result of a return_direct tool ends the turn; False lets the model answer
    (a quiz search that found nothing, so the student gets a text to go on from)."""

    text: str
    data: dict[str, Any]
    ok: bool = True
    final: bool = True


Handler = Callable[..., Awaitable[ToolOutput]]
Backend = Literal["python", "remote", "embedded"]


def env_names(template: str) -> list[str]:
    """The variables a template names as `${NAME}`."""
    return _ENV_VAR.findall(template)


def missing_env(template: str, env: Mapping[str, str]) -> list[str]:
    return [name for name in _ENV_VAR.findall(template) if not env.get(name)]


def expand_env(template: str, env: Mapping[str, str]) -> str:
    """`${NAME}` replaced by the variable's value; raises ConfigError naming an unset one."""
    if missing := missing_env(template, env):
        raise ConfigError(f"variable {missing[0]!r} is not set")
    return _ENV_VAR.sub(lambda m: env[m.group(1)], template)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryPolicy(_Strict):
    """One retry after 1 s on 502/503/504 and on a timeout; any other failure is final."""

    retries: int = Field(default=1, ge=0, le=3, description="Retries after the first attempt.")
    backoff_s: float = Field(default=1.0, ge=0, le=30, description="Pause before a retry.")
    on_status: list[int] = Field(default_factory=lambda: [502, 503, 504])
    on_timeout: bool = True


class HttpTool(_Strict):
    url: str = Field(
        min_length=1,
        description="Endpoint; `${NAME}` is replaced by the variable NAME (environment or "
        "`.env`; SEARXNG_URL, KB_SEARCH_URL, LEX_SEARCH_URL or any TOOL_* variable). While a "
        "variable is unset the tool is unavailable.",
    )
    method: Literal["GET", "POST"] = "POST"
    headers: dict[str, str] = Field(
        default_factory=dict, description="Request headers; `${NAME}` expanded as in `url`."
    )
    fixed: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields always sent, over the model's arguments (e.g. version: vigente).",
    )
    caps: dict[str, float] = Field(
        default_factory=dict, description="Upper bounds of numeric arguments (e.g. top_k: 20)."
    )
    timeout_s: float = Field(default=15.0, gt=0, le=120)
    max_response_bytes: int = Field(
        default=2_000_000,
        gt=0,
        description="Read cap: a larger answer is a failure. The client gets the kept items, capped by TOOL_CLIENT_MAX_BYTES.",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.match(r"^(https?://|\$\{)", url):
            raise ValueError(f"must start with http://, https:// or ${{VAR}}, got {url!r}")
        return url

    @model_validator(mode="after")
    def _only_tool_variables(self) -> HttpTool:
        # Whoever edits the docs must not be able to send the server's other secrets (model
        # keys, AWS credentials, the webhook secret) to a host of their choice.
        for template in (self.url, *self.headers.values()):
            for name in env_names(template):
                if not tool_variable_allowed(name):
                    allowed = ", ".join(TOOL_URL_VARIABLES)
                    raise ValueError(
                        f"variable {name!r} may not be used: only {allowed} and TOOL_* variables"
                    )
        return self


class ResultFormat(_Strict):
    """How a result becomes text for the model and which items the client gets (`tools.results`)."""

    results_key: str = Field(default="results", description="Key of the list of results.")
    header: str = Field(default="[{tool}: {count} risultati]")
    item: str | None = Field(
        default=None,
        description="Line per result, e.g. '- {title} ({url}): {content}'; `{a|b}` falls "
        "back to b when a is missing. Default: the result's fields as `key: value`.",
    )
    max_results: int = Field(default=8, ge=1, le=100)
    max_chars: int = Field(default=500, ge=10, description="Cap of every field's text.")
    max_chars_by_field: dict[str, int] = Field(default_factory=dict)
    no_results: str = Field(default="[{tool}: nessun risultato]")


class ToolSpec(_Strict):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"oneOf": [{"required": ["python"]}, {"required": ["http"]}]},
    )

    name: str = Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")
    label: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        description="Short name a student reads on the tool's switch (default: the name).",
    )
    description: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the model's arguments.",
    )
    default_enabled: bool = True
    source: bool = Field(
        default=False,
        description="A primary source: when every source tool is off, the prompt gets the "
        "`sources_off_warning`.",
    )
    return_direct: bool = False
    examples: list[str] = Field(default_factory=list)
    python: str | None = Field(
        default=None,
        description="Dotted path of the async handler, e.g. 'aircoach.quiz.tools:domanda_teoria'",
    )
    http: HttpTool | None = None
    embedded: str | None = Field(
        default=None,
        description="Beside `http`: dotted path of an async in-process backend "
        "`handler(ctx, **arguments) -> list of results`, used while the endpoint's variables "
        "are unset (e.g. 'aircoach.knowledge.tool:kb_search'). Same text for the model, same "
        "data for the client.",
    )
    format: ResultFormat = Field(default_factory=ResultFormat)

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        if parameters.get("type") != "object":
            raise ValueError('must be a JSON Schema with "type": "object"')
        if not isinstance(parameters.get("properties", {}), dict):
            raise ValueError('"properties" must be an object')
        # Checked at load: the model's arguments are validated against it on every call.
        if problem := schema_problem(parameters):
            raise ValueError(f"not a valid JSON Schema: {problem}")
        return parameters

    @field_validator("python", "embedded")
    @classmethod
    def _importable(cls, path: str | None, info: ValidationInfo) -> str | None:
        # The allowed modules come from the validation context (`PYTHON_TOOL_MODULES`, via
        # `parse_tools_config`); a spec built in code gets the default, the package's own.
        if path is not None:
            context = info.context if isinstance(info.context, dict) else {}
            _import_handler(path, context.get("python_tool_modules", DEFAULT_PYTHON_TOOL_MODULES))
        return path

    @model_validator(mode="after")
    def _one_runner(self) -> ToolSpec:
        if (self.python is None) == (self.http is None):
            raise ValueError("python/http: give exactly one of 'python' or 'http'")
        if self.embedded is not None and self.http is None:
            raise ValueError("embedded: is the fallback of an 'http' tool; use 'python' alone")
        return self

    def remote_available(self, env: Mapping[str, str]) -> bool:
        """Whether the tool's HTTP endpoint is configured (every `${VAR}` it names is set)."""
        if self.http is None:
            return False
        return not any(missing_env(t, env) for t in (self.http.url, *self.http.headers.values()))

    def backend(self, env: Mapping[str, str]) -> Backend | None:
        """What runs the tool under these variables: its Python handler, its HTTP service
        (`remote`), its `embedded` fallback, or nothing (None: unavailable)."""
        if self.http is None:
            return "python"
        if self.remote_available(env):
            return "remote"
        return "embedded" if self.embedded is not None else None

    def available(self, env: Mapping[str, str]) -> bool:
        """False while an HTTP tool's `${VAR}` is unset and it has no embedded backend:
        listed, but never switched on."""
        return self.backend(env) is not None

    @property
    def display_label(self) -> str:
        return self.label or self.name.replace("_", " ").capitalize()


def handler_module_allowed(module_name: str, allowed: Sequence[str]) -> bool:
    """`aircoach` allows `aircoach` and `aircoach.*`, never `aircoach_evil`."""
    return any(
        module_name == package or module_name.startswith(f"{package}.")
        for package in (entry.rstrip(".") for entry in allowed)
        if package
    )


def _import_handler(path: str, allowed: Sequence[str] = DEFAULT_PYTHON_TOOL_MODULES) -> Handler:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"must look like 'package.module:function', got {path!r}")
    # Checked before the import: importing a module runs its code.
    if not handler_module_allowed(module_name, allowed):
        raise ValueError(
            f"module {module_name!r} is not allowed for tool handlers "
            f"(PYTHON_TOOL_MODULES: {list(allowed)})"
        )
    return resolve_handler(path)


def resolve_handler(path: str) -> Handler:
    """The async function a validated `module:function` path names."""
    module_name, _, attr = path.partition(":")
    try:
        handler = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from exc
    except Exception as exc:  # the module's own code failed: still a fault of these docs
        raise ValueError(f"cannot import {path!r}: {type(exc).__name__}: {exc}") from exc
    if not inspect.iscoroutinefunction(handler):
        raise ValueError(f"{path!r} is not an async function")
    return handler


class ToolsConfig(_Strict):
    """The content of `tools.json`."""

    schema_: str | None = Field(default=None, alias="$schema")
    sources_off_warning: str | None = Field(
        default=None,
        description="Section added to the system prompt when every `source` tool is off.",
    )
    tools: list[ToolSpec] = Field(default_factory=list, max_length=MAX_TOOLS)

    @model_validator(mode="after")
    def _unique_names(self) -> ToolsConfig:
        seen: set[str] = set()
        for spec in self.tools:
            if spec.name in seen:
                raise ValueError(f"tool {spec.name!r} is declared twice")
            seen.add(spec.name)
        return self


def tools_json_schema() -> dict[str, Any]:
    """The published JSON Schema of `tools.json` (committed as docs/tools.schema.json)."""
    schema = ToolsConfig.model_json_schema(by_alias=True)
    schema["$id"] = "https://aircoach.dev/schemas/tools.schema.json"
    return schema


@functools.lru_cache(maxsize=8)
def parse_tools_config(
    text: str, python_tool_modules: tuple[str, ...] = DEFAULT_PYTHON_TOOL_MODULES
) -> ToolsConfig:
    """Validate a `tools.json`; a ConfigError names the tool and the field at fault.
    `python:` handlers must live in `python_tool_modules` (packages, with their sub-modules)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{TOOLS_DOC}: not valid JSON: {exc}") from exc
    try:
        return ToolsConfig.model_validate(raw, context={"python_tool_modules": python_tool_modules})
    except ValidationError as exc:
        reasons = "; ".join(_describe(e, raw) for e in exc.errors())
        raise ConfigError(f"{TOOLS_DOC}: {reasons}") from None


def _describe(error: Any, raw: Any) -> str:
    loc = list(error["loc"])
    where = ".".join(str(part) for part in loc) or "(top level)"
    if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int):
        entry = raw["tools"][loc[1]] if isinstance(raw.get("tools"), list) else {}
        name = entry.get("name") if isinstance(entry, dict) else None
        field = ".".join(str(part) for part in loc[2:])
        label = f"tool {name!r}" if name else f"tool #{loc[1]}"
        where = f"{label}: {field}" if field else label
    return f"{where}: {error['msg']}"


def check_tools_doc(
    contents: Mapping[str, str],
    python_tool_modules: tuple[str, ...] = DEFAULT_PYTHON_TOOL_MODULES,
) -> None:
    """PromptStore validation hook: docs with a bad `tools.json` never become the snapshot."""
    if TOOLS_DOC in contents:
        parse_tools_config(contents[TOOLS_DOC], python_tool_modules)


class ToolRegistry:
    """The tools of one prompt snapshot, with the variables their endpoints need."""

    def __init__(
        self,
        specs: list[ToolSpec],
        *,
        sources_off_warning: str | None = None,
        env: Mapping[str, str] | None = None,
    ):
        self.specs: dict[str, ToolSpec] = {spec.name: spec for spec in specs}
        self.sources_off_warning = sources_off_warning
        self.env: Mapping[str, str] = env or {}

    @classmethod
    def from_docs(
        cls,
        contents: Mapping[str, str],
        env: Mapping[str, str] | None = None,
        python_tool_modules: tuple[str, ...] = DEFAULT_PYTHON_TOOL_MODULES,
    ) -> ToolRegistry:
        """The registry of one prompt snapshot; no `tools.json` means no tools."""
        if TOOLS_DOC not in contents:
            return cls([], env=env)
        config = parse_tools_config(contents[TOOLS_DOC], python_tool_modules)
        return cls(config.tools, sources_off_warning=config.sources_off_warning, env=env)

    def available(self, spec: ToolSpec) -> bool:
        return spec.available(self.env)

    @property
    def names(self) -> list[str]:
        return sorted(self.specs)

    def unknown(self, toggles: Mapping[str, bool] | None) -> list[str]:
        return sorted(set(toggles or {}) - set(self.specs))

    def switches(self, toggles: Mapping[str, bool] | None) -> dict[str, bool]:
        """Every tool, on or off for one request: the client's switches over the defaults.
        An unavailable tool stays off even when asked for (clients see `available` in
        /api/tools), so a service taken offline never turns requests into errors."""
        toggles = toggles or {}
        return {
            name: self.available(spec) and toggles.get(name, spec.default_enabled)
            for name, spec in self.specs.items()
        }

    def enabled(self, toggles: Mapping[str, bool] | None) -> list[ToolSpec]:
        """The tools switched on for one request, in config order."""
        return [self.specs[name] for name, on in self.switches(toggles).items() if on]

    def log_line(self, toggles: Mapping[str, bool] | None) -> str:
        """`tools a=1 b=0`: compact and greppable, one per request."""
        flags = " ".join(f"{name}={int(on)}" for name, on in self.switches(toggles).items())
        return f"tools {flags}".rstrip()

    def system_prompt(self, prompt: str, enabled: list[ToolSpec]) -> str:
        """The prompt, plus the warning when every source tool is off for this request."""
        has_sources = any(spec.source for spec in self.specs.values())
        sources_on = any(spec.source for spec in enabled)
        if self.sources_off_warning and has_sources and not sources_on:
            return f"{prompt}\n\n{self.sources_off_warning.strip()}"
        return prompt

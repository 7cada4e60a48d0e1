"""tools.json: validation at load, the published schema, the registry and reloads."""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import jsonschema
import pytest

from aircoach.errors import ConfigError
from aircoach.settings import Settings
from aircoach.tools.registry import SCHEMA_FILE, ToolRegistry, parse_tools_config, tools_json_schema
from tests.tools.conftest import shipped_tools, write_tools


def test_shipped_config_is_valid_and_declares_the_four_tools():
    config = parse_tools_config(json.dumps(shipped_tools()))
    specs = {t.name: t for t in config.tools}
    assert list(specs) == [
        "domanda_teoria",
        "verifica_risposta",
        "web_search",
        "kb_search",
        "lex_search",
    ]
    grade = specs["verifica_risposta"]
    assert grade.python == "aircoach.quiz.tools:verifica_risposta"
    # capitolo and numero name the question; a mock exam's grading names `esame` instead.
    assert not grade.return_direct and grade.parameters["required"] == ["risposta"]
    assert {"capitolo", "numero", "esame"} <= set(grade.parameters["properties"])
    assert specs["domanda_teoria"].python == "aircoach.quiz.tools:domanda_teoria"
    assert specs["domanda_teoria"].return_direct and not specs["domanda_teoria"].source
    assert {n for n, s in specs.items() if s.source} == {"kb_search", "lex_search"}
    assert specs["web_search"].default_enabled is False
    lex = specs["lex_search"].http
    assert lex is not None and lex.fixed == {"version": "vigente", "language": "ita"}
    assert lex.caps == {"top_k": 20} and lex.retry.retries == 1 and lex.retry.backoff_s == 1.0
    assert lex.retry.on_status == [502, 503, 504] and lex.retry.on_timeout
    web = specs["web_search"].http
    assert web is not None and web.method == "GET" and web.url == "${SEARXNG_URL}/search"
    assert config.sources_off_warning and "NON inventare" in config.sources_off_warning


def test_http_tools_are_unavailable_until_their_url_variable_is_set():
    """kb_search has an embedded backend: available either way, remote once its URL is set."""
    specs = parse_tools_config(json.dumps(shipped_tools())).tools
    registry = ToolRegistry(specs, env={})
    assert {n: s.backend(registry.env) for n, s in registry.specs.items()} == {
        "domanda_teoria": "python",
        "verifica_risposta": "python",
        "web_search": None,
        "kb_search": "embedded",
        "lex_search": None,
    }
    available = {n for n, s in registry.specs.items() if registry.available(s)}
    assert available == {"domanda_teoria", "verifica_risposta", "kb_search"}
    registry = ToolRegistry(specs, env={"KB_SEARCH_URL": "http://127.0.0.1:9/kb"})
    assert registry.specs["kb_search"].backend(registry.env) == "remote"
    available = {n for n, s in registry.specs.items() if registry.available(s)}
    assert available == {"domanda_teoria", "verifica_risposta", "kb_search"}


def test_an_embedded_backend_is_the_fallback_of_an_http_tool_only():
    config = shipped_tools()
    kb = next(t for t in config["tools"] if t["name"] == "kb_search")
    alone = {**kb, "python": kb["embedded"]}
    del alone["http"]
    config["tools"] = [alone]
    with pytest.raises(ConfigError, match="embedded: is the fallback of an 'http' tool"):
        parse_tools_config(json.dumps(config))
    config["tools"] = [{**kb, "embedded": "os:system"}]
    with pytest.raises(ConfigError, match="not allowed for tool handlers"):
        parse_tools_config(json.dumps(config))


def test_committed_schema_is_the_generated_one():
    committed = json.loads(SCHEMA_FILE.read_text("utf-8"))
    assert committed == tools_json_schema(), "run `make tools-schema` and commit the result"


def test_schema_accepts_the_shipped_config_and_rejects_two_runners():
    schema = tools_json_schema()
    jsonschema.validate(shipped_tools(), schema)
    config = shipped_tools()
    config["tools"][0]["http"] = {"url": "http://127.0.0.1:9"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, schema)


def _mutated(change) -> str:
    config = copy.deepcopy(shipped_tools())
    change({t["name"]: t for t in config["tools"]}, config)
    return json.dumps(config)


def _set(tool: str, path: str, value: Any):
    def change(tools: dict[str, Any], config: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = tools[tool]
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_set("kb_search", "http.timeout_s", -1), "tool 'kb_search': http.timeout_s:"),
        (
            _set("lex_search", "http.retry.retries", "twice"),
            "tool 'lex_search': http.retry.retries:",
        ),
        (_set("web_search", "http.method", "DELETE"), "tool 'web_search': http.method:"),
        (_set("kb_search", "http.url", "ftp://x"), "tool 'kb_search': http.url:"),
        (_set("kb_search", "http.timeout", 5), "tool 'kb_search': http.timeout: Extra inputs"),
        (_set("lex_search", "format.max_results", 0), "tool 'lex_search': format.max_results:"),
        (_set("kb_search", "parameters", {"type": "string"}), "tool 'kb_search': parameters:"),
        (
            _set("kb_search", "parameters.properties.q", {"type": "strin"}),
            "tool 'kb_search': parameters: Value error, not a valid JSON Schema: "
            "properties/q/type: 'strin' is not valid",
        ),
        (
            _set("domanda_teoria", "python", "aircoach.quiz.tools:nope"),
            "tool 'domanda_teoria': python: Value error, cannot import 'aircoach.quiz.tools:nope'",
        ),
        (
            _set("domanda_teoria", "http", {"url": "http://127.0.0.1:9"}),
            "tool 'domanda_teoria': Value error, python/http: give exactly one",
        ),
        (_set("web_search", "name", "web search"), "tool 'web search': name:"),
        (
            lambda tools, config: tools["kb_search"].pop("description"),
            "tool 'kb_search': description: Field required",
        ),
        (
            lambda tools, config: config["tools"].append(dict(tools["kb_search"])),
            "tool 'kb_search' is declared twice",
        ),
        (lambda tools, config: config.update(extra=1), "extra: Extra inputs are not permitted"),
        (
            _set("kb_search", "http.headers", {"X-Key": "${AWS_SECRET_ACCESS_KEY}"}),
            "tool 'kb_search': http: Value error, variable 'AWS_SECRET_ACCESS_KEY' may not be "
            "used: only SEARXNG_URL, KB_SEARCH_URL, LEX_SEARCH_URL and TOOL_* variables",
        ),
        (
            _set("web_search", "http.url", "https://evil.example/?s=${UPDATE_DOCS_SECRET}"),
            "tool 'web_search': http: Value error, variable 'UPDATE_DOCS_SECRET' may not be used",
        ),
        (
            _set("lex_search", "http.url", "${MONGODB_URI}"),
            "tool 'lex_search': http: Value error, variable 'MONGODB_URI' may not be used",
        ),
        (
            _set("kb_search", "http.headers", {"Authorization": "Bearer ${tool_kb_token}"}),
            "variable 'tool_kb_token' may not be used",
        ),
        (
            _set("domanda_teoria", "python", "os:system"),
            "tool 'domanda_teoria': python: Value error, module 'os' is not allowed for tool "
            "handlers (PYTHON_TOOL_MODULES: ['aircoach'])",
        ),
        (
            _set("domanda_teoria", "python", "aircoach_extra.tools:run"),
            "module 'aircoach_extra.tools' is not allowed",
        ),
        (
            _set("domanda_teoria", "python", "aircoach.settings:get_settings"),
            "'aircoach.settings:get_settings' is not an async function",
        ),
    ],
)
def test_invalid_config_is_rejected_naming_tool_and_field(change, expected):
    with pytest.raises(ConfigError) as error:
        parse_tools_config(_mutated(change))
    assert str(error.value).startswith("tools.json: ")
    assert expected in str(error.value)


def test_a_schema_refused_once_is_refused_on_every_later_load():
    # The meta-schema check is kept per schema text (aircoach.json_schema): what it keeps for a
    # bad schema must be the refusal, not a pass.
    bad = _mutated(_set("kb_search", "parameters.properties.q", {"type": "strin"}))
    for _ in range(2):
        with pytest.raises(ConfigError, match="properties/q/type: 'strin' is not valid"):
            parse_tools_config(bad)


def test_the_allowed_variables_pass():
    config = shipped_tools()
    kb = next(t for t in config["tools"] if t["name"] == "kb_search")
    kb["http"]["headers"] = {"Authorization": "Bearer ${TOOL_KB_TOKEN}"}
    kb["http"]["url"] = "${TOOL_KB_URL}/search"
    (spec,) = [t for t in parse_tools_config(json.dumps(config)).tools if t.name == "kb_search"]
    assert spec.http is not None and spec.http.headers["Authorization"].endswith("${TOOL_KB_TOKEN}")


def test_a_handler_outside_the_allowed_modules_is_refused_before_it_is_imported():
    config = shipped_tools()
    config["tools"][0]["python"] = "tests.tools.import_canary:handler"
    with pytest.raises(ConfigError, match=r"module 'tests\.tools\.import_canary' is not allowed"):
        parse_tools_config(json.dumps(config))
    assert "tests.tools.import_canary" not in sys.modules
    # A deployment (or a test) adds its own packages through PYTHON_TOOL_MODULES.
    allowed = parse_tools_config(json.dumps(config), ("aircoach", "tests"))
    assert allowed.tools[0].python == "tests.tools.import_canary:handler"
    assert "tests.tools.import_canary" in sys.modules


def test_python_tool_modules_is_a_setting(monkeypatch):
    monkeypatch.setenv("PYTHON_TOOL_MODULES", '["aircoach", "my_company.tools"]')
    assert Settings(_env_file=None).python_tool_modules == ("aircoach", "my_company.tools")
    assert Settings(_env_file=None, tool_env={}).tool_env == {}


async def test_a_reload_naming_a_secret_is_refused_and_the_old_docs_keep_serving(
    client, auth, docs_dir
):
    admin = auth(permissions=["admin:docs"])
    before = (await client.post("/api/update_docs", headers=admin)).json()["prompt_version"]
    config = shipped_tools()
    (web_search,) = [tool for tool in config["tools"] if tool["name"] == "web_search"]
    web_search["http"]["headers"] = {"X-Api-Key": "${GOOGLE_API_KEY}"}
    write_tools(docs_dir, config)
    reload = await client.post("/api/update_docs", headers=admin)
    assert reload.status_code == 422 and reload.json()["error"] == "invalid_docs"
    assert (
        "tool 'web_search': http: Value error, variable 'GOOGLE_API_KEY'"
        in reload.json()["message"]
    )
    assert (await client.get("/api/health")).json()["prompt"]["version"] == before


def test_invalid_json_is_rejected():
    with pytest.raises(ConfigError, match=r"tools.json: not valid JSON"):
        parse_tools_config('{"tools": [')


async def test_an_invalid_config_at_first_load_is_a_503_and_health_says_unavailable(
    client, auth, docs_dir
):
    write_tools(docs_dir, _mutated(_set("kb_search", "http.timeout_s", 0)))
    response = await client.get("/api/tools", headers=auth())
    assert response.status_code == 503 and response.json()["error"] == "prompt_unavailable"
    health = (await client.get("/api/health")).json()["prompt"]
    # Health is public: it names the kind of fault; the full message is in the log.
    assert health["status"] == "unavailable" and health["error"] == "ConfigError"


async def test_a_bad_reload_keeps_the_last_good_config(client, auth, docs_dir):
    admin = auth(permissions=["admin:docs"])
    before = await client.get("/api/tools", headers=auth())
    assert before.status_code == 200
    good_version = (await client.get("/api/health")).json()["prompt"]["version"]

    write_tools(docs_dir, _mutated(_set("lex_search", "http.caps", {"top_k": "many"})))
    reload = await client.post("/api/update_docs", headers=admin)
    assert reload.status_code == 422, reload.text
    assert reload.json()["error"] == "invalid_docs"
    assert "tool 'lex_search': http.caps.top_k" in reload.json()["message"]
    # Requests keep the last good docs, tools included (prompt_ttl_s=0: they revalidate too).
    after = await client.get("/api/tools", headers=auth())
    assert after.status_code == 200 and after.json() == before.json()
    assert (await client.get("/api/health")).json()["prompt"]["version"] == good_version

    config = shipped_tools()
    config["tools"] = [t for t in config["tools"] if t["name"] != "web_search"]
    write_tools(docs_dir, config)
    reload = await client.post("/api/update_docs", headers=admin)
    assert reload.status_code == 200 and reload.json()["prompt_version"] != good_version
    names = [t["name"] for t in (await client.get("/api/tools", headers=auth())).json()]
    assert names == ["domanda_teoria", "verifica_risposta", "kb_search", "lex_search"]


async def test_tools_json_counts_in_the_version_but_not_in_the_prompt_text(client, auth, docs_dir):
    admin = auth(permissions=["admin:docs"])
    first = (await client.post("/api/update_docs", headers=admin)).json()
    config = shipped_tools()
    config["tools"][0]["examples"].append("Un'altra domanda")
    write_tools(docs_dir, config)
    second = (await client.post("/api/update_docs", headers=admin)).json()
    assert second["prompt_version"] != first["prompt_version"]
    assert second["system_prompt"] == first["system_prompt"]
    assert "domanda_teoria" in first["system_prompt"] and '"tools"' not in first["system_prompt"]


def test_no_tools_json_means_no_tools():
    registry = ToolRegistry.from_docs({"00.md": "# prompt"})
    assert registry.specs == {} and registry.system_prompt("p", []) == "p"


def test_a_label_is_short_and_defaults_to_the_tools_name():
    config = shipped_tools()
    by_name = {t["name"]: t for t in config["tools"]}
    assert all(t.get("label") for t in config["tools"]), "every shipped tool has a label"
    del by_name["web_search"]["label"]
    specs = {t.name: t for t in parse_tools_config(json.dumps(config)).tools}
    assert specs["web_search"].display_label == "Web search"
    assert specs["kb_search"].display_label == "Manuale del corso"
    by_name["kb_search"]["label"] = "x" * 41
    with pytest.raises(ConfigError, match=r"tool 'kb_search': label"):
        parse_tools_config(json.dumps(config))


async def test_a_reload_with_no_prompt_doc_is_invalid_docs_naming_it(client, auth, docs_dir):
    admin = auth(permissions=["admin:docs"])
    good_version = (await client.post("/api/update_docs", headers=admin)).json()["prompt_version"]
    for doc in docs_dir.glob("*.md"):
        doc.unlink()
    reload = await client.post("/api/update_docs", headers=admin)
    # Not a source outage (503): the admin learns what is wrong with the docs.
    assert reload.status_code == 422 and reload.json()["error"] == "invalid_docs"
    assert "no top-level .md docs" in reload.json()["message"]
    assert (await client.get("/api/health")).json()["prompt"]["version"] == good_version


def test_a_handler_whose_module_fails_to_import_is_invalid_docs_naming_the_tool():
    config = shipped_tools()
    config["tools"][0]["python"] = "tests.tools.broken_module:handler"
    with pytest.raises(ConfigError, match=r"tool 'domanda_teoria': python: .*RuntimeError"):
        parse_tools_config(json.dumps(config), ("aircoach", "tests.tools"))

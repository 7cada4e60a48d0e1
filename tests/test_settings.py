"""Settings: embedded defaults, and the dev issuer refused where it must not run."""

from __future__ import annotations

import pytest

from aircoach.errors import ConfigError
from aircoach.settings import ROOT, Settings


def test_embedded_defaults_need_no_environment(tmp_path):
    s = Settings(_env_file=None, data_dir=tmp_path)
    assert s.uses_dev_issuer and s.resolved_model_provider == "offline"
    assert s.sqlite_file == tmp_path / "aircoach.sqlite3"
    assert (s.history_limit, s.memory_max_threads, s.prompt_ttl_s) == (10, 1000, 60.0)


@pytest.mark.parametrize("variable", ["AWS_LAMBDA_FUNCTION_NAME", "VERCEL"])
def test_dev_issuer_is_refused_on_serverless(monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    with pytest.raises(ConfigError, match="AUTH0_DOMAIN"):
        Settings(_env_file=None)
    monkeypatch.setenv("AUTH0_DOMAIN", "tenant.eu.auth0.com")
    assert not Settings(_env_file=None).uses_dev_issuer


def test_gemini_is_chosen_when_a_key_is_present(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    assert Settings(_env_file=None).resolved_model_provider == "gemini"


def test_bad_values_name_the_setting(monkeypatch):
    monkeypatch.setenv("HISTORY_LIMIT", "-1")
    with pytest.raises(ValueError, match="history_limit"):
        Settings(_env_file=None)


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

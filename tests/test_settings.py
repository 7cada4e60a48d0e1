"""Settings: embedded defaults, and the dev issuer refused where it must not run."""

from __future__ import annotations

import pytest

from aircoach.errors import ConfigError
from aircoach.settings import Settings


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
    from aircoach.settings import ROOT

    documented = (ROOT / ".env.example").read_text()
    missing = [
        name.upper() for name in Settings.model_fields if f"# {name.upper()}=" not in documented
    ]
    assert missing == []

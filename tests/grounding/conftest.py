"""The fake model servers of tests/llm, for the end-to-end tests of the guard."""

from tests.llm.conftest import gemini_api, gemini_settings, model_settings, openai_api

__all__ = ["gemini_api", "gemini_settings", "model_settings", "openai_api"]

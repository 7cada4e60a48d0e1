"""Validated settings, read from the environment (and `.env`), injected where needed.

There is no module-level instance: `create_app(settings)` takes one, and `get_settings()`
builds one from the environment for the entry points.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aircoach.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

DEV_ISSUER = "https://aircoach.dev.local/"


def running_on_serverless(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get("AWS_LAMBDA_FUNCTION_NAME") or env.get("VERCEL"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    # Local state (dev keys, SQLite). On Lambda and Vercel only /tmp is writable.
    data_dir: Path = Field(
        default_factory=lambda: (
            Path("/tmp/aircoach") if running_on_serverless() else ROOT / ".aircoach"
        )
    )
    log_level: str = "INFO"
    cors_origins: list[str] = Field(default_factory=lambda: ["*"])

    # Auth: Auth0 when AUTH0_DOMAIN is set, else the local dev issuer.
    auth0_domain: str | None = None
    auth0_audience: str = "https://api.aircoach.dev"
    auth0_mgmt_client_id: str | None = None
    auth0_mgmt_client_secret: str | None = None
    auth_leeway_s: int = 30
    jwks_refetch_cooldown_s: float = 30.0
    admin_permission: str = "admin:docs"

    # Prompt docs: the local folder, or S3 when PROMPT_BUCKET is set.
    prompt_docs_dir: Path = Field(default=ROOT / "prompt_docs")
    prompt_bucket: str | None = None
    prompt_prefix: str = "prompt_docs/"
    aws_region: str = "eu-west-1"
    aws_endpoint_url: str | None = None
    prompt_ttl_s: float = Field(default=60.0, ge=0)
    s3_timeout_s: float = Field(default=5.0, gt=0)
    s3_max_attempts: int = Field(default=3, ge=1, le=10)
    update_docs_secret: str | None = None
    update_docs_max_skew_s: int = Field(default=300, ge=1)

    # Chat store: SQLite under data_dir, or MongoDB when MONGODB_URI is set.
    sqlite_path: Path | None = None
    mongodb_uri: str | None = None
    mongodb_db: str = "aircoach"
    mongodb_chats_collection: str = "chats"
    mongodb_quiz_collection: str = "quiz"
    store_timeout_s: float = Field(default=5.0, gt=0)

    # Memory
    history_limit: int = Field(default=10, ge=0, le=200)
    memory_max_threads: int = Field(default=1000, ge=1)

    # Model
    model_provider: Literal["gemini", "openai", "offline"] | None = None
    model_name: str = "gemini-2.5-flash"
    model_temperature: float = Field(default=0.3, ge=0, le=2)
    model_timeout_s: float = Field(default=30.0, gt=0)
    model_max_retries: int = Field(default=1, ge=0, le=5)
    model_base_url: str | None = None
    model_fallback: str | None = None
    google_api_key: str | None = None
    gemini_api_key: str | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None

    @property
    def sqlite_file(self) -> Path:
        return self.sqlite_path or self.data_dir / "aircoach.sqlite3"

    @property
    def uses_dev_issuer(self) -> bool:
        return not self.auth0_domain

    @property
    def resolved_model_provider(self) -> str:
        if self.model_provider:
            return self.model_provider
        return "gemini" if (self.google_api_key or self.gemini_api_key) else "offline"

    @model_validator(mode="after")
    def _dev_issuer_only_on_a_laptop(self) -> Settings:
        if self.uses_dev_issuer and running_on_serverless():
            raise ConfigError(
                "AUTH0_DOMAIN is not set: the local dev token issuer is refused on "
                "Lambda/Vercel (AWS_LAMBDA_FUNCTION_NAME or VERCEL is set)"
            )
        return self


def get_settings() -> Settings:
    """Build settings from the environment; the entry points call this once per app."""
    return Settings()

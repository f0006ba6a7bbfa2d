"""Every setting Causeway reads, from ``CAUSEWAY_*`` variables or ``.env``.

Only the composition roots (``app.main``, ``app.cli``) build a ``Settings``; everything
else is handed the values it needs. Each field is documented in README.md, and a unit
test keeps that table and this class in step.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PostgresDsn
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="CAUSEWAY_", env_file=".env", extra="ignore", frozen=True
    )

    database_url: PostgresDsn | None = None  # None: start the embedded PostgreSQL
    data_dir: Path = Path(".causeway")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    db_pool_size: int = Field(default=5, ge=1)
    max_attributes_bytes: int = Field(default=1024, ge=128)
    max_event_data_bytes: int = Field(default=1 << 20, ge=1)
    max_request_bytes: int = Field(default=16 << 20, ge=1)
    max_batch_events: int = Field(default=10_000, ge=1)
    replay_fetch_rows: int = Field(default=1000, ge=1)
    statement_timeout_ms: int = Field(default=30_000, ge=0)

"""The embedded PostgreSQL (``pgserver``) used when no database URL is configured.

The data lives under ``<data_dir>/pg`` and survives restarts. ``pgserver`` runs the
server as an unprivileged user when started as root, so this also works in CI.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from sqlalchemy import URL, make_url


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir.resolve() / "pg"
        self._server: Any = None

    def start(self) -> URL:
        # Imported here: it is heavy, and only needed when no database URL is set. Its
        # platformdirs warns when XDG_RUNTIME_DIR is unset (as under root), harmlessly.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from pgserver.postgres_server import get_server

        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._server = get_server(self._data_dir, cleanup_mode="stop")
        return make_url(self._server.get_uri()).set(drivername="postgresql+psycopg")

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None

"""The embedded PostgreSQL (``pgserver``) used when no database URL is configured.

The data lives under ``<data_dir>/pg`` and survives restarts. ``pgserver`` runs the
server as an unprivileged user when started as root, so this also works in CI. What
pgserver reports (initdb's output, every pg_ctl call) goes to ``<data_dir>/postgres.log``,
not to the console: a newcomer's first lines are the service's address and key.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from sqlalchemy import URL, make_url

LOG_FILE = "postgres.log"
_pgserver_log = logging.getLogger("pgserver")


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir.resolve() / "pg"
        self.log_path = data_dir.resolve() / LOG_FILE
        self._server: Any = None
        self._log: logging.Handler | None = None

    def start(self) -> URL:
        # Imported here: it is heavy, and only needed when no database URL is set. Its
        # platformdirs warns when XDG_RUNTIME_DIR is unset (as under root), harmlessly.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from pgserver.postgres_server import get_server

        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._log_to_file()
        self._server = get_server(self._data_dir, cleanup_mode="stop")
        return make_url(self._server.get_uri()).set(drivername="postgresql+psycopg")

    def stop(self) -> None:
        try:
            if self._server is not None:
                self._server.cleanup()
                self._server = None
        finally:
            if self._log is not None:
                _pgserver_log.removeHandler(self._log)
                self._log.close()
                self._log = None

    def _log_to_file(self) -> None:
        """pgserver's messages, errors too, to the log file only (a failed start names it)."""
        if self._log is None:
            self._log = logging.FileHandler(self.log_path, encoding="utf-8")
            self._log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            _pgserver_log.addHandler(self._log)
            _pgserver_log.setLevel(logging.INFO)
            _pgserver_log.propagate = False

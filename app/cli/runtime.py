"""What every command needs: the settings, the database (the one named, or the
embedded one), and a one-line failure with exit code 2."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import typer
from alembic.util import CommandError
from pydantic import ValidationError
from rich.console import Console
from sqlalchemy import URL

from app.db.embedded import EmbeddedPostgres
from app.db.schema import (
    current_revision,
    is_known_revision,
    schema_problem,
    upgrade_to_head,
)
from app.settings import Settings

err_console = Console(stderr=True)
ADMIN_KEY_FILE = "admin.key"
ADDRESS_FILE = "address"  # where `serve` answers, for `causeway demo`
SERVE_LOCK_FILE = "serve.lock"  # held by the one `serve` of an embedded PostgreSQL


def fail(detail: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {detail}", err=True)
    raise typer.Exit(code)


def once(note: str = "", **given: list[Any] | None) -> dict[str, Any]:
    """The one value of each option of ``given`` (declared as lists: click keeps the last
    of a single option given twice, with exit 0), None when it is not given; one given
    more than once is refused (``note`` says which may be repeated)."""
    for name, values in given.items():
        if values is not None and len(values) > 1:
            also = f" ({note})" if note else ""
            fail(f"--{name} is given {len(values)} times: it takes one value{also}")
    return {name: values[0] if values else None for name, values in given.items()}


def announce(settings: Settings, line: str) -> None:
    """A line for the operator of a long-running command, on stderr: a log line when the
    logs are JSON (``CAUSEWAY_LOG_FORMAT``), so that every line there parses as one."""
    if settings.log_format == "json":
        logging.getLogger("causeway").info(line)
    else:
        typer.echo(line, err=True)


def utf8(value: str | list[str] | None) -> str | list[str] | None:
    """A text option or argument that goes to the database (or each of a repeated one):
    bytes that are not UTF-8 (which Python keeps as lone surrogates) are a usage error
    here, not a traceback from the driver later."""
    for text in [value] if isinstance(value, str) else value or []:
        try:
            text.encode()
        except UnicodeEncodeError:
            raise typer.BadParameter("is not valid UTF-8 text") from None
    return value


def plain_integer(low: int, high: int) -> Callable[[str], int]:
    """A Typer ``parser``: a whole number from ``low`` to ``high`` in the digits 0-9 alone.
    Typer reads an ``int`` option with ``int()``, which takes ``1_0`` (10), ``+2`` and
    `` 2 ``, so a mangled ``--after`` resumed somewhere else and the export silently
    lacked events."""

    def parse(text: str) -> int:
        if text.isascii() and text.isdigit() and len(text) <= len(str(high)):
            number = int(text)
            if low <= number <= high:
                return number
        raise typer.BadParameter(
            f"{text[:64]!r} is not a whole number from {low} to {high} in the digits 0-9 alone"
        )

    return parse


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        fail(f"setting CAUSEWAY_{str(first['loc'][0]).upper()}: {first['msg']}")
    except UnicodeDecodeError as exc:  # the .env file in the working directory
        fail(f".env is not UTF-8: {exc.reason} at byte {exc.start}")


@dataclass(frozen=True, slots=True)
class Database:
    url: URL | str
    embedded: EmbeddedPostgres | None

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


@contextmanager
def database(settings: Settings) -> Iterator[Database]:
    """The configured database, or the embedded server started for the block. SIGTERM
    stops the block as Ctrl-C does (``sigterm_exits``), from before the embedded server
    starts: under the default handler it ended the process at once, the server left
    running."""
    if settings.database_url is not None:
        yield Database(settings.database_url, None)
        return
    embedded = EmbeddedPostgres(settings.data_dir)
    with sigterm_exits():
        try:
            url = embedded.start()
        except Exception as exc:  # pgserver raises assorted errors; report any of them
            embedded.stop()
            fail(
                f"could not start the embedded PostgreSQL in {settings.data_dir}: {exc} "
                f"(its log: {embedded.log_path})",
                1,
            )
        except BaseException:  # SIGTERM or Ctrl-C while it started
            embedded.stop()
            raise
        db = Database(url, embedded)
        try:
            yield db
        finally:
            db.close()


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """SIGTERM stops the command as Ctrl-C does: ``SystemExit(143)`` (128 + 15, a shell's
    status for SIGTERM), so that the blocks it leaves clean up (the embedded PostgreSQL
    is stopped). uvicorn shuts down on SIGTERM, restores the handler it found and raises
    the signal again; under the default handler that ended the process at once."""

    def exit_now(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def require_head(url: URL | str, advice: str) -> None:
    """Exit 2 unless the database answers and its schema is at the Alembic head (a
    database it cannot reach is reported by ``main``, in one line too)."""
    problem = schema_problem(url, advice)
    if problem is not None:
        fail(problem)


def migrate_to_head(url: URL | str) -> None:
    """Upgrade the schema to the Alembic head; exit 2 with one line when the database is
    at a revision this release does not know (Alembic would raise)."""
    _refuse_unknown(current_revision(url))
    try:
        upgrade_to_head(url)
    except CommandError as refused:  # a migration that will not run on what is stored
        fail(str(refused))


def _refuse_unknown(revision: str | None) -> None:
    if revision is not None and not is_known_revision(revision):
        fail(
            f"the database schema is at revision {revision}, which this release of Causeway "
            "does not know (a newer release made it): run that release, or a newer one"
        )


def url_text(url: URL | str) -> str:
    return url if isinstance(url, str) else url.render_as_string(hide_password=False)

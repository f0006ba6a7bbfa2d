"""Log lines: human-readable text (the default) or one JSON object per line
(``CAUSEWAY_LOG_FORMAT=json``), each carrying the request id and tenant of the request it
was written for, and the trace and span ids when an OpenTelemetry span is active.

What a request is known by lives in two context variables, ``request_id`` and ``tenant``:
the web layer sets them once per request (``app.web.request_ids``, the key check), and
every line logged while the request is answered, in its task or in a task it started,
reads them here. Setting them costs a context variable's ``set``; reading them happens
only when a line is written.

``logging_config`` is a ``logging.config.dictConfig`` dictionary: ``causeway serve`` hands
it to uvicorn (``log_config``), so each of its worker processes configures its own
logging with it, uvicorn's loggers and ours alike; the CLI's other long-running commands
apply it with ``configure``.
"""

from __future__ import annotations

import logging
import logging.config
import re
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from random import getrandbits
from typing import Any, Literal

import orjson
from opentelemetry import trace

LogFormat = Literal["text", "json"]

request_id: ContextVar[str | None] = ContextVar("causeway_request_id", default=None)
tenant: ContextVar[str | None] = ContextVar("causeway_tenant", default=None)

# A client's X-Request-Id is kept when it is 1 to 128 of these characters (a UUID, a W3C
# trace id, a ULID, base64 and the like): anything else (spaces, quotes, control
# characters, a megabyte) would make log lines ambiguous or large, so it is replaced.
_SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=@~-]{1,128}")


def request_id_for(sent: bytes | None) -> str:
    """The id of a request whose ``X-Request-Id`` header was ``sent`` (None: none):
    that id when it is sane, else 32 fresh random hex digits. (An id need not be
    unguessable, only unique: ``random`` takes half the time of ``os.urandom``, and
    reseeds itself in a forked process.)"""
    if sent is not None and _SANE_REQUEST_ID.fullmatch(sent):
        return sent.decode("ascii")
    return f"{getrandbits(128):032x}"


def _context() -> dict[str, str]:
    """What is known of the request and the span a line was written in."""
    known: dict[str, str] = {}
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        known["trace_id"] = format(span.trace_id, "032x")
        known["span_id"] = format(span.span_id, "016x")
    who = tenant.get()
    if who is not None:
        known["tenant"] = who
    rid = request_id.get()
    if rid is not None:
        known["request_id"] = rid
    return known


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, RFC 3339), ``level``, ``logger``,
    ``message``, then ``trace_id``/``span_id``, ``tenant`` and ``request_id`` when known,
    and ``exception`` (the traceback) when the line carries one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="microseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_context())
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line).decode()


# C0 and C1 controls and DEL as escapes (\\n, \\x1b), the tab kept.
_ESCAPED = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}


class TextFormatter(logging.Formatter):
    """``LEVEL logger: message``, then what is known of the request in brackets:
    ``[request 4f2c…, tenant acme, trace 0af7…]``."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The line itself, its control characters escaped: a message quotes what clients
        send (a request's path, percent-decoded), and a newline in it would start a line
        that looks like the service's own (the traceback, added after, keeps its lines)."""
        return super().formatMessage(record).translate(_ESCAPED)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        known = _context()
        if not known:
            return text
        about = [
            f"{name} {known[key]}"
            for key, name in (
                ("request_id", "request"),
                ("tenant", "tenant"),
                ("trace_id", "trace"),
            )
            if key in known
        ]
        head, newline, rest = text.partition("\n")  # a traceback stays below its line
        return f"{head} [{', '.join(about)}]{newline}{rest}"


def logging_config(log_format: LogFormat, level: str = "INFO") -> dict[str, Any]:
    """The ``dictConfig`` of a serving process: the root logger and uvicorn's, in
    ``log_format``; uvicorn's access log on stdout as uvicorn has it, the rest on stderr.
    Loggers it does not name keep their handlers (the embedded PostgreSQL's goes to its
    file)."""
    formatter = {"()": JsonFormatter if log_format == "json" else TextFormatter}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"causeway": formatter},
        "handlers": {
            "stderr": {"class": f"{__name__}.ConsoleHandler", "formatter": "causeway"},
            "stdout": {
                "class": f"{__name__}.ConsoleHandler",
                "formatter": "causeway",
                "to": "stdout",
            },
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["stdout"], "level": level, "propagate": False},
            # A worker process imports Alembic after this is applied, and each of its
            # plugins would say so (the migrations' own lines stay).
            "alembic.runtime.plugins": {"level": "WARNING"},
        },
    }


class ConsoleHandler(logging.Handler):
    """Each line to ``sys.stderr`` (or ``sys.stdout``) as it is when the line is written.
    ``logging.StreamHandler`` keeps the stream it was set up with: set up while the stream
    was a stand-in (a test runner's captured output, a CLI invoked in process), it wrote
    to that one after it was closed, and every later line failed with a traceback."""

    def __init__(self, to: Literal["stderr", "stdout"] = "stderr") -> None:
        super().__init__()
        self.to = to

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = getattr(sys, self.to)
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def configure(log_format: LogFormat, level: str = "INFO") -> None:
    """Log in ``log_format`` from this process (a long-running CLI command)."""
    logging.config.dictConfig(logging_config(log_format, level))

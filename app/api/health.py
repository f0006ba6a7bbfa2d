"""Liveness and readiness: ``/healthz`` (the process answers) and ``/readyz`` (the
database answers and its schema is at the Alembic head this code needs)."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from app.db.engine import Engine
from app.db.schema import fetch_revision, is_known_revision
from app.errors import Unavailable
from app.store.failures import is_database_error
from app.web.dependencies import engine_of
from app.web.openapi import answers

router = APIRouter(tags=["health"])
# How long /readyz waits for the database (a probe's own timeout is often a second or
# a few: past it, the answer is a 503 either way).
READY_S = 3.0


# What PostgreSQL says when a session asks at its start for a role the server lacks.
_MISSING_ROLE = re.compile(r'role "([^"]+)" does not exist')


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=answers(Unavailable))
async def readyz(request: Request, engine: Annotated[Engine, Depends(engine_of)]) -> dict[str, str]:
    head: str | None = request.app.state.schema_head
    # A database that stops answering (a partition, a frozen host) answers nothing, and
    # the probe hung with it: a 503 after a bound. The read is cancelled and left to end
    # on its own (the driver's cancel of a query waits out a timeout of its own, 10 s).
    reading = asyncio.ensure_future(_read_revision(engine))
    try:
        revision = await asyncio.wait_for(asyncio.shield(reading), READY_S)
    except asyncio.CancelledError:
        _abandon(reading)  # the request was cut (a shutdown): the read goes with it
        raise
    except TimeoutError as exc:
        _abandon(reading)
        raise Unavailable(
            f"the database did not answer within {READY_S:g} s", headers={"Retry-After": "1"}
        ) from exc
    except Exception as exc:
        if not (is_database_error(exc) or isinstance(exc, OSError)):
            raise
        missing = _MISSING_ROLE.search(str(exc))
        if missing is not None:
            # The service's sessions take roles that `causeway migrate` makes.
            raise Unavailable(
                f"the database server has no role {missing[1]}, which the service runs as;"
                " run `causeway migrate`",
                headers={"Retry-After": "1"},
            ) from exc
        raise Unavailable("the database is unreachable", headers={"Retry-After": "1"}) from exc
    if revision is not None and revision != head and not is_known_revision(revision):
        # A newer release migrated it (a rollback of the service): migrate refuses it.
        raise Unavailable(
            f"the schema is at revision {revision}, which this release of Causeway does not "
            "know (a newer release made it): run that release, or a newer one",
            revision=revision,
            head=head,
        )
    if revision != head:
        raise Unavailable(
            f"the schema is at revision {revision}, not {head}; run `causeway migrate`",
            revision=revision,
            head=head,
        )
    return {"status": "ready", "revision": revision or ""}


# HEAD too: load balancers and uptime checks probe with it, and a FastAPI route answers
# only the methods it names (the server sends no body to a HEAD). Undocumented, as HEAD
# of a GET goes without saying.
router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)


async def _read_revision(engine: Engine) -> str | None:
    async with engine.connect() as conn:
        return await fetch_revision(conn)


def _abandon(reading: asyncio.Future[str | None]) -> None:
    reading.cancel()
    reading.add_done_callback(_quietly)


def _quietly(reading: asyncio.Future[str | None]) -> None:
    """Take the outcome of a read the probe gave up on (else asyncio logs it unread)."""
    if not reading.cancelled():
        reading.exception()

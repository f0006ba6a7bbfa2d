"""``python -m scheduler``: run the scheduler alone, on the store's database: the
dispatcher (events become tasks), lease expiry and autoscale advice. Beside ``serve``
processes it needs nothing switched off: one process leads the dispatcher, and sweeping
is safe in all of them (``CAUSEWAY_RUN_PROJECTIONS`` / ``CAUSEWAY_RUN_SCHEDULER`` set to
false keep the API processes to serving)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import NoReturn

from pydantic import ValidationError

from app.db.engine import create_engine, libpq_conninfo
from app.db.schema import schema_problem
from app.projections.runner import ProjectionRunner
from app.settings import Settings
from app.store.append.group_commit import Appender
from app.store.failures import connection_problem
from app.telemetry import logs
from scheduler.projections import DISPATCH_BATCH, Dispatcher, scheduler_projections
from scheduler.service import SchedulerLoop, controller_from, timers_from


async def run(settings: Settings, url: str) -> None:
    projections = scheduler_projections()
    runner = ProjectionRunner(
        create_engine(url, pool_size=len(projections) + 2),
        projections,
        listen_dsn=libpq_conninfo(url),
        poll_interval_s=settings.projection_poll_interval_s,
        batch_sizes={Dispatcher.name: DISPATCH_BATCH},
    )
    engine = create_engine(url, pool_size=2, statement_timeout_ms=settings.statement_timeout_ms)
    appends = create_engine(url, pool_size=1, statement_timeout_ms=settings.statement_timeout_ms)
    decisions = Appender(appends, plan_ahead=False)
    loop = SchedulerLoop(engine, controller_from(settings), timers_from(settings), decisions)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(runner.run())
            group.create_task(loop.run())
    finally:
        await runner.dispose()
        await decisions.close()
        await appends.dispose()
        await engine.dispose()


def _fail(detail: str) -> NoReturn:
    sys.stderr.write(f"error: {detail}\n")
    sys.exit(2)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler",
        description="Run the scheduler alone (the dispatcher, lease expiry, autoscale "
        "advice) on CAUSEWAY_DATABASE_URL; every setting is a CAUSEWAY_* variable.",
    )
    parser.parse_args()  # --help, or an argument it does not take: usage, exit 2
    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        sys.stderr.write(
            f"error: setting CAUSEWAY_{str(first['loc'][0]).upper()}: {first['msg']}\n"
        )
        sys.exit(2)
    if settings.database_url is None:
        _fail("set CAUSEWAY_DATABASE_URL to the store's database")
    url = settings.database_url
    try:  # as every `causeway` command: a database it cannot use is one line, exit 2
        problem = schema_problem(url, "run `causeway migrate`")
    except Exception as exc:
        problem = connection_problem(exc)
        if problem is None:
            raise
    if problem is not None:
        _fail(problem)
    logs.configure(settings.log_format)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(settings, url))


if __name__ == "__main__":
    main()

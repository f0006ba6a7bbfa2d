"""The lease scan's plan on a queue PostgreSQL has statistics for: it walks
``ix_tasks_ready`` and stops at the tasks it takes, however long the queue."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.rows.tasks import Fit, fetch_next_ready

# A queue that has run a while: most of its tasks done, every EVERY-th still ready, spread
# over the table. None asks for anything (the usual case): no numbers, flags or labels.
TASKS, EVERY = 40_000, 20
_FILL = text(
    """
    INSERT INTO tasks (tenant, id, route_id, kind, queue, priority, req_numbers, req_flags,
                       req_labels, trigger_id, trigger_type, trigger_time, state, attempts,
                       max_retries, backoff_base_s, on_model_mismatch, created_at,
                       available_at, seq, version, position)
    SELECT 'acme', 'task-' || n, 'r', 'k', 'q', 5, '{}', '{}', '{}', 'evt-' || n, 'job',
           now(), CASE WHEN n % :every = 0 THEN 'ready' ELSE 'completed' END, 0, 3, 1.0, 'fail',
           now(), now() - interval '1 s', n, 1, n
    FROM generate_series(1, :count) AS n
    """
)
# What the session has done to the table and the index: within one transaction these
# only grow, so two readings around a statement give what it did.
_SCANS = text(
    """
    SELECT (SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'tasks'),
           pg_stat_get_xact_numscans('ix_tasks_ready'::regclass),
           pg_stat_get_xact_tuples_returned('ix_tasks_ready'::regclass)
    """
)


@pytest.mark.parametrize("flags", [[], ["gpu"]])
async def test_an_analyzed_queue_is_leased_from_its_index(
    engine: AsyncEngine, flags: list[str]
) -> None:
    # Analyzed, a queue of tasks without requirements looked like a few rows to the
    # planner (it guesses text[] <@ at 0.5%, NOT EXISTS at half), which then read every
    # ready task and sorted them for each lease (here: 2,000 index entries a lease; in
    # bench/scheduler.py, a sequential scan of 100,000 rows).
    async with engine.begin() as conn:
        await conn.execute(_FILL, {"count": TASKS, "every": EVERY})
        await conn.execute(text("ANALYZE tasks"))
    fit = Fit({"gpus": 1.0}, flags, {"zone": "a"}, 0, 9)
    taken = [EVERY * n for n in range(1, 11)]
    async with engine.connect() as conn:
        for _ in range(8):  # past the executions after which PostgreSQL may plan generically
            before = (await conn.execute(_SCANS)).one()
            found = await fetch_next_ready(
                conn, "acme", "q", fit, now=datetime.now(UTC), skip=[], limit=10
            )
            after = (await conn.execute(_SCANS)).one()
            await conn.rollback()  # the rows go back: the next lease finds the same ten
            assert [task.seq for task in found] == taken
            # No sequential scan; the index walked in order to the ten rows taken, no further.
            assert (after[0] - before[0], after[2] - before[2]) == (0, 10)

"""Which OpenLineage runs trained the models a decision's lineage used: the runIds that
``causeway.model.trained`` events name for some model versions, and each run's last
stored event (where an audit's walk into the training data starts). On the walks'
psycopg connection, like ``app.store.graph.walk``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection as PsycopgConnection

from app.store.model_registry import TRAINED
from app.store.openlineage import run_stream

# The type is in the text, not a parameter: the walks' sessions keep generic plans
# (app.wiring), and a generic plan cannot know that a type parameter matches a handful of
# rows; it walked the tenant's whole log in position order instead (250 ms on the
# 1,000,000 events of bench/lineage.py, against 0.05 ms through (tenant, type, position)).
_TRAINED = """
    SELECT model_name, model_version, data->>'training_run'
    FROM events
    WHERE tenant = %(tenant)s AND type = 'causeway.model.trained' AND model_name = ANY(%(names)s)
    ORDER BY position
"""
if f"type = '{TRAINED}'" not in _TRAINED:  # pragma: no cover - the type's name changed
    raise RuntimeError("_TRAINED must name the type TRAINED")
_LAST = """
    SELECT DISTINCT ON (stream) stream, id
    FROM events
    WHERE tenant = %(tenant)s AND stream = ANY(%(streams)s)
    ORDER BY stream, stream_version DESC
"""


@dataclass(frozen=True, slots=True)
class TrainingLink:
    model_name: str
    model_version: str
    run_id: str
    last_event_id: str | None  # None: the log has no event of the run (yet)


async def fetch_training_links(
    conn: PsycopgConnection[Any], tenant: str, models: Iterable[tuple[str, str | None]]
) -> list[TrainingLink]:
    """The runs that trained ``models`` (name, version), in the order they were named."""
    wanted = {m for m in models if m[1] is not None}
    if not wanted:
        return []
    async with conn.cursor() as cursor:
        await cursor.execute(_TRAINED, {"tenant": tenant, "names": sorted({n for n, _ in wanted})})
        named = [(n, v, r) for n, v, r in await cursor.fetchall() if (n, v) in wanted and r]
        if not named:
            return []
        streams = sorted({run_stream(r) for _, _, r in named})
        await cursor.execute(_LAST, {"tenant": tenant, "streams": streams})
        last: dict[str, str] = dict(await cursor.fetchall())
    return [TrainingLink(n, v, r, last.get(run_stream(r))) for n, v, r in named]

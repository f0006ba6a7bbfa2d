"""What a reader sees of the queues (scope ``read``): ``GET /tasks/{id}`` (a task and
every decision about it), ``GET /queues`` (depths), ``GET /queues/{queue}/autoscale``
(the PID advice) and ``GET /metrics`` (Prometheus gauges)."""

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from fastapi.responses import Response
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.convertors import Convertor, register_url_convertor

from app.db.engine import Engine
from app.db.tenancy import tenant_transaction
from app.errors import NotFound
from app.store.decision_reads import read_stream
from app.store.keys import Principal
from app.web.bodies import JSONRoute
from app.web.metrics import Scrape, from_database
from app.web.openapi import answers
from scheduler.autoscale import AutoscaleAdvisor, PidController
from scheduler.rows import tasks as task_rows
from scheduler.rows.depths import QueueDepth, read_depths
from scheduler.web import PrincipalOf, QueueName, Settle, tasks_settled
from scheduler.web.documents import depth_json, exposition, history_json, task_json


class TaskIdConvertor(Convertor[str]):
    """A task id as ``scheduler.tasks.task_id_for`` makes them: 32 hex digits. ``GET
    /tasks/{task_id}`` matches no other path, so ``/tasks/complete`` and ``/tasks/fail``
    are theirs alone (``GET`` on them is a 405 naming ``POST``, not a task not found)."""

    regex = "[0-9a-f]{32}"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("task_id", TaskIdConvertor())
TaskId = Annotated[str, Path(pattern=f"^{TaskIdConvertor.regex}$", description="32 hex digits")]


def create_router(
    engine: Engine,
    controller: PidController,
    more_metrics: Scrape,
    read: PrincipalOf,
    metrics_read: PrincipalOf,
) -> APIRouter:
    """``more_metrics``: the service's own metrics (``app.web.metrics``) as the key's tenant
    may see them, appended. ``metrics_read``: ``read``, and while the database is away a
    key it confirmed lately (``Authenticator.authenticate``), for ``GET /metrics`` only."""
    router = APIRouter(tags=["scheduler"], route_class=JSONRoute)
    Reader = Annotated[Principal, Depends(read)]
    Settled = Annotated[Settle, Depends(tasks_settled(read))]
    MetricsReader = Annotated[Principal, Depends(metrics_read)]
    MetricsSettled = Annotated[Settle, Depends(tasks_settled(metrics_read))]

    @router.get(
        "/tasks/{task_id:task_id}",
        summary="A task's state and every decision about it",
        responses=answers(NotFound),
    )
    async def read_task(task_id: TaskId, principal: Reader, settled: Settled) -> dict[str, Any]:
        await settled()
        async with tenant_transaction(engine, principal.tenant) as conn:
            state = await task_rows.fetch_task(conn, principal.tenant, task_id)
            if state is None:
                raise NotFound(f"no task {task_id!r}", task=task_id)
            history = await read_stream(conn, principal.tenant, state.stream)
        return {**task_json(state), "history": history_json(history)}

    @router.get("/queues", summary="Depth by priority, oldest age, in flight, dead letters")
    async def list_queues(principal: Reader, settled: Settled) -> dict[str, Any]:
        await settled()
        async with tenant_transaction(engine, principal.tenant) as conn:
            depths = await read_depths(conn, principal.tenant, now=datetime.now(UTC))
        return {"queues": [depth_json(d) for d in depths]}

    @router.get("/queues/{queue}/autoscale", summary="Recommended worker count (PID advice)")
    async def autoscale(queue: QueueName, principal: Reader, settled: Settled) -> dict[str, Any]:
        await settled()
        async with tenant_transaction(engine, principal.tenant) as conn:
            advice = await AutoscaleAdvisor(conn, controller).read(principal.tenant, queue)
        return {
            "queue": queue,
            "recommended_workers": advice.recommended,
            "observed_latency_s": advice.observed_s,
            "target_latency_s": advice.target_s,
            "updated_at": advice.updated_at.isoformat() if advice.updated_at else None,
        }

    @router.get(
        "/metrics",
        summary="Prometheus metrics: the queues' gauges (the tenant's) and the service's",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    )
    async def metrics(principal: MetricsReader, settled: MetricsSettled) -> Response:
        await settled()

        async def read() -> list[QueueDepth]:
            async with tenant_transaction(engine, principal.tenant) as conn:
                return await read_depths(conn, principal.tenant, now=datetime.now(UTC))

        # While the database is away, the service's own figures without the queues'.
        depths = await from_database(read())
        ours = exposition(depths) if depths is not None else b""
        return Response(
            ours + await more_metrics(principal.tenant, depths is not None),
            media_type=CONTENT_TYPE_LATEST,
        )

    return router

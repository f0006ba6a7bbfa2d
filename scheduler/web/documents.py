"""The bodies the scheduler answers with: a task, its history, a queue's depth as JSON,
and every queue's gauges in Prometheus' text format."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.telemetry import metrics
from scheduler import routes as r
from scheduler import tasks as t

if TYPE_CHECKING:
    from app.store.decision_reads import LoggedEntry
    from scheduler.rows.depths import QueueDepth


def task_json(state: t.TaskState) -> dict[str, Any]:
    def at(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": state.id,
        "kind": state.kind,
        "queue": state.queue,
        "route": state.route_id,
        "priority": state.priority,
        "guaranteed": state.priority > 7,
        "requires": r.Requirements(
            state.req_numbers, tuple(state.req_flags), state.req_labels
        ).as_spec(),
        "state": state.state,
        "trigger": state.trigger_id,
        "trigger_type": state.trigger_type,
        "debounce_key": state.debounce_key,
        "debounce_on": state.debounce_on,
        "attempts": state.attempts,
        "max_retries": state.max_retries,
        "available_at": at(state.available_at),
        "worker": state.worker,
        "leased_at": at(state.leased_at) if state.state == "leased" else None,
        "lease_expires_at": at(state.lease_expires_at) if state.state == "leased" else None,
        "error": (
            {"class": state.error_class, "message": state.error} if state.error_class else None
        ),
        "disposition": state.disposition,
        "service": state.service,
        "created_at": at(state.created_at),
        "finished_at": at(state.finished_at),
        "version": state.version,
        "position": state.position,
    }


def history_json(entries: list[LoggedEntry]) -> list[dict[str, Any]]:
    """A task's decisions in order: type, position, time and data of each."""
    return [
        {"type": e.type, "position": e.position, "time": e.time, "data": e.data} for e in entries
    ]


def depth_json(depth: QueueDepth) -> dict[str, Any]:
    return {
        "queue": depth.queue,
        "ready": depth.ready,
        "ready_by_priority": {str(p): n for p, n in sorted(depth.ready_by_priority.items())},
        "delayed": depth.delayed,
        "in_flight": depth.in_flight,
        "dead_letters": depth.dead_letters,
        "alerts": depth.alerts,
        "oldest_ready_age_s": depth.oldest_ready_s,
    }


def exposition(depths: list[QueueDepth]) -> bytes:
    """The gauges in Prometheus' text format, read for this scrape (the figures live in
    the database, shared by every process, not in this one: ``metrics.figures``)."""
    ready = _family("causeway_queue_ready_tasks", "Tasks ready to lease now", "priority")
    delayed = _family("causeway_queue_delayed_tasks", "Tasks waiting out a retry backoff")
    in_flight = _family("causeway_queue_in_flight_tasks", "Leased tasks")
    oldest = _family("causeway_queue_oldest_ready_age_seconds", "Age of the oldest ready task")
    dead = _family("causeway_queue_dead_letters", "Dead-lettered tasks")
    alerts = _family(
        "causeway_queue_alerts",
        "Dead letters flagged for attention (transient or unknown failures)",
    )
    for depth in depths:
        for priority in range(10):
            ready.add_metric([depth.queue, str(priority)], depth.ready_by_priority.get(priority, 0))
        delayed.add_metric([depth.queue], depth.delayed)
        in_flight.add_metric([depth.queue], depth.in_flight)
        oldest.add_metric([depth.queue], depth.oldest_ready_s)
        dead.add_metric([depth.queue], depth.dead_letters)
        alerts.add_metric([depth.queue], depth.alerts)
    return metrics.figures([ready, delayed, in_flight, oldest, dead, alerts])


def _family(name: str, help_text: str, *more: str) -> metrics.GaugeMetricFamily:
    return metrics.GaugeMetricFamily(name, help_text, labels=["queue", *more])

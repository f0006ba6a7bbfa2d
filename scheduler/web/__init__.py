"""The scheduler over HTTP, one router per capability: ``routes`` (scope ``admin``),
``leases`` (leasing and results, scope ``worker``), ``queues`` (a task, queue depths,
autoscale advice and Prometheus gauges) and ``dead_letters``; ``documents`` builds the
bodies they answer with. ``scheduler.router`` puts them together for ``app.main``.

No module here uses ``from __future__ import annotations``: FastAPI must see the
Depends() each router factory builds, which a string annotation could not resolve.
"""

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Path

from app.store.keys import Principal
from app.web.dependencies import Settle, settled_on_primary
from scheduler.projections import Dispatcher, TaskBook
from scheduler.routes import NAME_PATTERN

__all__ = [
    "NAME_PATTERN",
    "POSITION_HEADER",
    "PrincipalOf",
    "QueueName",
    "Settle",
    "routes_settled",
    "tasks_settled",
]

PrincipalOf = Callable[..., Coroutine[Any, Any, Principal]]
# A queue is named by a route, whose names are these: any other name is a typo, not a queue
# that happens to be empty (a lease would wait and answer 204 for ever).
QueueName = Annotated[str, Path(pattern=NAME_PATTERN)]

# The scheduler's reads stay on the primary. One that names a position (read-your-writes)
# waits for the read models it reads: the routing table (the dispatcher's), or the task
# rows (the dispatcher's decisions, then the task book that folds them). ``caller`` is
# the route's key check: a caller it refuses is refused before any wait. The route awaits
# the wait it is given once it has checked its own parameters.


def routes_settled(caller: PrincipalOf) -> Callable[..., Coroutine[Any, Any, Settle]]:
    """The dependency that gives a route the wait for the routing table."""
    return settled_on_primary(caller, Dispatcher.name)


def tasks_settled(caller: PrincipalOf) -> Callable[..., Coroutine[Any, Any, Settle]]:
    """The dependency that gives a route the wait for the task rows."""
    return settled_on_primary(caller, Dispatcher.name, TaskBook.name)


POSITION_HEADER = "Causeway-Position"  # every command's answer: its decision's position

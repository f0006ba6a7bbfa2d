"""A wait with a deadline that does not wait for what it cuts: for servers that may never
answer (a replica frozen, or cut off by a partition that drops packets: it never
refuses, it just never answers)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")
_LEFT: set[asyncio.Task[Any]] = set()  # what ``within`` left to finish: kept from the GC


async def within(
    work: Coroutine[Any, Any, T], limit_s: float, *, left: Callable[[T], Awaitable[object]]
) -> T:
    """``work``'s result if it comes within ``limit_s``, else ``TimeoutError`` at once:
    ``work`` is cancelled and left to finish in the background (``asyncio.wait_for``
    waits for that, and psycopg, cancelled in a query, tries to cancel it on the server:
    on a frozen replica 10 s more), and ``left`` is given what it yields all the same
    (a connection, to close). So too when the caller is cancelled while it waits:
    ``asyncio.wait`` leaves ``work`` running, and what it yields was lost."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=limit_s)
    except asyncio.CancelledError:  # the caller was: ``work`` is left as at a timeout
        _leave(task, left)
        raise
    if task in done:
        return task.result()
    _leave(task, left)
    raise TimeoutError(f"no answer within {limit_s:g} s")


def _leave(task: asyncio.Task[T], left: Callable[[T], Awaitable[object]]) -> None:
    task.cancel()
    _LEFT.add(task)
    task.add_done_callback(partial(_settle, left))


def _settle(left: Callable[[T], Awaitable[object]], task: asyncio.Task[T]) -> None:
    _LEFT.discard(task)
    if task.cancelled() or task.exception() is not None:
        return
    closing = asyncio.ensure_future(left(task.result()))
    _LEFT.add(closing)
    closing.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    _LEFT.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a close that failed on a gone replica says nothing


async def _nothing(_: object) -> None:
    return None


NOTHING_LEFT = _nothing

"""``POST /api/v1/lineage``: OpenLineage events in (the path the OpenLineage clients'
HTTP transport posts to by default, and Marquez serves).

Answers 201 with where the event (and the dataset versions it made) landed, 200 when the
event was stored before (a client's retry: its id is derived from its content), 422
``invalid-openlineage-event`` with the JSON Pointer of the first error when the spec's
schema refuses it, and the 422s of ``storable`` for what the log cannot keep. The body is
JSON (``Content-Encoding: gzip`` is accepted, as the client's ``compression: gzip`` sends
it).

The events of one run may race each other (an asynchronous transport). Each is planned on
the run's last event and appended on the condition that it is still last: in this
process, the events of one stream take turns (``StreamLocks``); against another process,
the one that loses plans again after a short random pause.
"""

# No `from __future__ import annotations`: FastAPI must see the Depends() built in
# create_router, which a string annotation could not resolve.

import asyncio
import random
import zlib
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.db.engine import Connection, Engine
from app.db.tenancy import tenant_transaction
from app.errors import (
    BadRequest,
    EventTooLarge,
    IdConflict,
    InvalidOpenLineageEvent,
    PayloadTooLarge,
    TimeInFuture,
    UnsupportedMediaType,
    VersionConflict,
)
from app.store.append.group_commit import Appender
from app.store.keys import Principal
from app.store.openlineage import (
    DATASET_VERSION,
    fetch_all_stored,
    fetch_heads,
    fetch_named_versions,
    read_run_events,
    run_of,
)
from app.store.records import Appended, is_json_media_type
from app.web import json_text
from app.web.bodies import receive_body
from app.web.openapi import answers
from ingest.limits import Limits
from ingest.openlineage.locks import StreamLocks
from ingest.openlineage.mapping import (
    Known,
    Parsed,
    after_complete,
    is_complete,
    parse,
    plan,
    planned_ids,
    with_earlier,
)
from ingest.openlineage.schema import SPEC_ID, Kind, validate
from ingest.openlineage.storable import check_depth, check_storable, check_value
from ingest.router import POSITION_HEADER, AppendResponse, answer_of

# Against another process's events of the same run: plan again after a pause drawn from
# [0, 5 ms * 2**attempt), that bound at most 200 ms (at most 1.3 s in all before a 409).
_ATTEMPTS = 10
_FIRST_PAUSE_S = 0.005
_MAX_PAUSE_S = 0.2
# Events up to this size are validated on the event loop (a few ms at most).
_VALIDATE_ON_LOOP_BYTES = 64 * 1024


class LineageIngest:
    def __init__(self, engine: Engine, appender: Appender, limits: Limits) -> None:
        self._engine = engine
        self._appender = appender
        self._limits = limits
        self._locks = StreamLocks()

    async def answer(self, principal: Principal, body: bytes) -> tuple[int, bytes, int]:
        """The status, the JSON body, and the position for ``Causeway-Position``."""
        if len(body) > self._limits.max_event_data_bytes:
            raise EventTooLarge(
                f"the event takes {len(body)} bytes, over the "
                f"{self._limits.max_event_data_bytes}-byte limit on event data",
                max_event_data_bytes=self._limits.max_event_data_bytes,
            )
        event = json_text.loads(body)  # the one rule for JSON: invalid-json, as everywhere
        # A large event takes the checks a while (the schema's, about 2 s for 1 MiB of
        # datasets): off the event loop, which serves every other request meanwhile.
        if len(body) > _VALIDATE_ON_LOOP_BYTES:
            kind = await asyncio.to_thread(_checked, event)
        else:
            kind = _checked(event)
        parsed = parse(kind, event, body)
        check_storable(parsed, self._limits)
        appended = await self._store(principal.tenant, parsed)
        return answer_of(appended)

    async def _store(self, tenant: str, parsed: Parsed) -> list[Appended]:
        async with self._locks.holding(tenant, parsed.stream):
            for attempt in range(_ATTEMPTS):
                if attempt:
                    await asyncio.sleep(_pause_s(attempt))
                # One snapshot: the run's earlier events (merged into a COMPLETE) and
                # its stream's head (the event it follows, the version it expects) are
                # read as of the same moment, so another process's event of the run that
                # commits meanwhile makes the append conflict rather than be followed
                # unmerged.
                async with tenant_transaction(self._engine, tenant, one_snapshot=True) as conn:
                    first_position = None
                    if parsed.kind is Kind.RUN:
                        earlier, first_position = await _earlier(conn, tenant, parsed)
                        parsed = after_complete(with_earlier(parsed, earlier), earlier)
                    # A re-send: answered with what the first answer listed.
                    stored = await fetch_all_stored(conn, tenant, planned_ids(parsed))
                    if any(a.id == parsed.id for a in stored):
                        return stored
                    known = await _known(conn, tenant, parsed, first_position)
                try:
                    return await self._appender.append(tenant, plan(parsed, known))
                except (VersionConflict, IdConflict):
                    continue  # another process's event of the run came first, or this one
        raise VersionConflict(
            f"the stream {parsed.stream!r} kept moving while this event was planned; retry",
            stream=parsed.stream,
        )

    async def read_body(self, request: Request) -> bytes:
        max_bytes = self._limits.max_request_bytes
        json_text.refuse_other_charsets(request.headers.get("content-type", ""))
        body = await receive_body(request.receive, request.headers.get("content-length"), max_bytes)
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding == "gzip":
            return _gunzipped(body, max_bytes)
        if encoding != "identity":
            raise UnsupportedMediaType(f"Content-Encoding {encoding!r}: send identity or gzip")
        return body


async def _earlier(
    conn: Connection, tenant: str, parsed: Parsed
) -> tuple[list[dict[str, Any]], int | None]:
    """The run's stored events before ``parsed`` (all of them, unless it is stored: a
    re-send then merges what its first sending did), as sent; and the position of the
    first COMPLETE among them (None: none)."""
    run_id = parsed.run_id or ""  # a run event's: it has one
    stored = (await read_run_events(conn, tenant, [run_id])).get(run_id, [])
    sent, first_complete = [], None
    for event in stored:
        if event.record.id == parsed.id:
            break
        body = run_of(event.record.data_binary)
        if body is not None:
            sent.append(body)
            if first_complete is None and is_complete(body):
                first_complete = event.position
    return sent, first_complete


async def _known(
    conn: Connection, tenant: str, parsed: Parsed, first_position: int | None
) -> Known:
    """What the plan of ``parsed`` needs of the log. An event after its run's COMPLETE
    (a late START, a second COMPLETE: ``first_position`` is then that COMPLETE's) reads
    the versions of its inputs as the COMPLETE read them (not one the run wrote with it
    or since, nor one another run wrote after);
    an input with versions from after only is linked to none, and gets no external
    version (which would come after them and be the dataset's newest)."""
    streams = parsed.datasets_to_look_up()
    versions = await fetch_heads(conn, tenant, streams, type=DATASET_VERSION)
    later: frozenset[str] = frozenset()
    if first_position is not None:
        before = await fetch_heads(
            conn, tenant, streams, type=DATASET_VERSION, before_position=first_position
        )
        later = frozenset(versions.keys() - before.keys())
        versions = before
    return Known(
        await fetch_heads(conn, tenant, parsed.streams_to_look_up()),
        versions,
        await fetch_named_versions(conn, tenant, parsed.versions_to_look_up()),
        versioned_later=later,
    )


def _checked(event: Any) -> Kind:
    """The kind of ``event``, once the schema takes it and the log can keep it."""
    check_depth(event)  # first: the schema's error messages show the event
    kind = validate(event)
    check_value(event)
    return kind


def _pause_s(attempt: int) -> float:
    """A random pause before try ``attempt`` (1: the second), full jitter: the racing
    processes spread out rather than plan again together."""
    ceiling_s = min(_MAX_PAUSE_S, _FIRST_PAUSE_S * 2**attempt)
    return random.uniform(0, ceiling_s)  # noqa: S311 - spreading retries, not secrecy


def _gunzipped(body: bytes, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    try:
        plain = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise BadRequest(f"the gzip body does not inflate: {exc}") from None
    if len(plain) > max_bytes or inflater.unconsumed_tail:
        raise PayloadTooLarge(
            f"the body inflates past the {max_bytes}-byte limit", max_request_bytes=max_bytes
        )
    # Its end read, so its CRC-32 and length were checked; and nothing after it.
    if not inflater.eof:
        raise BadRequest("the gzip body is cut short: its end (and its checksum) is missing")
    if inflater.unused_data:
        raise BadRequest("the gzip body goes on past its end: send one gzip member")
    return plain


# The OpenLineage spec's own JSON Schema decides (a 422 naming the first error); this
# document names it rather than copying it.
_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": f"An OpenLineage RunEvent, DatasetEvent or JobEvent: {SPEC_ID}",
            }
        }
    },
}


def create_router(
    ingest: LineageIngest, ingest_principal: Callable[..., Coroutine[Any, Any, Principal]]
) -> APIRouter:
    router = APIRouter(tags=["ingest"])

    @router.post(
        "/api/v1/lineage",
        status_code=201,
        response_model=AppendResponse,
        responses={
            200: {"model": AppendResponse, "description": "the event was a re-send"},
            **answers(
                IdConflict,
                VersionConflict,
                UnsupportedMediaType,
                InvalidOpenLineageEvent,
                EventTooLarge,
                TimeInFuture,
            ),
        },
        summary="Append an OpenLineage RunEvent, DatasetEvent or JobEvent (spec 2-0-x)",
        openapi_extra={"requestBody": _BODY},
    )
    async def post_lineage(
        request: Request, principal: Annotated[Principal, Depends(ingest_principal)]
    ) -> Response:
        content_type = request.headers.get("content-type")
        if content_type is not None and not is_json_media_type(content_type):
            raise UnsupportedMediaType(f"Content-Type {content_type!r}: send application/json")
        body = await ingest.read_body(request)
        status, answer, position = await ingest.answer(principal, body)
        return Response(
            answer,
            status_code=status,
            media_type="application/json",
            headers={POSITION_HEADER: str(position)},
        )

    return router

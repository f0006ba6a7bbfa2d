"""Every error Causeway raises on purpose, in one tree. No HTTP imports here.

    AppError                    500 internal
    ├── BadRequest              400 bad-request
    │   ├── InvalidJSON         400 invalid-json
    │   ├── InvalidCloudEvent   400 invalid-cloudevent
    │   └── AnswerTooLarge      400 answer-too-large
    ├── Unauthenticated         401 unauthenticated
    ├── Forbidden               403 forbidden
    ├── NotFound                404 not-found
    ├── BodyTimeout             408 body-timeout
    ├── Conflict                409 conflict
    │   ├── VersionConflict     409 version-conflict
    │   ├── IdConflict          409 id-conflict
    │   └── LeaseLost           409 lease-lost
    ├── PayloadTooLarge         413 payload-too-large
    ├── UnsupportedMediaType    415 unsupported-media-type
    │   └── UnsupportedContentEncoding 415 unsupported-content-encoding
    ├── IdempotencyKeyReused    422 idempotency-key-reused
    ├── InvalidEvent            422 invalid-event
    │   ├── InvalidOpenLineageEvent 422 invalid-openlineage-event
    │   ├── UnknownCause        422 unknown-cause
    │   ├── ReservedType        422 reserved-type
    │   ├── EventTooLarge       422 event-too-large
    │   └── TimeInFuture        422 time-in-future
    └── Unavailable             503 unavailable
        └── Timeout             503 timeout

``code`` is part of the public API: the problem ``type`` URI is ``/problems/<code>`` and a
code never changes once shipped. ``describe`` gives the paragraph ``GET /problems/{code}``
serves.
"""

from __future__ import annotations

from typing import Any, ClassVar


class AppError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    title: ClassVar[str] = "Internal error"
    about: ClassVar[str] = "The server failed on something it did not expect. Nothing was stored."

    def __init__(
        self, detail: str, *, headers: dict[str, str] | None = None, **extensions: Any
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}
        self.extensions = extensions  # extra problem members, e.g. errors=[...]


class BadRequest(AppError):
    status = 400
    code = "bad-request"
    title = "Bad request"
    about = "The request could not be understood: a parameter or the body is malformed."


class InvalidJSON(BadRequest):
    code = "invalid-json"
    title = "Not valid JSON"
    about = (
        "A JSON body (of any endpoint: events, GraphQL, models, deployments, routes, "
        "queues, tasks) is not JSON text, or an object in it names a member twice, which "
        "I-JSON (RFC 7493) forbids; the detail says where, and member names the duplicate."
    )


class InvalidCloudEvent(BadRequest):
    code = "invalid-cloudevent"
    title = "Not a valid CloudEvent"
    about = (
        "The body or the ce-* headers break the CloudEvents 1.0 HTTP binding or JSON format: "
        "a required attribute is missing or empty, an attribute name is not lower-case "
        "alphanumeric, a header is badly percent-encoded, or data and data_base64 are both set. "
        "The errors member lists each offending event (index) and attribute."
    )


class AnswerTooLarge(BadRequest):
    code = "answer-too-large"
    title = "GraphQL answer too large"
    about = (
        "A GraphQL query asked for more than graphql_max_answer_items list items (events, "
        "edges, nodes), or graphql_max_answer_bytes of JSON values (data, extensions), in "
        "one answer: nested effects and causes multiply each other's page sizes. Nothing "
        "of the answer is sent. Ask for less: a smaller first, fewer nested levels or "
        "aliases."
    )


class Unauthenticated(AppError):
    status = 401
    code = "unauthenticated"
    title = "Missing or unknown API key"
    about = "Send 'Authorization: Bearer <key>' with a key made by 'causeway keys create'."


class Forbidden(AppError):
    status = 403
    code = "forbidden"
    title = "The key lacks the scope this needs"
    about = (
        "Keys carry the scopes ingest, read, worker and admin (admin implies the others); "
        "this operation needs one the key lacks."
    )


class NotFound(AppError):
    status = 404
    code = "not-found"
    title = "Not found"
    about = "Nothing with that name or id is stored in your tenant."


class Conflict(AppError):
    status = 409
    code = "conflict"
    title = "Conflict with stored state"
    about = "The request contradicts what is already stored; nothing of it was written."


class VersionConflict(Conflict):
    code = "version-conflict"
    title = "Stream is not at the expected version"
    about = (
        "An event carried expectedversion, and the stream was at another version. "
        "Nothing of the request was written. Re-read the stream and decide again."
    )


class IdConflict(Conflict):
    code = "id-conflict"
    title = "Event id already used with other content"
    about = (
        "An event id is unique in a tenant. The id was stored before with different content, "
        "or by another source. An exact re-send is not a conflict: it returns the stored position."
    )


class LeaseLost(Conflict):
    code = "lease-lost"
    title = "The lease is not held"
    about = (
        "The task is no longer leased under this lease id: it expired and went back to the "
        "queue (another worker may hold it now), or it was completed, failed or superseded. "
        "Drop the work; nothing was written."
    )


class PayloadTooLarge(AppError):
    status = 413
    code = "payload-too-large"
    title = "Request body too large"
    about = "The request body is over max_request_bytes (or the batch over max_batch_events)."


class UnsupportedMediaType(AppError):
    status = 415
    code = "unsupported-media-type"
    title = "Unsupported event format"
    about = (
        "Only the CloudEvents JSON format is understood in structured and batch mode "
        "(application/cloudevents+json, application/cloudevents-batch+json)."
    )


class UnsupportedContentEncoding(UnsupportedMediaType):
    code = "unsupported-content-encoding"
    title = "Unsupported content encoding"
    about = (
        "The body has a Content-Encoding other than identity: it would be read, and an "
        "event's data stored, as the encoded bytes. Only POST /api/v1/lineage inflates "
        "gzip; send other bodies as they are."
    )


class BodyTimeout(AppError):
    status = 408
    code = "body-timeout"
    title = "Request body too slow"
    about = (
        "No byte of the request body arrived for CAUSEWAY_BODY_TIMEOUT_S (30 seconds by "
        "default) while the body was still incomplete; nothing of the request was done."
    )


class IdempotencyKeyReused(AppError):
    status = 422
    code = "idempotency-key-reused"
    title = "Idempotency key sent with another request"
    about = (
        "The Idempotency-Key was sent before with a different command, body or key of "
        "yours; its first request's answer stands and nothing was written. A key names one "
        "request: send a new key for a new command."
    )


class InvalidEvent(AppError):
    status = 422
    code = "invalid-event"
    title = "Event rejected"
    about = "The event is well-formed but breaks a rule of the store. Nothing was written."


class InvalidOpenLineageEvent(InvalidEvent):
    code = "invalid-openlineage-event"
    title = "Not a valid OpenLineage event"
    about = (
        "The body of POST /api/v1/lineage breaks the OpenLineage spec's JSON Schema (2-0-x); "
        "errors names the first error with a JSON Pointer. Nothing was written."
    )


class UnknownCause(InvalidEvent):
    code = "unknown-cause"
    title = "Cause not stored"
    about = (
        "causationid names events that are not stored in your tenant and do not come earlier "
        "in the same batch. Causes must exist first, so lineage stays a DAG."
    )


class ReservedType(InvalidEvent):
    code = "reserved-type"
    title = "Event type or id is reserved"
    about = (
        "Event types starting with 'causeway.', and ids and streams starting with 'causeway:', "
        "belong to the events Causeway writes itself."
    )


class TimeInFuture(InvalidEvent):
    code = "time-in-future"
    title = "Event time ahead of the server's clock"
    about = (
        "The event's time is more than CAUSEWAY_MAX_FUTURE_S seconds ahead of the server's "
        "clock (the detail names both): the producer's clock runs ahead. Off unless set."
    )


class EventTooLarge(InvalidEvent):
    code = "event-too-large"
    title = "Event over a size limit"
    about = (
        "An event's attributes (everything but data) are over max_attributes_bytes, or its "
        "data over max_event_data_bytes."
    )


class Unavailable(AppError):
    status = 503
    code = "unavailable"
    title = "Service unavailable"
    about = "The database is unreachable or not at the schema this version needs. Retry later."


class Timeout(Unavailable):
    code = "timeout"
    title = "Query took too long"
    about = (
        "A lineage or audit walk, or a GraphQL request still starting work, ran past its "
        "time budget (graphql_timeout_ms) and was stopped. Ask for less: a lower maxDepth "
        "or limit, fewer walks, aliases or nested pages."
    )


def error_classes() -> list[type[AppError]]:
    """Every error class, root first, so the problem catalogue lists each code once."""
    found: list[type[AppError]] = []
    pending: list[type[AppError]] = [AppError]
    while pending:
        cls = pending.pop(0)
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found

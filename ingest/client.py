"""A small HTTP client for producers: post CloudEvents to a Causeway service.

It imports nothing of ``app``: it runs where producers run (the edge bridge, workers)
and speaks only HTTP. Events are plain dicts in the CloudEvents JSON format.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx2
import orjson

__all__ = ["AppendResult", "CausewayClient", "CausewayError"]

_STRUCTURED = "application/cloudevents+json"
_BATCH = "application/cloudevents-batch+json"


@dataclass(frozen=True, slots=True)
class AppendResult:
    id: str
    source: str
    stream: str
    stream_version: int
    position: int
    duplicate: bool


class CausewayError(Exception):
    """The service refused a request; ``problem`` is its RFC 9457 body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('type', '')}: {problem.get('detail', '')}")
        self.status = status
        self.problem = problem


class CausewayClient:
    def __init__(self, base_url: str, api_key: str, *, timeout_s: float = 30.0) -> None:
        self._http = httpx2.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
        )

    def post_event(self, event: dict[str, Any]) -> AppendResult:
        """Append one structured event; an exact re-send returns its stored position."""
        return self._post(orjson.dumps(event), _STRUCTURED)[0]

    def post_batch(self, events: list[dict[str, Any]]) -> list[AppendResult]:
        """Append ``events`` atomically: all are stored, or none and ``CausewayError``."""
        return self._post(orjson.dumps(events), _BATCH)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CausewayClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _post(self, body: bytes, content_type: str) -> list[AppendResult]:
        response = self._http.post("/events", content=body, headers={"Content-Type": content_type})
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"detail": response.text}
            raise CausewayError(response.status_code, problem)
        return [AppendResult(**entry) for entry in response.json()["events"]]

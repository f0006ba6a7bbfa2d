"""The README's five-minute tour, run as written: each of its curl calls, in order, on a
fresh store, answers without an error, and answers exactly what the README shows where
it shows a whole answer. (Its ``causeway`` commands have tests of their own.)"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import orjson
from fastapi import FastAPI

from tests.integration.conftest import MakeKey, catch_up

README = Path(__file__).resolve().parents[2] / "README.md"
_SHOWN = re.compile(r"#\s*->\s*(?:(\d{3})\s+)?(.*)")


@dataclass
class Call:
    method: str
    target: str  # path and query
    headers: dict[str, str]
    body: str | None
    shown_status: int | None = None
    shown: str = ""  # the answer the README shows, as written after "# ->"


def _tour() -> str:
    """The tour's shell blocks (the demo's, then the walk-through's), as one script."""
    section = README.read_text().split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert blocks, "the tour's shell blocks are gone"
    return "".join(blocks)


def _curl(words: list[str]) -> Call:
    method, headers, body, target = None, {}, None, None
    rest = iter(words[1:])
    for word in rest:
        if word == "-X":
            method = next(rest)
        elif word == "-H":
            name, _, value = next(rest).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-d":
            body = next(rest)
        elif word == "-o":
            next(rest)
        elif word.startswith("-"):
            assert word == "-s", f"the tour uses curl's {word}, which this test does not read"
        else:
            assert word.startswith("localhost:8000/"), f"not a call to the service: {word}"
            target = word.removeprefix("localhost:8000")
    assert target is not None, words
    return Call(method or ("POST" if body is not None else "GET"), target, headers, body)


def tour_calls() -> list[Call]:
    """The tour's curl calls, each with what the README shows it answers, if anything."""
    calls: list[Call] = []
    pending = ""
    answer_goes_on = False  # the lines after "# ->" that are indented go on with it
    for line in _tour().splitlines(keepends=True):
        stripped = line.strip()
        if not pending and stripped.startswith("#"):
            shown = _SHOWN.match(stripped)
            if calls and shown:
                calls[-1].shown_status = int(shown[1]) if shown[1] else None
                calls[-1].shown = shown[2]
                answer_goes_on = True
            elif answer_goes_on and stripped.startswith("#  "):
                calls[-1].shown += stripped.lstrip("#").strip()
            else:
                answer_goes_on = False
            continue
        answer_goes_on = False
        if not pending and not stripped:
            continue
        pending += line
        if pending.rstrip().endswith("\\"):
            continue
        try:
            words = shlex.split(pending.replace("\\\n", " "))
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
        if words[0] == "curl":
            calls.append(_curl(words))
    return calls


async def test_the_tour_runs_as_written(app: FastAPI, make_key: MakeKey) -> None:
    key = await make_key("default", "admin")  # what `make run` writes to .causeway/admin.key
    calls = tour_calls()
    assert len(calls) >= 10, "the tour lost its calls"
    placeholders: dict[str, str] = {}
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost:8000") as http:
        for call in calls:
            await catch_up(app)  # as the server does in the background
            values = {"$KEY": key, **placeholders}
            response = await http.request(
                call.method,
                _filled(call.target, values),
                headers={k: _filled(v, values) for k, v in call.headers.items()},
                content=None if call.body is None else _filled(call.body, values).encode(),
            )
            where = f"{call.method} {call.target}"
            assert response.status_code < 400, f"{where}: {response.text}"
            if call.shown_status is not None:
                assert response.status_code == call.shown_status, where
            answer: Any = orjson.loads(response.content) if _is_json(response) else None
            if call.shown and "..." not in call.shown:
                assert answer == orjson.loads(call.shown), where
            if isinstance(answer, dict) and "errors" in answer:
                raise AssertionError(f"{where}: {answer['errors']}")
            if isinstance(answer, dict) and "lease" in answer:
                placeholders = {"<TASK>": answer["task"]["id"], "<LEASE>": answer["lease"]}
                # Long enough for a person to type the next command, as the tour says.
                expires = datetime.fromisoformat(answer["expires_at"].replace("Z", "+00:00"))
                assert expires - datetime.now(UTC) > timedelta(minutes=5), where


def _filled(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace(name, value)
    return text


def _is_json(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")

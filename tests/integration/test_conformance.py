"""The API descriptions are what the service does: schemathesis (its every check: status
codes, content types, response schemas and headers, schema-valid requests accepted,
schema-violating ones refused, auth, methods) against a real ``causeway serve`` on a real
database, for every operation of the OpenAPI document, and for every field of the GraphQL
schema at ``/graphql``. ``schemathesis.toml`` says what each run may answer beyond that.

Examples are bounded and the seed fixed, so a run takes the same time, and the same
requests, every time; ``CAUSEWAY_CONFORMANCE_EXAMPLES`` asks for more."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex

import pytest
from sqlalchemy import URL

from tests.conftest import janitor
from tests.integration.process import create_key, environment, serving

CONFIG = Path(__file__).with_name("schemathesis.toml")
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = os.environ.get("CAUSEWAY_CONFORMANCE_EXAMPLES", "10")
SEED = "37"


@pytest.fixture(scope="module")
def served(server: URL, template_db: str) -> Iterator[tuple[str, str]]:
    """One ``causeway serve`` on a database of its own, and an admin key of it."""
    name = f"causeway_conformance_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        # A lease waits at most this long for a task: generated requests ask for hours. A
        # read that names a position past the head (min_position) waits this long, then
        # answers as documented (503 with Retry-After).
        env = environment(
            CAUSEWAY_DATABASE_URL=url,
            CAUSEWAY_SCHEDULER_MAX_WAIT_S="0.2",
            CAUSEWAY_READ_WAIT_MS="50",
        )
        key = create_key(env, "conformance", "admin")
        with serving(env) as base:
            yield base, key


def schemathesis(location: str, key: str, *options: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(Path(sys.executable).with_name("st")),
        "--config-file",
        str(CONFIG),
        "--no-color",
        "run",
        location,
        "--header",
        f"Authorization: Bearer {key}",
        "--checks",
        "all",
        "--max-examples",
        EXAMPLES,
        "--seed",
        SEED,
        *options,
    ]
    # From the checkout's root, where the config's hooks module is found.
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT
    )


class TestOpenAPI:
    def test_every_operation_answers_as_documented(self, served: tuple[str, str]) -> None:
        base, key = served
        run = schemathesis(f"{base}/openapi.json", key)
        assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]


class TestGraphQL:
    def test_every_field_answers_without_a_server_error(self, served: tuple[str, str]) -> None:
        base, key = served
        # A GraphQL schema cannot say which ids exist or which cursors were given out, so a
        # valid query may be answered with BAD_REQUEST or NOT_FOUND errors: schemathesis'
        # own checks of those are replaced by graphql_errors_are_the_clients, which fails
        # on any 5xx and any error coded as the server's (conformance_checks.py).
        run = schemathesis(
            f"{base}/graphql",
            key,
            "--exclude-checks",
            "not_a_server_error,positive_data_acceptance",
        )
        assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]

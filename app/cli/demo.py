"""``causeway demo``: load the demo data set (``app.cli.demo_data``, docs/demo.md) into a
running service, through its public HTTP API only, as any client would.

With no arguments it finds the service where ``causeway serve`` (``make run``) left its
address and admin key, in ``CAUSEWAY_DATA_DIR``; ``--target`` and ``--key`` name another.
Every step first asks whether it is done already (a route, a deployment's stream, a
report), and every event has a fixed id and content, so a second run adds nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import httpx2
import typer

from app.cli import demo_data as d
from app.cli.runtime import ADDRESS_FILE, ADMIN_KEY_FILE, fail, load_settings
from evs_bridge.cli.options import describe
from evs_bridge.decoders import Recording, UnknownFormat, open_recording
from evs_bridge.output import Output, OutputConfig, StoreSink
from evs_bridge.replay import send_recording
from ingest.client import CausewayClient, CausewayError, Lease

RECORDING = (
    Path(__file__).resolve().parents[2]
    / "tests/data/evs-samples/event_camera_codecs/test_data_evt3_trigger"
    / "test_data_evt3_trigger_0.db3"
)
_WORKER_DEADLINE_S = 60.0


def demo(
    target: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="the service's base URL",
            show_default=f"the address `causeway serve` keeps in CAUSEWAY_DATA_DIR/{ADDRESS_FILE}",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY",
            help="an API key with the admin scope",
            show_default=f"the key in CAUSEWAY_DATA_DIR/{ADMIN_KEY_FILE}",
        ),
    ] = None,
    recording: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="the event-camera recording replayed through the bridge",
            show_default="the bundled tests/data/evs-samples/.../test_data_evt3_trigger_0.db3",
        ),
    ] = None,
) -> None:
    """Load a small, documented data set (docs/demo.md) through the HTTP API: a hospital
    imaging workflow, two model versions, a rolled-back canary, tasks and a dead letter,
    and an event-camera recording. Running it again adds nothing."""
    opened = _recording(recording)  # before anything is sent: a refused run stores nothing
    target, key = _where(target, key)
    with (
        httpx2.Client(
            base_url=target, headers={"Authorization": f"Bearer {key}"}, timeout=30.0
        ) as http,
        CausewayClient(target, key) as client,
    ):
        try:
            head_before = _head(http)
            _load(http, client, opened)
            added = _head(http) - head_before
        except CausewayError as exc:
            if exc.status in (401, 403):  # the key given: bad input
                fail(f"the service at {target} refused the key: {exc}")
            fail(f"the service refused a demo request: {exc}", 1)
        except httpx2.TransportError as exc:
            fail(f"lost the service at {target}: {exc}", 1)
    typer.echo(
        f"added {added} events" if added else "the demo data set was already loaded: added nothing"
    )
    typer.echo(
        f"look around in the explorer at {target}/ui/, or ask for the audit of a triage "
        f"decision in GraphiQL at {target}/graphql:\n"
        '  { audit(decisionId: "demo-triage-1001") { sourceEvents { id } derivedEvents { id } '
        "models { name version } chainVerified } }"
    )


def _where(target: str | None, key: str | None) -> tuple[str, str]:
    """The service's address and key: as given, else as ``serve`` left them."""
    data_dir = load_settings().data_dir
    if target is None:
        target = _read(data_dir / ADDRESS_FILE, "address")
    if key is None:
        key = _read(data_dir / ADMIN_KEY_FILE, "admin key")
    target = target.rstrip("/")
    if not key.isascii() or not key.isprintable() or " " in key or not key:
        fail("--key must be an API key: printable ASCII, no spaces")
    try:
        status = httpx2.get(f"{target}/healthz", timeout=5.0).status_code
    except (httpx2.TransportError, httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
        fail(f"cannot reach {target} ({exc}): is `make run` going? Else give --target URL")
    if status != 200:
        fail(f"{target}/healthz answered {status}, not 200: is --target a Causeway service?")
    return target, key


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        fail(
            f"no {what} in {path}: start the service with `make run` (in another terminal) "
            "first, or give --target URL --key KEY"
        )


def _head(http: httpx2.Client) -> int:
    """The log's head position (``GET /projections``)."""
    response = http.get("/projections")
    _check(response)
    return max((int(p["head"]) for p in response.json()["projections"]), default=0)


def _load(
    http: httpx2.Client, client: CausewayClient, recording: tuple[Path, Recording] | None
) -> None:
    for body in d.model_versions():
        _check(http.post(f"/models/{d.MODEL}/versions", json=body))
    deployed = _exists(http, f"/streams/causeway:deployment:{d.SERVICE}")
    steps = [] if deployed else d.DEPLOYMENT_STEPS
    for path, body in steps[: d.STUDIES_AFTER]:
        _check(http.post(f"/deployments/{d.SERVICE}/{path}", json=body))
    if not _exists(http, f"/routes/{d.ROUTE}"):
        _check(http.post("/routes", json=d.ROUTE_SPEC))
    for study in d.STUDIES:
        client.post_batch(d.study_events(study))
    for path, body in steps[d.STUDIES_AFTER :]:
        _check(http.post(f"/deployments/{d.SERVICE}/{path}", json=body))
    typer.echo(
        f"{len(d.STUDIES)} CT studies, {d.MODEL} {d.STABLE} and {d.CANARY}, "
        f"the {d.SERVICE} canary {'already ' if deployed else ''}rolled back"
    )
    _work(http, client)
    _replay_recording(client, recording)


def _work(http: httpx2.Client, client: CausewayClient) -> None:
    """Act as the report-drafting worker: lease each study's task and do what
    ``WORKER_PLAN`` says, attempt by attempt, until every task is finished."""
    left = {trigger: list(plan) for trigger, plan in d.WORKER_PLAN.items()}
    for trigger in list(left):
        report = d.draft_report({"id": trigger})["id"]
        if _exists(http, f"/events/{report}") or _is_dead(http, trigger):
            del left[trigger]
    deadline = time.monotonic() + _WORKER_DEADLINE_S
    while left and time.monotonic() < deadline:
        lease = client.lease(d.QUEUE, "demo-worker", wait_s=5.0, lease_s=60.0)
        if lease is None:
            continue
        plan = left.get(str(lease.trigger["id"]))
        if not plan:  # a task of this queue the demo did not make: leave it to its worker
            _release(client, lease)
            continue
        action, message = plan.pop(0)
        if action == "complete":
            client.complete(lease, [d.draft_report(lease.trigger)])
        else:
            client.fail(lease, action, message)
        if not plan:
            del left[str(lease.trigger["id"])]
    if left:
        fail(f"the demo's tasks did not all come round within {_WORKER_DEADLINE_S:.0f} s", 1)
    typer.echo(
        f"route {d.ROUTE}: a task per study on queue {d.QUEUE}: "
        "one completed, one failed then completed, one dead-lettered"
    )


def _release(client: CausewayClient, lease: Lease) -> None:
    client.fail(lease, "transient", "leased by causeway demo, which does not run this task")


def _is_dead(http: httpx2.Client, trigger: str) -> bool:
    response = http.get("/dead-letters", params={"queue": d.QUEUE})
    _check(response)
    letters: list[dict[str, Any]] = response.json()["dead_letters"]
    return any(letter.get("trigger") == trigger for letter in letters)


def _recording(given: Path | None) -> tuple[Path, Recording] | None:
    """The recording to replay, opened (its format and geometry read); None when none was
    given and the bundled one is absent (the camera part is left out). One given that
    cannot be read is refused, as ``causeway evs replay`` refuses it."""
    path = RECORDING if given is None else given
    if not path.is_file():
        if given is not None:
            fail(f"{given}: no such file")
        return None
    try:
        return path, open_recording(path)
    except (UnknownFormat, ValueError, OSError) as exc:
        fail(describe(path, exc))


def _replay_recording(client: CausewayClient, opened: tuple[Path, Recording] | None) -> None:
    if opened is None:
        typer.echo(f"no event-camera recording at {RECORDING}: the camera part is left out")
        return
    path, recording = opened
    output = Output(StoreSink(client), None, OutputConfig(lazy_interval_s=0.0))
    try:
        stats = send_recording(path, d.SENSOR, output, recording=recording)
    except (UnknownFormat, ValueError, OSError) as exc:
        fail(describe(path, exc))
    finally:
        output.close()
    typer.echo(
        f"event camera {d.SENSOR}: {stats.events_in:,} sensor events through the bridge, "
        f"{output.stats.sent} lineage events ({output.stats.duplicates} already stored)"
    )


def _exists(http: httpx2.Client, path: str) -> bool:
    response = http.get(path)
    if response.status_code == 404:
        return False
    _check(response)
    return True


def _check(response: httpx2.Response) -> None:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text}
        raise CausewayError(response.status_code, problem)

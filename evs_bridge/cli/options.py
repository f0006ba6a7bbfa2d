"""What the bridge's commands share: the options of the pipeline, the store and the
spool, their checks, and ``fail``, which ends a command on bad input (``error: <detail>`` on
stderr, exit code 2). A check that fails does so before any output is opened.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from evs_bridge.channels import ChannelMap
from evs_bridge.classify import ClassifierNotFound, HeuristicClassifier, load_classifier
from evs_bridge.events import MAX_SIDE_PX
from evs_bridge.filters import BackendUnavailable, check_backend
from evs_bridge.lineage import SENSOR_ID
from evs_bridge.pipeline import PipelineConfig
from evs_bridge.regions import RegionParams
from evs_bridge.replay import BridgeSettings
from evs_bridge.windows import WindowSpec

DEFAULT_SPOOL = Path(".causeway-evs/spool")

_TARGET_HELP = "Causeway base URL, e.g. http://127.0.0.1:8000"
# Where events go: the store, or (``evs replay`` only) a file instead.
TargetOrOut = Annotated[
    str | None,
    typer.Option(metavar="URL", help=_TARGET_HELP, show_default="none: give it, or --out"),
]
Target = Annotated[
    str | None, typer.Option(metavar="URL", help=_TARGET_HELP, show_default="none: give it")
]
Key = Annotated[
    str | None,
    typer.Option(metavar="KEY", help="API key with the ingest scope", show_default="none"),
]
Sensor = Annotated[
    str, typer.Option(metavar="ID", help="Sensor id: names the source evs://<id> and the ids")
]
SpoolDir = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR",
        help="Spool directory for events the store cannot take yet (giving it also allows "
        "starting while the store is down)",
        show_default=f"{DEFAULT_SPOOL}/<sensor>",
    ),
]
SpoolMb = Annotated[int, typer.Option(min=1, metavar="MIB", help="Spool size limit, MiB")]
WindowMs = Annotated[
    int, typer.Option(metavar="MS", help="Window length, ms (aligned to sensor time)")
]
SegmentWindows = Annotated[
    int,
    typer.Option(
        min=1, max=100_000, metavar="COUNT", help="Windows per evs.segment.recorded event"
    ),
]
CellPx = Annotated[
    int,
    typer.Option(
        min=1, max=MAX_SIDE_PX, metavar="PX", help="Grid cell of the per-window count map, px"
    ),
]
MinCell = Annotated[int, typer.Option(metavar="COUNT", help="Events for a cell to count as active")]
MinRegion = Annotated[
    int,
    typer.Option(metavar="COUNT", help="Events for a connected component to be a region"),
]
DtUs = Annotated[
    int, typer.Option(metavar="US", help="Background-activity filter support time, µs")
]
Sustained = Annotated[
    int,
    typer.Option(metavar="COUNT", help="Consecutive active windows for a sustained event"),
]
ClassifierPath = Annotated[
    str | None,
    typer.Option(
        metavar="MODULE:NAME",
        help="Your classifier, 'package.module:Name'",
        show_default="the built-in heuristic",
    ),
]
Channels = Annotated[
    list[str] | None,
    typer.Option(
        "--channel",
        metavar="LABEL=NAME:PRIORITY",
        help="a label's channel and priority, repeatable, e.g. face=red:9",
        show_default="the built-in channels",
    ),
]
Run = Annotated[
    str | None,
    typer.Option(
        metavar="TAG", help="Tag added to every id (re-run with new params)", show_default="none"
    ),
]
Backend = Annotated[
    str,
    typer.Option(
        metavar="BACKEND", help="Background filter backend: numpy, or numba (needs numba installed)"
    ),
]
Neighbourhood = Annotated[
    int, typer.Option(metavar="4|8", help="Background filter neighbourhood: 4 or 8")
]


def check_finite(value: float) -> float:
    if not math.isfinite(value):  # a range lets nan through, and inf waits for ever
        raise typer.BadParameter(f"must be a finite number of seconds, not {value}")
    return value


LazyS = Annotated[
    float,
    typer.Option(
        min=0.0,
        metavar="SECONDS",
        callback=check_finite,
        help="Longest wait before green events are sent, s",
    ),
]
DrainS = Annotated[
    float,
    typer.Option(
        min=0.0,
        metavar="SECONDS",
        callback=check_finite,
        help="At the end, how long to retry a spool, s",
    ),
]


_MAX_WINDOW_MS = 3_600_000


def fail(detail: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {detail}", err=True)
    raise typer.Exit(code)


def describe(file: Path, exc: Exception) -> str:
    detail = str(exc).strip()
    return detail if str(file) in detail else f"{file}: {detail}"


def check_sensor(sensor: str) -> None:
    if not SENSOR_ID.match(sensor):
        fail(f"sensor id {sensor!r} must be 1-64 of A-Z a-z 0-9 . _ -")


def build_bridge_settings(
    window_ms: int,
    segment_windows: int,
    cell_px: int,
    min_cell_events: int,
    min_region_events: int,
    dt_us: int,
    sustained_windows: int,
    classifier: str | None,
    channel: list[str] | None,
    run: str | None,
    backend: str = "numpy",
    neighbourhood: int = 8,
) -> BridgeSettings:
    if backend not in ("numpy", "numba"):
        fail(f"--filter-backend must be numpy or numba, not {backend!r}")
    if neighbourhood not in (4, 8):
        fail(f"--neighbourhood must be 4 or 8, not {neighbourhood}")
    if dt_us <= 0:
        fail(f"--dt-us must be positive, not {dt_us}")
    if window_ms > _MAX_WINDOW_MS:
        fail(f"--window-ms must be at most {_MAX_WINDOW_MS} (an hour), not {window_ms}")
    if run is not None and not SENSOR_ID.match(run):  # before any output is opened
        fail(f"--run {run!r} must be 1-64 of A-Z a-z 0-9 . _ -")
    try:
        check_backend(backend)
    except BackendUnavailable as exc:
        fail(str(exc))
    try:
        pipeline = PipelineConfig(
            windows=WindowSpec(window_ms * 1000, segment_windows),
            regions=RegionParams(cell_px, min_cell_events, min_region_events),
            sustained_windows=sustained_windows,
        )
        chosen = HeuristicClassifier() if classifier is None else load_classifier(classifier)
        channels = ChannelMap.parse(channel or [])
    except (ValueError, ClassifierNotFound) as exc:
        fail(str(exc))
    return BridgeSettings(
        pipeline=pipeline,
        background_dt_us=dt_us,
        background_neighbourhood=neighbourhood,
        background_backend=backend,
        classifier=chosen,
        channels=channels,
        run=run,
    )


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )

"""The ``causeway evs`` commands: replay a recording, bridge an MQTT topic, inspect a file,
drain a spool.

Mounted by ``app.cli`` as ``causeway evs``; ``python -m evs_bridge`` runs it alone. As in
the rest of Causeway, bad input prints ``error: <detail>`` on stderr and exits 2: a file
that is missing or not a recording, ``--target``/``--key`` and ``--out`` both or neither
given, a store that cannot be reached when the command starts (unless ``--spool`` is
given: then the events wait there), a target that is no Causeway store (``/healthz`` does
not answer 200, or ``/events`` answers 404/405 or without a Causeway problem), a key the
store refuses, a spool that cannot be written or is in use by another bridge, a recording
that cannot be decoded, a classifier answering other than (label, confidence in [0, 1]),
or ``--filter-backend numba`` without numba installed.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated, NoReturn, TextIO

import httpx2
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from evs_bridge.channels import ChannelMap
from evs_bridge.classify import ClassifierNotFound, HeuristicClassifier, load_classifier
from evs_bridge.decoders import Recording, UnknownFormat, open_recording
from evs_bridge.filters import BackendUnavailable, check_backend
from evs_bridge.inspect import summarise
from evs_bridge.lineage import SENSOR_ID
from evs_bridge.mqtt import MAX_SIDE_PX, Broker, MqttBridge
from evs_bridge.output import NdjsonSink, Output, OutputConfig, Sink, StoreRefused, StoreSink
from evs_bridge.pipeline import PipelineConfig, PipelineStats
from evs_bridge.regions import RegionParams
from evs_bridge.replay import DEFAULT_CHUNK_EVENTS, BridgeSettings, send_recording
from evs_bridge.spool import Spool, SpoolBusy, SpoolCorrupt
from evs_bridge.windows import WindowSpec
from ingest.client import CausewayClient

cli = typer.Typer(
    help="The edge bridge for event-based vision sensors: recordings and live streams in, "
    "lineage events out.",
    no_args_is_help=True,
)
_err = Console(stderr=True)
DEFAULT_SPOOL = Path(".causeway-evs/spool")

Target = Annotated[str | None, typer.Option(help="Causeway base URL, e.g. http://127.0.0.1:8000")]
Key = Annotated[str | None, typer.Option(help="API key with the ingest scope")]
Sensor = Annotated[str, typer.Option(help="Sensor id: names the source evs://<id> and the ids")]
SpoolDir = Annotated[
    Path | None,
    typer.Option(
        help="Spool directory for events the store cannot take yet "
        f"(default {DEFAULT_SPOOL}/<sensor>; giving it also allows starting while the "
        "store is down)"
    ),
]
SpoolMb = Annotated[int, typer.Option(min=1, help="Spool size limit, MiB")]
WindowMs = Annotated[int, typer.Option(help="Window length, ms (aligned to sensor time)")]
SegmentWindows = Annotated[
    int, typer.Option(min=1, max=100_000, help="Windows per evs.segment.recorded event")
]
CellPx = Annotated[
    int, typer.Option(min=1, max=MAX_SIDE_PX, help="Grid cell of the per-window count map, px")
]
MinCell = Annotated[int, typer.Option(help="Events for a cell to count as active")]
MinRegion = Annotated[int, typer.Option(help="Events for a connected component to be a region")]
DtUs = Annotated[int, typer.Option(help="Background-activity filter support time, µs")]
Sustained = Annotated[int, typer.Option(help="Consecutive active windows for a sustained event")]
ClassifierPath = Annotated[
    str | None, typer.Option(help="Your classifier, 'package.module:Name' (default: heuristic)")
]
Channels = Annotated[
    list[str] | None,
    typer.Option("--channel", help="LABEL=NAME:PRIORITY, repeatable, e.g. face=red:9"),
]
Run = Annotated[str | None, typer.Option(help="Tag added to every id (re-run with new params)")]
Backend = Annotated[
    str, typer.Option(help="Background filter backend: numpy, or numba (needs numba installed)")
]
Neighbourhood = Annotated[int, typer.Option(help="Background filter neighbourhood: 4 or 8")]


def _finite(value: float) -> float:
    if not math.isfinite(value):  # a range lets nan through, and inf waits for ever
        raise typer.BadParameter(f"must be a finite number of seconds, not {value}")
    return value


LazyS = Annotated[
    float,
    typer.Option(min=0.0, callback=_finite, help="Longest wait before green events are sent, s"),
]
DrainS = Annotated[
    float,
    typer.Option(min=0.0, callback=_finite, help="At the end, how long to retry a spool, s"),
]


_MAX_WINDOW_MS = 3_600_000


def fail(detail: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {detail}", err=True)
    raise typer.Exit(code)


def run_commands(commands: typer.Typer) -> NoReturn:
    """Run ``commands`` as a program: a usage error (a missing argument, an option's value
    out of its range) is one line on stderr and exit code 2, not click's framed box. Any
    other error propagates. ``causeway`` runs this way, and ``python -m evs_bridge``."""
    try:
        code = commands(standalone_mode=False)
    except typer.Abort:
        raise SystemExit(1) from None
    except Exception as exc:
        # Typer vendors click, so its UsageError is matched by shape: exit code 2 and a
        # message, as click's own is.
        if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            raise SystemExit(commands(["--help"], standalone_mode=False)) from None
        typer.echo(f"error: {exc.format_message()}", err=True)
        raise SystemExit(2) from None
    raise SystemExit(code if isinstance(code, int) else 0)


@cli.command()
def replay(
    file: Annotated[Path, typer.Argument(help="Recording: .raw, .db3, .aedat4, .npz or .npy")],
    sensor: Sensor,
    target: Target = None,
    key: Key = None,
    out: Annotated[Path | None, typer.Option(help="Write events as NDJSON instead")] = None,
    spool: SpoolDir = None,
    spool_mb: SpoolMb = 256,
    window_ms: WindowMs = 20,
    segment_windows: SegmentWindows = 5,
    cell_px: CellPx = 8,
    min_cell_events: MinCell = 3,
    min_region_events: MinRegion = 30,
    dt_us: DtUs = 2000,
    sustained_windows: Sustained = 10,
    classifier: ClassifierPath = None,
    channel: Channels = None,
    run: Run = None,
    filter_backend: Backend = "numpy",
    neighbourhood: Neighbourhood = 8,
    lazy_interval_s: LazyS = 2.0,
    drain_timeout_s: DrainS = 30.0,
) -> None:
    """Replay a recording: decode, filter, detect, and post lineage events (or write them)."""
    _configure_logging()
    recording = _load_recording(file)
    _check_sensor(sensor)
    settings = _settings(
        window_ms,
        segment_windows,
        cell_px,
        min_cell_events,
        min_region_events,
        dt_us,
        sustained_windows,
        classifier,
        channel,
        run,
        filter_backend,
        neighbourhood,
    )
    config = OutputConfig(lazy_interval_s=lazy_interval_s, on_full="wait")
    with _output(target, key, out, spool, spool_mb, sensor, config) as output:
        started = time.monotonic()
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=_err,
            transient=True,
            disable=not _err.is_terminal,  # else it ends with a blank line of its own
        ) as progress:
            task = progress.add_task(file.name, total=None, rate="")

            def show(stats: PipelineStats, _offset: int) -> None:
                elapsed = max(time.monotonic() - started, 1e-6)
                progress.update(
                    task,
                    rate=f"{stats.events_in:,} events, {stats.events_in / elapsed:,.0f} ev/s, "
                    f"filter ratio {stats.filter_ratio:.3f}, {stats.activities} activities",
                )
                output.poll()

            try:
                stats = send_recording(
                    file, sensor, output, settings=settings, on_chunk=show, recording=recording
                )
            except (UnknownFormat, ValueError, OSError) as exc:
                output.close()
                fail(_about(file, exc))
        output.close(drain_timeout_s=drain_timeout_s)
        elapsed = time.monotonic() - started
    _print_summary(stats, output, elapsed)


@cli.command()
def mqtt(
    broker: Annotated[str, typer.Option(help="mqtt://host[:port]")],
    topic: Annotated[str, typer.Option(help="The sensor's topic")],
    sensor: Sensor,
    target: Target = None,
    key: Key = None,
    spool: SpoolDir = None,
    spool_mb: SpoolMb = 256,
    queue_packets: Annotated[int, typer.Option(help="Packets queued for the worker")] = 1024,
    window_ms: WindowMs = 20,
    segment_windows: SegmentWindows = 5,
    cell_px: CellPx = 8,
    min_cell_events: MinCell = 3,
    min_region_events: MinRegion = 30,
    dt_us: DtUs = 2000,
    sustained_windows: Sustained = 10,
    classifier: ClassifierPath = None,
    channel: Channels = None,
    run: Run = None,
    filter_backend: Backend = "numpy",
    neighbourhood: Neighbourhood = 8,
    width: Annotated[
        int | None, typer.Option(help="Pin the geometry: packets of another width are bad")
    ] = None,
    height: Annotated[
        int | None, typer.Option(help="Pin the geometry: packets of another height are bad")
    ] = None,
    lazy_interval_s: LazyS = 2.0,
) -> None:
    """Bridge one sensor's MQTT topic to the store until Ctrl-C (or SIGTERM)."""
    _configure_logging()
    try:
        where = Broker.parse(broker)
    except ValueError as exc:
        fail(str(exc))
    if target is None or key is None:
        fail("give --target and --key")
    _check_sensor(sensor)
    settings = _settings(
        window_ms,
        segment_windows,
        cell_px,
        min_cell_events,
        min_region_events,
        dt_us,
        sustained_windows,
        classifier,
        channel,
        run,
        filter_backend,
        neighbourhood,
    )
    for side in (width, height):
        if side is not None and not 0 < side <= MAX_SIDE_PX:
            fail(f"--width and --height must be 1-{MAX_SIDE_PX}")
    if queue_packets < 1:  # a queue of 0 would be unbounded
        fail(f"--queue-packets must be at least 1, not {queue_packets}")
    config = OutputConfig(lazy_interval_s=lazy_interval_s, on_full="drop")
    with _output(target, key, None, spool, spool_mb, sensor, config) as output:
        try:
            bridge = MqttBridge(
                where,
                topic,
                sensor,
                output,
                settings=settings,
                queue_packets=queue_packets,
                width=width,
                height=height,
            )
        except ValueError as exc:
            output.close()
            fail(str(exc))
        stopping = threading.Event()

        def stop(_signum: int, _frame: FrameType | None) -> None:
            stopping.set()

        previous = signal.signal(signal.SIGTERM, stop)
        bridge.start()
        if bridge.subscribed.wait(5.0):
            typer.echo(f"subscribed to {where}/{topic} as sensor {sensor}; Ctrl-C stops", err=True)
        else:
            typer.echo(f"{where} does not answer yet; retrying; Ctrl-C stops", err=True)
        try:
            while not stopping.wait(1.0) and bridge.failure is None:
                pass
        except KeyboardInterrupt:
            pass
        finally:
            bridge.stop()
            signal.signal(signal.SIGTERM, previous)
        if isinstance(bridge.failure, StoreRefused):
            fail(str(bridge.failure))
        if bridge.failure is not None:
            fail(f"the bridge stopped: {bridge.failure}", code=1)
        s = bridge.stats
        typer.echo(
            f"packets: {s.received} received, {s.processed} processed, {s.dropped} dropped, "
            f"{s.bad} bad, {s.gaps} missing, {s.stale} stale, {s.restarts} restarts; "
            f"sensor events: {s.out_of_geometry} outside the geometry, {s.outliers} outliers; "
            f"events: {output.stats.sent} sent, {output.stats.spooled} spooled, "
            f"{output.stats.dropped} dropped, {output.stats.rejected} rejected"
        )


@cli.command()
def inspect(file: Annotated[Path, typer.Argument(help="Recording to summarise")]) -> None:
    """Print a recording's sensor, resolution, event count, duration and rates."""
    if not file.is_file():
        fail(f"{file}: no such file")
    try:
        summary = summarise(file)
    except (UnknownFormat, ValueError, OSError) as exc:
        fail(_about(file, exc))
    typer.echo(f"file        {summary.path}")
    typer.echo(f"format      {summary.format} ({summary.clock} clock)")
    typer.echo(f"sensor      {summary.sensor}")
    typer.echo(f"resolution  {summary.width}x{summary.height}")
    typer.echo(f"events      {summary.events:,} ({summary.on_events:,} on)")
    typer.echo(f"triggers    {summary.triggers:,}")
    typer.echo(f"time        {summary.first_t_us} to {summary.last_t_us} µs")
    typer.echo(f"duration    {summary.duration_s:.6f} s")
    typer.echo(f"mean rate   {summary.mean_rate_hz:,.0f} events/s")
    typer.echo(f"peak rate   {summary.peak_rate_hz:,.0f} events/s (over {summary.peak_bin_us} µs)")


@cli.command()
def drain(
    spool: Annotated[Path, typer.Option(help="Spool directory to send")],
    target: Target = None,
    key: Key = None,
    timeout_s: Annotated[
        float, typer.Option(min=0.0, callback=_finite, help="Give up after this long, s")
    ] = 60.0,
) -> None:
    """Send what a spool holds (oldest first), e.g. after a replay ended with the store down."""
    _configure_logging()
    if not spool.is_dir():
        fail(f"{spool}: no such spool directory")
    with _output(target, key, None, spool, 1 << 20, "", OutputConfig()) as output:
        output.close(drain_timeout_s=timeout_s)
    try:
        with Spool(spool) as left_behind:
            left = left_behind.pending_bytes
    except SpoolBusy as exc:
        fail(str(exc))
    typer.echo(f"sent {output.stats.sent} events; {left} bytes left in {spool}")
    if left:
        raise typer.Exit(1)


def _load_recording(file: Path) -> Recording:
    if not file.is_file():
        fail(f"{file}: no such file")
    try:
        return open_recording(file, chunk_events=DEFAULT_CHUNK_EVENTS)
    except (UnknownFormat, ValueError, OSError) as exc:
        fail(_about(file, exc))


def _about(file: Path, exc: Exception) -> str:
    detail = str(exc).strip()
    return detail if str(file) in detail else f"{file}: {detail}"


def _check_sensor(sensor: str) -> None:
    if not SENSOR_ID.match(sensor):
        fail(f"sensor id {sensor!r} must be 1-64 of A-Z a-z 0-9 . _ -")


def _settings(
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
        chosen = load_classifier(classifier) if classifier else HeuristicClassifier()
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


@contextmanager
def _output(
    target: str | None,
    key: str | None,
    out: Path | None,
    spool: Path | None,
    spool_mb: int,
    sensor: str,
    config: OutputConfig,
) -> Iterator[Output]:
    if out is not None:
        if target is not None or key is not None:
            fail("give either --out or --target/--key, not both")
        with _written(out) as file:
            yield Output(NdjsonSink(file), None, config)
        return
    if target is None or key is None:
        fail("give --target and --key (or --out FILE)")
    if not key or not key.isascii() or not key.isprintable() or " " in key:
        fail("--key must be an API key: printable ASCII, no spaces")
    status = _fetch_health(target)
    if status is None and spool is None:
        fail(f"cannot reach {target} (give --spool DIR to keep events until it answers)")
    if status is not None and status != 200 and not (status >= 500 and spool is not None):
        fail(f"{target}/healthz answered {status}, not 200: is --target a Causeway store?")
    directory = spool if spool is not None else DEFAULT_SPOOL / sensor
    try:
        opened = Spool(directory, max_bytes=spool_mb << 20)
    except SpoolBusy as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{directory}: cannot use as a spool: {exc.strerror or exc}")
    with CausewayClient(target, key, timeout_s=10.0) as client:
        sink: Sink = StoreSink(client)
        try:
            yield Output(sink, opened, config)
        except StoreRefused as exc:
            fail(f"{exc} (events kept in {directory})")
        except SpoolCorrupt as exc:
            fail(str(exc))
        finally:
            opened.close()


@contextmanager
def _written(out: Path) -> Iterator[TextIO]:
    """``out`` opened for the events. A regular file (or a new one) is written beside
    itself, with its permissions, and renamed onto ``out`` only when the command
    succeeds: a replay that fails (a recording that cannot be decoded, a full disk) leaves
    what ``out`` held as it was. Anything else is written through: a symlink (``/dev/stdout``
    is one, to what the shell redirected), a pipe, a device. The same rules as ``causeway
    replay --out`` (``app.cli``), which the bridge, an HTTP client of the store, does not
    import."""
    if out.is_dir():
        fail(f"{out}: is a directory")
    try:
        found = os.lstat(out)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}")
    through = found is not None and not stat.S_ISREG(found.st_mode)
    target = out if through else out.with_name(f".{out.name}.partial")
    try:
        file = target.open("w", encoding="utf-8")
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}")
    try:
        try:
            with file:
                if found is not None and not through:
                    os.chmod(target, stat.S_IMODE(found.st_mode))
                yield file
            if not through:
                target.replace(out)
        except OSError as exc:  # a full disk, as the file is written or closed
            fail(f"writing {out}: {exc.strerror or exc}", 1)
    except BaseException:
        if not through:
            target.unlink(missing_ok=True)
        raise


def _fetch_health(target: str) -> int | None:
    """The status ``/healthz`` answers with, or None when nothing answers."""
    try:
        return httpx2.get(f"{target.rstrip('/')}/healthz", timeout=5.0).status_code
    except (httpx2.TransportError, httpx2.InvalidURL, httpx2.UnsupportedProtocol):
        return None


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def _print_summary(stats: PipelineStats, output: Output, elapsed_s: float) -> None:
    labels = ", ".join(f"{n} {label}" for label, n in sorted(stats.labels.items())) or "none"
    o = output.stats
    typer.echo(
        f"{stats.events_in:,} events in {elapsed_s:.2f} s "
        f"({stats.events_in / max(elapsed_s, 1e-6):,.0f} ev/s); kept {stats.after_background:,} "
        f"(filter ratio {stats.filter_ratio:.4f}); {stats.segments} segments, "
        f"{stats.activities} activities ({labels}), {stats.sustained} sustained"
    )
    if stats.out_of_geometry or stats.outliers:
        typer.echo(
            f"dropped sensor events: {stats.out_of_geometry:,} outside the geometry, "
            f"{stats.outliers:,} with outlier times"
        )
    typer.echo(
        f"events: {o.sent} sent ({o.duplicates} already stored), {o.spooled} spooled, "
        f"{o.rejected} rejected, {o.dropped} dropped"
        + (f" ({o.rejected_not_kept} rejects not kept)" if o.rejected_not_kept else "")
    )
    if output.is_down:
        typer.echo("warning: the store is still unreachable; `drain` sends the spool", err=True)

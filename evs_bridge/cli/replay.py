"""``replay``: a recording decoded, filtered and detected, its lineage events posted to the
store (or written to ``--out``), with a progress line on a terminal and a summary at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from evs_bridge.channels import Delivery
from evs_bridge.cli.options import (
    Backend,
    CellPx,
    Channels,
    ClassifierPath,
    DrainS,
    DtUs,
    Key,
    LazyS,
    MinCell,
    MinRegion,
    Neighbourhood,
    Run,
    SegmentWindows,
    Sensor,
    SpoolDir,
    SpoolMb,
    Sustained,
    TargetOrOut,
    WindowMs,
    build_bridge_settings,
    check_sensor,
    configure_logging,
    describe,
    fail,
)
from evs_bridge.cli.outputs import open_output
from evs_bridge.decoders import Recording, UnknownFormat, open_recording
from evs_bridge.output import Output, OutputConfig
from evs_bridge.pipeline import PipelineStats
from evs_bridge.replay import DEFAULT_CHUNK_EVENTS, send_recording

_err = Console(stderr=True)


def replay(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="Recording: .raw, .db3, .aedat4, .npz or .npy")
    ],
    sensor: Sensor,
    target: TargetOrOut = None,
    key: Key = None,
    out: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write events as NDJSON instead", show_default="none"),
    ] = None,
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
    configure_logging()
    recording = _load_recording(file)
    check_sensor(sensor)
    settings = build_bridge_settings(
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
    if out is not None and _same_file(out, file):
        fail(f"{out}: is the recording being replayed; give --out another file")
    config = OutputConfig(lazy_interval_s=lazy_interval_s, on_full="wait")
    with open_output(target, key, out, spool, spool_mb, sensor, config) as output:
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
                with _OutputFailed.marking():
                    output.poll()

            try:
                stats = send_recording(
                    file, sensor, _Marked(output), settings=settings, on_chunk=show,
                    recording=recording,
                )  # fmt: skip
            except _OutputFailed as failed:
                # The spool or the store's (a full disk, a refusal): ``open_output`` says it.
                raise failed.error from None
            except (UnknownFormat, ValueError, OSError) as exc:
                output.close()
                fail(describe(file, exc))
        output.close(drain_timeout_s=drain_timeout_s)
        elapsed = time.monotonic() - started
    _print_summary(stats, output, elapsed)


class _OutputFailed(Exception):
    """What the output raised (``error``), carried past the handler of the recording's
    errors: a full disk under the spool said ``error: <the recording>: File too large``,
    exit 2, as if the recording were broken."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error

    @staticmethod
    @contextmanager
    def marking() -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            raise _OutputFailed(exc) from exc


class _Marked:
    """``output`` as the pipeline's sink, its failures marked as the output's."""

    def __init__(self, output: Output) -> None:
        self._output = output

    def put(self, event: dict[str, Any], delivery: Delivery) -> None:
        with _OutputFailed.marking():
            self._output.put(event, delivery)


def _same_file(out: Path, file: Path) -> bool:
    """Whether ``out`` is ``file`` (by another name, a link): written, the recording whose
    SHA-256 every event's dataref names was replaced by them."""
    try:
        return os.path.samefile(out, file)
    except OSError:  # no such file yet (or none to compare): not the recording
        return False


def _load_recording(file: Path) -> Recording:
    if not file.is_file():
        fail(f"{file}: no such file")
    try:
        return open_recording(file, chunk_events=DEFAULT_CHUNK_EVENTS)
    except (UnknownFormat, ValueError, OSError) as exc:
        fail(describe(file, exc))


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

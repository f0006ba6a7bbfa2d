"""``inspect``: a recording's sensor, resolution, event count, duration and rates."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evs_bridge.cli.options import describe, fail
from evs_bridge.decoders import UnknownFormat
from evs_bridge.inspect import summarise


def inspect(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Recording to summarise")],
) -> None:
    """Print a recording's sensor, resolution, event count, duration and rates."""
    if not file.is_file():
        fail(f"{file}: no such file")
    try:
        summary = summarise(file)
    except (UnknownFormat, ValueError, OSError) as exc:
        fail(describe(file, exc))
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

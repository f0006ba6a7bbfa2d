"""``drain``: what a spool holds, sent to the store oldest first; exit code 1 when some is
left."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evs_bridge.cli.options import Key, Target, check_finite, configure_logging, fail
from evs_bridge.cli.outputs import open_output
from evs_bridge.output import OutputConfig
from evs_bridge.spool import LOCK_FILE, Spool, SpoolBusy


def drain(
    spool: Annotated[Path, typer.Option(metavar="DIR", help="Spool directory to send")],
    target: Target = None,
    key: Key = None,
    timeout_s: Annotated[
        float,
        typer.Option(
            min=0.0, metavar="SECONDS", callback=check_finite, help="Give up after this long, s"
        ),
    ] = 60.0,
) -> None:
    """Send what a spool holds (oldest first), e.g. after a replay ended with the store down."""
    configure_logging()
    if target is None or key is None:
        fail("give --target and --key")  # drain has no --out (open_output's own message)
    if not spool.is_dir():
        fail(f"{spool}: no such spool directory")
    if not (spool / LOCK_FILE).exists() and not any(spool.glob("spool-*.ndjson")):
        # Not a directory a bridge spooled in (``--spool ""`` is the working directory):
        # opening it would leave a spool's files there.
        fail(f"{spool}: holds no spool")
    with open_output(target, key, None, spool, 1 << 20, "", OutputConfig()) as output:
        output.close(drain_timeout_s=timeout_s)
    try:
        with Spool(spool) as left_behind:
            left = left_behind.pending_bytes
    except SpoolBusy as exc:
        fail(str(exc))
    typer.echo(f"sent {output.stats.sent} events; {left} bytes left in {spool}")
    if left:
        raise typer.Exit(1)

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

One module per command (``replay``, ``mqtt``, ``inspect``, ``drain``); ``options`` holds
the options they share and ``fail``, ``outputs`` opens where the events go (the store with
a spool, or an NDJSON file).
"""

from __future__ import annotations

from typing import NoReturn

import typer

from evs_bridge.cli.drain import drain
from evs_bridge.cli.inspect import inspect
from evs_bridge.cli.mqtt import mqtt
from evs_bridge.cli.replay import replay

__all__ = ["cli", "run_commands"]

cli = typer.Typer(
    help="The edge bridge for event-based vision sensors: recordings and live streams in, "
    "lineage events out.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: metavars as words, as `causeway --help` shows them
)
# In this order in --help.
for command in (replay, mqtt, inspect, drain):
    cli.command()(command)


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

"""The Typer apps: ``causeway`` and its command groups (``keys``, ``projections``,
``relay``, ``evs``). The command modules register their commands on them."""

from __future__ import annotations

import typer

from evs_bridge.cli import cli as evs_cli

# Plain help (rich_markup_mode=None): an option's value reads as its metavar (``--port
# PORT``), and a flag shows none; Typer's rich panels print ``<int range>``, ``<bool>``.
cli = typer.Typer(
    help="Causeway: an append-only lineage store for AI systems.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
keys_cli = typer.Typer(
    help="Create and revoke API keys.", no_args_is_help=True, rich_markup_mode=None
)
cli.add_typer(keys_cli, name="keys")
projections_cli = typer.Typer(
    help="Inspect and rebuild read models.", no_args_is_help=True, rich_markup_mode=None
)
cli.add_typer(projections_cli, name="projections")
relay_cli = typer.Typer(
    help="Relay the log to NATS JetStream.", no_args_is_help=True, rich_markup_mode=None
)
cli.add_typer(relay_cli, name="relay")
cli.add_typer(evs_cli, name="evs")  # the edge bridge, also `python -m evs_bridge`

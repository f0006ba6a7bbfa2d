"""The ``causeway`` command: serve, demo, migrate, verify, anchor, replay, projections,
relay, keys and evs.

Bad input prints ``error: <detail>`` on stderr and exits 2; a failed check (``verify``)
exits 1. With no ``CAUSEWAY_DATABASE_URL`` every command uses the embedded PostgreSQL
under ``CAUSEWAY_DATA_DIR``.

One module per group of commands; ``app`` holds the Typer apps they register on.
"""

from __future__ import annotations

import typer

from app.cli import demo, keys, log, projections, relay, serve
from app.cli.app import cli, keys_cli, projections_cli, relay_cli
from app.store.failures import connection_problem
from evs_bridge.cli import run_commands

__all__ = ["cli", "main"]

# In the order `causeway --help` lists them.
cli.command()(serve.serve)
cli.command()(demo.demo)
cli.command()(serve.migrate)
cli.command()(log.verify)
cli.command()(log.anchor)
cli.command()(log.replay)
cli.command()(projections.project)
projections_cli.command("status")(projections.projections_status)
projections_cli.command("rebuild")(projections.projections_rebuild)
projections_cli.command("skip")(projections.projections_skip)
projections_cli.command("unskip")(projections.projections_unskip)
relay_cli.command("nats")(relay.relay_nats)
relay_cli.command("status")(relay.relay_status)
keys_cli.command("create")(keys.keys_create)
keys_cli.command("revoke")(keys.keys_revoke)


def main() -> None:
    """Run the CLI; a usage error, or a database the command cannot use (unreachable,
    refusing the login, not migrated), is one line on stderr and exit code 2."""
    try:
        run_commands(cli)
    except Exception as exc:
        detail = connection_problem(exc)
        if detail is None:
            raise
        typer.echo(f"error: {detail}", err=True)
        raise SystemExit(2) from None

"""``python -m evs_bridge``: the bridge's commands without the rest of Causeway."""

from evs_bridge.cli import cli, run_commands

if __name__ == "__main__":
    run_commands(cli)

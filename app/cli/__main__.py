"""``python -m app.cli``: the ``causeway`` command."""

from app.cli import main

main()

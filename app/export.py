"""Writes the generated API descriptions that are committed: the GraphQL SDL and the
OpenAPI document. ``make schema`` runs this; a unit test fails when they drift."""

import sys
from pathlib import Path

import orjson

from app.graphql.schema import schema
from app.main import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SDL = ROOT / "docs" / "schema.graphql"
OPENAPI = ROOT / "docs" / "openapi.json"


def render_sdl() -> str:
    return schema.as_str() + "\n"


def render_openapi() -> str:
    # The URL is never connected to: the engine is lazy, and only the routes are read.
    app = create_app(Settings(_env_file=None), database_url="postgresql://export@localhost/none")
    return (
        orjson.dumps(app.openapi(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
        + "\n"
    )


def main() -> None:
    SDL.write_text(render_sdl())
    OPENAPI.write_text(render_openapi())
    sys.stderr.write(f"wrote {SDL.relative_to(ROOT)} and {OPENAPI.relative_to(ROOT)}\n")


if __name__ == "__main__":
    main()

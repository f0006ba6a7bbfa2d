"""Project-wide rules: migrations stand alone, the README documents every setting, and
the producer client's public names stay put."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ingest.client
from app.export import OPENAPI, SDL, render_openapi, render_sdl
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OUR_PACKAGES = {"app", "ingest", "scheduler", "evs_bridge", "tests"}


def test_migrations_import_nothing_of_ours() -> None:
    for path in (ROOT / "migrations" / "versions").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in OUR_PACKAGES, f"{path.name} imports {name}"


def test_readme_documents_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `CAUSEWAY_([A-Z_]+)` \|", readme, flags=re.MULTILINE))
    assert documented == {name.upper() for name in Settings.model_fields}


def test_the_client_public_names_are_pinned() -> None:
    assert sorted(ingest.client.__all__) == [
        "AppendResult",
        "CausewayClient",
        "CausewayError",
        "Lease",
    ]


def test_the_committed_graphql_schema_and_openapi_are_current() -> None:
    assert SDL.read_text() == render_sdl(), "run `make schema`"
    assert OPENAPI.read_text() == render_openapi(), "run `make schema`"


# Causeway uses its HTTP server through the server's public API and ASGI only: a private
# module (uvicorn's protocols, its parser's internals) breaks on any release.
_PUBLIC_SERVER_MODULES = {"uvicorn"}
_SERVER_PACKAGES = {"uvicorn", "httptools", "h11", "granian", "hypercorn"}


def test_no_code_imports_a_private_module_of_the_http_server() -> None:
    found = []
    for package in ("app", "ingest", "scheduler", "evs_bridge"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                else:
                    continue
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
                    for name in names
                    if name.split(".")[0] in _SERVER_PACKAGES and name not in _PUBLIC_SERVER_MODULES
                ]
    assert found == []


def test_no_module_passes_500_lines_and_no_function_100() -> None:
    """A module that grows past 500 lines is split by responsibility, a function past 100
    lines into named steps (STYLE.md 3): both were how a newcomer got lost before."""
    too_long = []
    for package in ("app", "ingest", "scheduler", "evs_bridge"):
        for path in (ROOT / package).rglob("*.py"):
            source = path.read_text()
            if source.count("\n") > 500:
                too_long.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > 100:
                        too_long.append(f"{path.relative_to(ROOT)}: {node.name}, {length} lines")
    assert too_long == []

"""``GET /ui/...``: the same HTML shell for every page (the script reads the path), and
``GET /ui/static/{name}``: the explorer's own scripts and style sheet.

Every page's URL is the page (``/ui/events/{id}/lineage?up=3&down=3``), so it can be
shared; the key never is in it. Nothing the shell loads comes from another origin, and
the Content-Security-Policy says so to the browser too.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from app.errors import NotFound

STATIC = Path(__file__).resolve().parent / "static"
_NAME = re.compile(r"[a-z][a-z0-9-]*\.(js|css)")
_TYPES = {".js": "text/javascript", ".css": "text/css"}
# Only this server: scripts, styles, fetches, images (data: for binary data's download
# links), and no framing of the pages by another site.
POLICY = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Content-Security-Policy": POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/ui")
async def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=308)


@router.get("/ui/static/{name}")
async def static_file(name: str) -> FileResponse:
    path = STATIC / name
    if not _NAME.fullmatch(name) or not path.is_file():
        raise NotFound(f"no explorer file {name!r}", file=name)
    return FileResponse(path, media_type=_TYPES[path.suffix], headers=_HEADERS)


@router.get("/ui/{page:path}")
async def page(page: str) -> HTMLResponse:  # noqa: ARG001  (the script reads the path)
    return HTMLResponse(SHELL, headers=_HEADERS)


SHELL = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Causeway explorer</title>
<link rel="icon" href="/assets/favicon.svg">
<link rel="stylesheet" href="/ui/static/explorer.css">
<script type="module" src="/ui/static/app.js"></script>
</head>
<body>
<a class="skip" href="#page">Skip to content</a>
<header class="top">
  <a class="brand" href="/ui/">Causeway</a>
  <nav aria-label="Sections">
    <a href="/ui/">Find</a>
    <a href="/ui/models">Models</a>
    <a href="/ui/deployments">Deployments</a>
    <a href="/ui/queues">Queues</a>
    <a href="/graphql">GraphiQL</a>
    <a href="/docs">API docs</a>
  </nav>
  <form id="key-form" class="key" autocomplete="off">
    <label for="key-input">API key</label>
    <input id="key-input" type="password" spellcheck="false">
    <button type="submit">Use key</button>
    <button type="button" id="key-forget">Forget</button>
    <span id="key-state" role="status"></span>
  </form>
</header>
<main id="page" tabindex="-1"><p>Loading...</p></main>
</body>
</html>
"""

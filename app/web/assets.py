"""The front-end files Causeway serves itself, so that no page it serves loads anything
from elsewhere (no CDN, no font service): Swagger UI at ``/docs``, ReDoc at ``/redoc``,
GraphiQL at a browser's ``GET /graphql``, and what the explorer (``app.explorer``) loads.

The third-party files come from npm packages pinned in ``vendor/package.json`` (and its
``package-lock.json``), installed by ``make install`` (``npm ci``) into
``vendor/node_modules``: never copied into the repository. ``GET /assets/{name}`` serves
only the files named in ``VENDOR_FILES``, not the whole folder. Our own small scripts
(the GraphiQL page's start-up) are in ``static/``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse

from app.errors import NotFound, Unavailable

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "vendor" / "node_modules"
STATIC = HERE / "static"
OPENAPI_URL = "/openapi.json"
SWAGGER_REDIRECT_URL = "/docs/oauth2-redirect"
FAVICON_URL = "/assets/favicon.svg"

# URL name under /assets/ -> the file under vendor/node_modules (its package, pinned).
VENDOR_FILES = {
    "swagger-ui-bundle.js": "swagger-ui-dist/swagger-ui-bundle.js",
    "swagger-ui.css": "swagger-ui-dist/swagger-ui.css",
    "redoc.standalone.js": "redoc/bundles/redoc.standalone.js",
    "react.production.min.js": "react/umd/react.production.min.js",
    "react-dom.production.min.js": "react-dom/umd/react-dom.production.min.js",
    "graphiql.min.js": "graphiql/graphiql.min.js",
    "graphiql.min.css": "graphiql/graphiql.min.css",
    "plugin-explorer.umd.js": "@graphiql/plugin-explorer/dist/index.umd.js",
    "plugin-explorer.css": "@graphiql/plugin-explorer/dist/style.css",
}
OWN_FILES = {"graphiql-start.js": "graphiql-start.js", "favicon.svg": "favicon.svg"}
_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}

router = APIRouter(include_in_schema=False)


def vendor_path(name: str) -> Path:
    """The installed file behind ``/assets/{name}``; ``Unavailable`` when ``make install``
    has not installed the front-end packages."""
    if name in OWN_FILES:
        return STATIC / OWN_FILES[name]
    if name not in VENDOR_FILES:
        raise NotFound(f"no asset {name!r}", asset=name)
    path = VENDOR / VENDOR_FILES[name]
    if not path.is_file():
        raise Unavailable(
            f"the front-end package file {VENDOR_FILES[name]!r} is not installed: "
            "run `make install` (it runs `npm ci` in app/web/vendor)",
            asset=name,
        )
    return path


@router.get("/assets/{name}")
async def asset(name: str) -> FileResponse:
    path = vendor_path(name)
    # The names carry no version, so a browser asks again after an hour at most.
    return FileResponse(
        path,
        media_type=_TYPES.get(path.suffix, "application/octet-stream"),
        headers={"Cache-Control": "public, max-age=3600"},
    )


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title="Causeway - Swagger UI",
        oauth2_redirect_url=SWAGGER_REDIRECT_URL,
        swagger_js_url="/assets/swagger-ui-bundle.js",
        swagger_css_url="/assets/swagger-ui.css",
        swagger_favicon_url=FAVICON_URL,  # FastAPI's default is on its own web site
    )


@router.get(SWAGGER_REDIRECT_URL)
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


# ReDoc's page shows a logo from its maker's CDN in its footer: the browser is told to load
# images from this server only, so it never asks for it.
_REDOC_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self' 'unsafe-inline'; worker-src 'self' blob:; font-src 'self' data:"
)


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    page = get_redoc_html(
        openapi_url=OPENAPI_URL,
        title="Causeway - ReDoc",
        redoc_js_url="/assets/redoc.standalone.js",
        redoc_favicon_url=FAVICON_URL,
        with_google_fonts=False,  # a font service: the page uses the browser's fonts
    )
    page.headers["Content-Security-Policy"] = _REDOC_POLICY
    return page


def graphiql_html() -> str:
    """GraphiQL (3.8, the last with browser builds) on local files. The key goes in the
    headers editor, filled in from the explorer's key when this tab has one."""
    return _GRAPHIQL


_GRAPHIQL = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Causeway - GraphiQL</title>
<link rel="icon" href="/assets/favicon.svg">
<link rel="stylesheet" href="/assets/graphiql.min.css">
<link rel="stylesheet" href="/assets/plugin-explorer.css">
<style>body { margin: 0; height: 100vh; } #graphiql { height: 100vh; }</style>
</head>
<body>
<div id="graphiql">Loading GraphiQL...</div>
<script src="/assets/react.production.min.js"></script>
<script src="/assets/react-dom.production.min.js"></script>
<script src="/assets/graphiql.min.js"></script>
<script src="/assets/plugin-explorer.umd.js"></script>
<script src="/assets/graphiql-start.js"></script>
</body>
</html>
"""

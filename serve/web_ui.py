"""The web UI's page at ``/ui``: static files of the ``serve/ui`` folder, served by the app itself.

The files are listed once, when the app is built: a request names one of them by its plain file name, and
nothing the client sends ever becomes part of a filesystem path, so a path like ``/ui/../api.py`` (or any
encoding of it) is simply not one of the names and gets a 404. The page and its assets need no key (a browser
loads them before the user has typed one); every data route the page calls stays behind the key.

Every response carries a Content-Security-Policy that lets the page load and connect only to this server: the
page works offline, and a browser refuses anything from elsewhere even if some text of the index tried.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from fastapi import FastAPI

UI_PATH = "/ui"
UI_ROUTES = (UI_PATH, UI_PATH + "/", UI_PATH + "/{name}")
# What the guard lets through without a key: the page and plain file names beside it, nothing else.
OPEN_UI_PATH = re.compile(r"/ui(/([A-Za-z0-9_-]+\.[a-z0-9]+)?)?")

_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str


def load_assets() -> dict[str, Asset]:
    """Every file of the UI folder that the page may load, by file name (read once: they are package data)."""
    folder = resources.files("serve").joinpath("ui")
    assets: dict[str, Asset] = {}
    for item in folder.iterdir():
        name = item.name
        suffix = name[name.rfind(".") :] if "." in name else ""
        if item.is_file() and suffix in _MEDIA_TYPES and OPEN_UI_PATH.fullmatch(f"{UI_PATH}/{name}"):
            assets[name] = Asset(item.read_bytes(), _MEDIA_TYPES[suffix])
    if "index.html" not in assets:
        raise FileNotFoundError("serve/ui/index.html is missing: the package was installed without its UI files")
    return assets


def add_ui_routes(api: FastAPI, api_error: Callable[..., Exception]) -> None:
    """``GET /ui`` (a redirect to ``/ui/``, so the page's relative links resolve under it), ``/ui/`` (the page)
    and ``/ui/{name}`` (its assets); none in the OpenAPI document, which describes the API."""
    from fastapi import Response
    from fastapi.responses import RedirectResponse

    assets = load_assets()

    def respond(name: str) -> Response:
        asset = assets.get(name)
        if asset is None:
            raise api_error(404, f"no file {name[:80]!r} in the web UI")
        return Response(asset.body, media_type=asset.media_type, headers=HEADERS)

    root, page, asset = UI_ROUTES

    @api.get(root, include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        # Relative: resolves under whatever prefix the app is served at.
        return RedirectResponse("ui/", status_code=308)

    @api.get(page, include_in_schema=False)
    async def ui_page() -> Response:
        return respond("index.html")

    @api.get(asset, include_in_schema=False)
    async def ui_asset(name: str) -> Response:
        return respond(name)

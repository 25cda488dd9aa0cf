"""Serve the read-only observer web UI at ``/ui/`` and its JSON endpoints at ``/ui/api/``.

The page, script and stylesheet are static files packaged in ``turngate/ui/static`` (plain HTML,
CSS and one vanilla JavaScript module: no build step, no CDN, works offline). They hold no data
and are served without credentials, so the sign-in form can load; every piece of data comes from
the API with the user's ``Authorization: Bearer`` key. The JSON endpoints are API routes
like any other (authenticated, ``snapshot.read``, tenant-scoped).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from turngate.api import ui_api

STATIC_DIR = Path(str(files("turngate.ui").joinpath("static")))

#: Sent with every UI file: no inline script or style, no framing, no third-party origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


class UiStaticFiles(StaticFiles):
    """Static files with the UI's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """Add ``/ui/`` (static files, public) and ``/ui/api/*`` (JSON) to ``app``.

    The JSON routes are ordinary API routes: the app-wide auth dependency guards them (the route
    table gives ``/ui/...`` the ``snapshot.read`` role) and binds ``request.state.tenant_id``.
    """
    app.include_router(ui_api.router)

    async def ui_root(_: Request) -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    # A plain Starlette route, like the mount: public, outside the API's auth dependency and schema.
    app.router.add_route("/ui", ui_root, methods=["GET", "HEAD"], include_in_schema=False)

    app.mount("/ui", UiStaticFiles(directory=STATIC_DIR, html=True, check_dir=False), name="ui")

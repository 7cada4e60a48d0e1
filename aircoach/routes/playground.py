"""The playground page (`GET /`, `/playground`): static HTML, CSS, one JavaScript module and
the two vendored libraries it imports (`vendor/`: marked, DOMPurify) from
`aircoach/playground/static/`, served with headers that allow nothing but this origin.
Mounted only when `PLAYGROUND` is on."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from pydantic import BaseModel

from aircoach.deps import SettingsDep
from aircoach.errors import NotFound

STATIC = Path(__file__).resolve().parent.parent / "playground" / "static"

# No inline script or style, nothing from another origin, never framed. `img-src data:`
# only for the browser's own form controls.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    # Revalidated on every load (ETag): a new deploy is seen at once.
    "Cache-Control": "no-cache",
}
router = APIRouter(include_in_schema=False)


class PlaygroundConfig(BaseModel):
    dev_sign_in: bool
    admin_permission: str


def _file(name: str, media_type: str) -> FileResponse:
    return FileResponse(STATIC / name, media_type=media_type, headers=SECURITY_HEADERS)


@router.get("/")
@router.get("/playground")
async def page() -> FileResponse:
    """The playground: chat, tool switches, quiz cards, history, progress and docs."""
    return _file("index.html", "text/html; charset=utf-8")


@router.get("/playground/app.js")
async def script() -> FileResponse:
    return _file("app.js", "text/javascript; charset=utf-8")


@router.get("/playground/app.css")
async def stylesheet() -> FileResponse:
    return _file("app.css", "text/css; charset=utf-8")


# The vendored files by name: nothing else under `vendor/` is served (no directory walk).
VENDOR = ("marked.esm.js", "purify.es.mjs")


@router.get("/playground/vendor/{name}")
async def vendored(name: str) -> FileResponse:
    """A vendored library the page's module imports (see docs/playground.md for versions)."""
    if name not in VENDOR:
        raise NotFound()
    return _file(f"vendor/{name}", "text/javascript; charset=utf-8")


@router.get("/playground/config")
async def config(settings: SettingsDep) -> PlaygroundConfig:
    """What the page needs to know before sign-in: whether the dev sign-in exists."""
    return PlaygroundConfig(
        dev_sign_in=settings.uses_dev_issuer, admin_permission=settings.admin_permission
    )

"""The application factory: the services (built from settings, or given), logging, CORS,
routers and error handlers. Everything else lives in the modules it wires."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

from aircoach.errors import AppError
from aircoach.routes import chat, docs, health, history, quiz, tools
from aircoach.services import Services
from aircoach.settings import Settings, get_settings

log = logging.getLogger("aircoach")


async def _app_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    if exc.status >= 500:
        log.warning(
            "%s %s -> %d %s: %s",
            request.method,
            request.url.path,
            exc.status,
            exc.code,
            exc.__cause__ or exc,
        )
    return JSONResponse(
        {"error": exc.code, "message": exc.message}, status_code=exc.status, headers=exc.headers
    )


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app from `services` (or from `settings`, or from the environment). No client
    is created here: backends connect on first use."""
    if services is None:
        services = Services.build(settings or get_settings())
    settings = services.settings
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = FastAPI(title="AIR Coach API", version="0.1.0")
    app.state.services = services
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.cors_origins,
        allow_methods=["*"],
        allow_headers=["*"],
    )
    app.add_exception_handler(AppError, _app_error)
    for module in (chat, health, tools, history, docs, quiz):
        app.include_router(module.router)
    return app

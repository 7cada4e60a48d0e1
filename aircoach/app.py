"""The application factory: the services (built from settings, or given), logging, request
ids, CORS, routers and error handlers. Everything else lives in the modules it wires."""

from __future__ import annotations

import logging

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from aircoach.bodies import BodyLimit
from aircoach.errors import AppError
from aircoach.http_errors import UnhandledErrors, http_error, validation_error
from aircoach.logs import REQUEST_ID_HEADER, RequestIdMiddleware, configure_logging
from aircoach.messages import header_language
from aircoach.routes import (
    ai_chat,
    chat,
    conversations,
    dev_signin,
    docs,
    exams,
    feedback,
    health,
    history,
    manual,
    memory,
    playground,
    quiz,
    tasks,
    tools,
    turns,
)
from aircoach.routes.health import StoreRefusals
from aircoach.routes.openapi_events import install_event_components
from aircoach.routes.responses import (
    REPLAYED_HEADER,
    install_unsupported_media_type,
    install_validation_error_body,
)
from aircoach.services import Services
from aircoach.settings import Settings, get_settings
from aircoach.telemetry import instrument
from aircoach.text import logged_path

log = logging.getLogger("aircoach")


async def _app_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    if exc.status >= 500:
        log.warning(
            "%s %r -> %d %s: %s",
            request.method,
            logged_path(request.url.path),
            exc.status,
            exc.code,
            exc.__cause__ or exc,
        )
    elif exc.status != 429:  # a quota's refusal is logged where it is counted
        # Why, for the operator (a burst of `wrong_audience` after an Auth0 change); on Lambda
        # and Vercel there is no access log besides. The message is the user-safe one.
        path = logged_path(request.url.path)
        log.info("%s %r -> %d %s: %s", request.method, path, exc.status, exc.code, exc)
    if exc.code == "store_unavailable":  # /api/health says so while the read probe passes
        request.app.state.store_refusals.note(type(exc.__cause__ or exc).__name__)
    message = exc.message_in(header_language(request.headers))
    return JSONResponse(
        {"error": exc.code, "message": message, **exc.fields},
        status_code=exc.status,
        headers=exc.headers,
    )


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app from `services` (or from `settings`, or from the environment). No client
    is created here: backends connect on first use."""
    if services is None:
        services = Services.build(settings or get_settings())
    settings = services.settings
    configure_logging(settings)
    public_docs = settings.api_docs
    app = FastAPI(
        title="AIR Coach API",
        version="0.1.0",
        docs_url="/docs" if public_docs else None,
        redoc_url="/redoc" if public_docs else None,
        openapi_url="/openapi.json" if public_docs else None,
        # No 307 to the path without its trailing slash: `/api/memory/%2F` (an id decoded to
        # `/`) was sent on to `DELETE /api/memory`, which removes everything, and an unknown
        # id such as `/api/manual/sections/%2F` answered a redirect instead of a 404.
        redirect_slashes=False,
    )
    # 3.2: the streams describe their events with `itemSchema`, a 3.2 keyword.
    app.openapi_version = "3.2.0"
    app.state.services = services
    app.state.store_refusals = StoreRefusals()
    # Inside CORS (added first): a browser client can read the 413 too.
    app.add_middleware(BodyLimit, default=settings.max_body_bytes, settings=settings)
    app.add_middleware(UnhandledErrors)  # a JSON 500 that CORS and the request id still wrap
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.cors_origins,
        allow_methods=["*"],
        allow_headers=["*"],
        # A browser client reads these: the turn id of a stream it may lose, and when to retry.
        expose_headers=[
            REQUEST_ID_HEADER,
            "X-Turn-ID",
            REPLAYED_HEADER,
            "Retry-After",
            "Warning",
            "x-vercel-ai-ui-message-stream",
        ],
    )
    app.add_middleware(RequestIdMiddleware)  # outermost: every response and line gets the id
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    for module in (
        chat,
        ai_chat,
        conversations,
        health,
        tools,
        history,
        turns,
        docs,
        tasks,
        quiz,
        exams,
        feedback,
        manual,
    ):
        _add_routes(app, module.router)
    _add_routes(app, memory.router)
    if settings.playground:
        _add_routes(app, playground.router)
        if settings.uses_dev_issuer:
            _add_routes(app, dev_signin.router)
    install_event_components(app)  # the stream's events in components/schemas
    install_validation_error_body(app)  # every 422 as the API sends it
    install_unsupported_media_type(app)  # the 415 of every route that takes JSON
    instrument(
        app, settings
    )  # OpenTelemetry, only when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL=console
    return app


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """The router's routes, added to the app as they are. Each router is a module's, its
    routes built once per process with their prefix, tags and route class. FastAPI's
    `include_router` would wrap them again for each app and, on an app's first request,
    rebuild every route's parameters and response model (about 30 ms of CPU: a third of the
    unit suite, which builds an app per test), then check the routers' versions on every
    request."""
    app.router.routes.extend(router.routes)

"""AWS Lambda entry for the optional API Gateway function (serverless.yml `api`), through Mangum.

Mangum buffers the response: the SSE events reach the client at once when the turn ends, and
API Gateway cuts every request at 30 s. So on Lambda this handler refuses to start with a turn
cap that does not fit in the gateway's 30 s with the time to store the turn (STORE_TIMEOUT_S):
a longer turn would become a gateway error, and the client would never learn its id. The
streamed function (`stream`: run.sh, the Lambda Web Adapter) has no such cap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aircoach.errors import ConfigError
from aircoach.settings import Settings, get_settings
from aircoach.startup import starting

if TYPE_CHECKING:
    from mangum import Mangum

# API Gateway's integration timeout (HTTP API: 30 s, not adjustable).
GATEWAY_TIMEOUT_S = 30.0


def check_gateway_timeout(settings: Settings, environ: Mapping[str, str] = os.environ) -> None:
    """Raise ConfigError on Lambda when TURN_TIMEOUT_S plus STORE_TIMEOUT_S exceeds the gateway's
    30 s; elsewhere (a test, a laptop) any cap goes."""
    if not environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return
    limit = GATEWAY_TIMEOUT_S - settings.store_timeout_s
    if settings.turn_timeout_s > limit:
        raise ConfigError(
            f"TURN_TIMEOUT_S={settings.turn_timeout_s:g} is above {limit:g} s: behind API Gateway "
            f"(cut at {GATEWAY_TIMEOUT_S:g} s) a turn must end and be stored "
            f"(STORE_TIMEOUT_S={settings.store_timeout_s:g}) in time. Lower it, or use the "
            "streaming function (run.sh, a Function URL), which has no such cap"
        )


def _handler() -> Mangum:
    # The imports and the app, without the cyclic GC (aircoach/startup.py).
    with starting():
        from mangum import Mangum

        from aircoach.app import create_app

        settings = get_settings()
        check_gateway_timeout(settings)
        return Mangum(create_app(settings), lifespan="off")


handler = _handler()

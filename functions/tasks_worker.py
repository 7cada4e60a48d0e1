"""AWS Lambda entry for SQS events: task runs at scale (partial batch failure reporting)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aircoach.startup import starting


def _handler() -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    # The imports and the worker, without the cyclic GC (aircoach/startup.py).
    with starting():
        from aircoach.entry.tasks_worker import worker_from_environment

        return worker_from_environment().handle


handler = _handler()

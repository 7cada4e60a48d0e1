from __future__ import annotations

from typing import TYPE_CHECKING

from aircoach.startup import starting

if TYPE_CHECKING:
    from fastapi import FastAPI


def _app() -> FastAPI:
    # The imports and the app, without the cyclic GC (aircoach/startup.py).
    with starting():
        from aircoach.app import create_app

        return create_app()


# At the top level: Vercel's builder finds the entry by this assignment.
app = _app()

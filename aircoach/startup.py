"""A process's start-up with the cyclic garbage collector paused.

Importing FastAPI, LangChain and the app allocates about 300,000 objects that live as long as
the process. At Python's default thresholds the collector runs about 400 times meanwhile, and
each of its full passes walks everything imported so far: about 300 ms of a 3.7 s Lambda cold
start (docs/performance.md). Each entry builds its app inside `starting()`; what exists at the
end is frozen and the collector resumes for what the requests allocate. The modules that the
app leaves to its first chat (LangGraph, LangChain: the routes that never chat stay cheap)
are imported the same way, by `first_import`. `gc.freeze` only takes objects out of the
collector's scans: one whose last reference goes is still freed, and only a cycle among
start-up objects that later becomes garbage would stay (they live as long as the process
anyway).

Once started, the collector's youngest generation is collected after 2,000 net allocations
(`YOUNG_THRESHOLD`) instead of 700: the default of CPython 3.13 and later, set here for 3.11
and 3.12. A turn holds about 1,000 objects more than it has freed until its end frees them,
so at 700 nine turns in ten paid a young collection, walking the turn's objects in flight
(0.20 ms of a turn's CPU in all, 6 ms); at 2,000 one turn in eight does (0.09 ms), for 0.3
MB more RSS (docs/performance.md).
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 2000


@contextmanager
def starting() -> Iterator[None]:
    """Imports and app construction inside this block run without the cyclic collector; on the
    way out, even on an error, the survivors are frozen and the collector is on again (unless
    it was off before), its youngest generation collected no more often than every
    `YOUNG_THRESHOLD` allocations."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        young, *older = gc.get_threshold()
        if 0 < young < YOUNG_THRESHOLD:  # 0: automatic collection is off; a higher one stays
            gc.set_threshold(YOUNG_THRESHOLD, *older)
        if was_enabled:
            gc.enable()


def first_import(module: str) -> None:
    """Import `module`, unless this process has already, with the collector paused as
    `starting()` does: for what a first request imports (the turn's LangGraph and LangChain,
    about 0.8 s). Whatever the process holds at that moment is frozen with it, the objects of
    the requests in flight included; they are still freed when their last reference goes."""
    if module in sys.modules:
        return
    with starting():
        importlib.import_module(module)

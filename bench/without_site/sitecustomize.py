"""Takes parts out of an AIR Coach server another harness starts (`bench/without.py`): put
this folder on `PYTHONPATH` and set `WITHOUT`. A process whose working directory is not an
AIR Coach checkout (the peer's server, the load generator) is left as it is."""

import os
import sys

if os.environ.get("WITHOUT") and os.path.isfile(os.path.join("bench", "without.py")):
    sys.path.insert(0, os.getcwd())
    from bench.without import apply

    apply(os.environ["WITHOUT"])

"""A proxy's `serve` with its garbage collections timed, for `python -m benchmarks.versus --collector`.

    python benchmarks/collector_probe.py <package> <output.json> serve [serve's options]

Run as a file, so that the package is the checkout's own (the one on PYTHONPATH).

When the proxy exits, the output file gets each collection's start (`time.monotonic()`, a clock every
process on the machine shares) and length in seconds, so the caller can count those made during its rounds.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    del sys.path[0]  # this file's directory: the benchmarks' modules are not the proxy's to import
    package, output, *serve = sys.argv[1:]
    collections: list[tuple[float, float]] = []
    started = 0.0

    def timed(phase: str, info: dict[str, Any]) -> None:
        nonlocal started
        if phase == "start":
            started = time.monotonic()
        else:
            collections.append((started, time.monotonic() - started))

    gc.callbacks.append(timed)
    atexit.register(lambda: Path(output).write_text(json.dumps(collections)))
    # uvicorn, once shut down, raises the signal it caught again: this handler makes that an exit that runs atexit.
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(0))
    sys.argv = [package, *serve]
    importlib.import_module(f"{package}.cli").main()


if __name__ == "__main__":
    main()

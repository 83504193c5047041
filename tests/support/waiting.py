"""Waiting, in tests, for what a server does in the background: a deadline, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout: float = 10) -> None:
    """Return once `condition()` holds; fail the test if it still does not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)

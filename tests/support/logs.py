"""Reading the proxy's log lines in tests: a request's line is written once its response is done."""

from __future__ import annotations

import time

import pytest


def log_lines(caplog: pytest.LogCaptureFixture, fragment: str, *, count: int = 1, timeout: float = 5.0) -> list[str]:
    """The log lines containing `fragment`, once there are `count` of them (or the timeout passes)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [record.getMessage() for record in caplog.records if fragment in record.getMessage()]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)

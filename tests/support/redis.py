"""A real `redis-server` on a loopback port, for the tests of the Redis store.

`.ci/run` installs Debian's redis-server when it is missing and sets INFLIGHT_REDIS_REQUIRED=1,
so there the tests cannot quietly skip; on a developer's machine without it they are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.processes import wait_for_port
from tests.support.servers import free_port


def redis_executable() -> str:
    found = shutil.which("redis-server")
    if found is None:
        if os.environ.get("INFLIGHT_REDIS_REQUIRED") == "1":
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed")
    return found


@contextmanager
def redis_server(port: int | None = None) -> Iterator[str]:
    """redis-server on `port` (a free one by default), nothing saved to disk; yields its redis:// URL."""
    port = port or free_port()
    with tempfile.TemporaryDirectory() as workdir:
        command = [redis_executable(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)

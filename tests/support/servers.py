"""Real uvicorn servers on loopback ports, started in threads and polled until they listen."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def read_body(receive: Any) -> bytes:
    """An ASGI request body, whole."""
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return bytes(body)


@contextmanager
def serve(app: Any, *, port: int | None = None, **options: Any) -> Iterator[str]:
    """Run `app` under uvicorn on 127.0.0.1 and yield its base URL (no trailing slash)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port or 0))
    bound = sock.getsockname()[1]
    defaults: dict[str, Any] = {
        "log_level": "warning",
        "access_log": False,
        "server_header": False,
        "date_header": False,
        "lifespan": "on",
    }
    config = uvicorn.Config(app, **{**defaults, **options, "timeout_graceful_shutdown": 1})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

"""`BoundedHttpProtocol` subclasses uvicorn's httptools protocol, which is not part of uvicorn's API: these
name what a uvicorn outside the pinned versions no longer has, before any behaviour breaks."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from inflight.http.server import BoundedHttpProtocol

# The methods `BoundedHttpProtocol` overrides, each calling uvicorn's own.
OVERRIDDEN = (
    "connection_made",
    "data_received",
    "on_header",
    "on_headers_complete",
    "on_body",
    "on_message_complete",
    "on_response_complete",
    "connection_lost",
    "pause_writing",
    "resume_writing",
    "handle_websocket_upgrade",
)
# What it reads or sets of the protocol's state, and of a request's cycle.
PROTOCOL_STATE = ("loop", "transport", "client", "url", "cycle", "timeout_keep_alive", "timeout_keep_alive_task")
TIMEOUT_HANDLER = "timeout_keep_alive_handler"
CYCLE_STATE = ("transport", "response_complete", "scope")


def lacking(missing: list[str]) -> str:
    return (
        f"uvicorn {version('uvicorn')} lacks {missing}, which BoundedHttpProtocol (inflight/http/server.py) "
        "relies on: keep uvicorn within the versions pyproject.toml pins, or update the subclass"
    )


def test_uvicorn_has_every_method_the_bounded_protocol_overrides() -> None:
    missing = [name for name in (*OVERRIDDEN, TIMEOUT_HANDLER) if not callable(getattr(HttpToolsProtocol, name, None))]
    assert not missing, lacking(missing)


async def test_uvicorn_keeps_the_state_the_bounded_protocol_uses() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = Config(app=app, lifespan="off")
    state = ServerState()
    protocols: list[BoundedHttpProtocol] = []

    def connection() -> BoundedHttpProtocol:
        protocols.append(BoundedHttpProtocol(config=config, server_state=state, app_state={}))
        return protocols[-1]

    server = await asyncio.get_running_loop().create_server(connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        (protocol,) = protocols
        missing = [name for name in PROTOCOL_STATE if not hasattr(protocol, name)]
        missing += [f"cycle.{name}" for name in CYCLE_STATE if not hasattr(protocol.cycle, name)]
        assert not missing, lacking(missing)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()

"""A raw TCP upstream on a loopback port, for what a well-behaved server never does.

Each connection is handed to an async `handler(reader, writer, connection_number)`; the server runs
its own event loop in a thread, so tests stay synchronous.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and its Content-Length body (enough for what the proxy sends these servers)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


EMPTY_MODEL_LIST = b'{"object": "list", "data": []}'


async def read_post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """The next POST on this connection; a GET before it (the proxy's model discovery, which may share the
    connection) is answered with an empty model list, so a handler that misbehaves on the POST only
    does not break discovery, nor the POST that reuses its connection."""
    while True:
        request = await read_request(reader)
        if not request.startswith(b"GET "):
            return request
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
            % (len(EMPTY_MODEL_LIST), EMPTY_MODEL_LIST)
        )
        await writer.drain()


@contextmanager
def raw_upstream(handler: Handler) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1; yields the /v1 base URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    connections = 0
    holder: dict[str, asyncio.Server] = {}

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            await handler(reader, writer, connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def start() -> None:
        holder["server"] = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    started.wait(5)
    port = holder["server"].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:

        async def stop() -> None:
            holder["server"].close()
            # Handlers still running (one sleeping before it misbehaves) end here, not in a closed loop.
            handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await holder["server"].wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


HEADER_OPENING = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-big: "
TRAILER_OPENING = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nx-t: "
)


@dataclass
class EndlessField:
    """An answer that opens a header (or trailer) field and never ends it: `opening`, then a megabyte at a
    time up to `limit`, unless the reader hangs up first. `sent` is how much of the field went out."""

    opening: bytes
    limit: int
    sent: int = 0

    async def send(self, writer: asyncio.StreamWriter) -> None:
        writer.write(self.opening)
        piece = b"a" * (1 << 20)
        while self.sent < self.limit:  # until the proxy drops the connection
            writer.write(piece)
            await writer.drain()
            self.sent += len(piece)

"""A client that leaves while the upstream is still thinking: stop waiting for it at once.

While the upstream is waited on or relayed, the handler's task is cancelled the moment the client
leaves, so the upstream request is closed and its pool slot given back (a slow upstream and
clients that give up would otherwise hold every connection until the upstream answers). Our own
connection (`inflight.http.server`) says so through the request's `Disconnect`; under another ASGI
server, which reports a disconnect only to whoever awaits `receive()`, a task waits on it.

A client that stays but reads nothing is cut by the connection (`inflight.http.server`, after
`limits.client_send_timeout_s`), which marks the request's scope so that its log line says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from starlette.types import Receive, Scope

from inflight.http.exchange import Exchange

# The scope's key the connection sets (to the timeout, in seconds) when it cut a client that read nothing.
SEND_TIMED_OUT = "inflight.client_send_timeout_s"
# The scope's key of the request's `Disconnect`, which our connection sets.
DISCONNECT = "inflight.disconnect"


class ClientGone(Exception):
    """The client disconnected while it was being answered: there is no one to answer any more."""


@dataclass
class _Watch:
    gone: bool = False


class Disconnect:
    """A request's client leaving, as its connection sees it: whoever listens then is called at once."""

    __slots__ = ("_callbacks", "happened")

    def __init__(self) -> None:
        self.happened = False
        self._callbacks: list[Callable[[], object]] = []

    def listen(self, callback: Callable[[], object]) -> None:
        self._callbacks.append(callback)

    def forget(self, callback: Callable[[], object]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def happen(self) -> None:
        """The connection is gone before the response was complete (called by the connection)."""
        self.happened = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


@contextmanager
def on_disconnect(scope: Scope, receive: Receive, callback: Callable[[], object]) -> Iterator[None]:
    """Run the block; if the client disconnects meanwhile (or did already), call `callback`, once.

    Only for after the request body has been read: under another server, the watcher consumes `receive()`.
    """
    disconnect: Disconnect | None = scope.get(DISCONNECT)
    if disconnect is None:
        watcher = asyncio.ensure_future(_call_on_disconnect(receive, callback))
        try:
            yield
        finally:
            watcher.cancel()
        return
    # Gone already: called once the block waits, as a watcher would be (not before it starts).
    told = asyncio.get_running_loop().call_soon(callback) if disconnect.happened else None
    disconnect.listen(callback)
    try:
        yield
    finally:
        disconnect.forget(callback)
        if told is not None:
            told.cancel()


async def _call_on_disconnect(receive: Receive, callback: Callable[[], object]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    callback()


@asynccontextmanager
async def cancelled_on_disconnect(scope: Scope, receive: Receive) -> AsyncIterator[None]:
    """Run the block; if the client disconnects meanwhile, cancel it and raise `ClientGone`."""
    task = asyncio.current_task()
    assert task is not None
    watch = _Watch()

    def cancel() -> None:
        watch.gone = True
        task.cancel()

    with on_disconnect(scope, receive, cancel):
        try:
            yield
        except asyncio.CancelledError:
            if not watch.gone:
                raise
            task.uncancel()
            raise ClientGone() from None


def note_send_timeout(scope: Scope, exchange: Exchange) -> None:
    """On the request's log line: the client was cut for reading nothing (`client_send_timeout_s=60`)."""
    timeout = scope.get(SEND_TIMED_OUT)
    if timeout is not None:
        exchange.send_timed_out = True
        exchange.note("client_send_timeout_s", f"{timeout:g}")

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from starlette.types import Receive, Scope

from inflight.http.exchange import Exchange

# The scope's key the connection sets (to the timeout, in seconds) when it cut a client that read nothing.
SEND_TIMED_OUT = "inflight.client_send_timeout_s"
# The scope's key of the request's `Disconnect`, which our connection sets.
DISCONNECT = "inflight.disconnect"


class ClientGone(Exception):
    """The client disconnected while it was being answered: there is no one to answer any more."""


class Disconnect:
    """A request's client leaving, as its connection sees it: whoever listens then is called at once. The connection
    also says when the request's body is all in, so reading it needs no clock."""

    __slots__ = ("_callbacks", "body_in", "happened", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop  # the connection's: asking for the running loop costs a system call
        self.happened = False
        self.body_in = False  # the connection has read the request's last byte
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


class DisconnectWatch:
    """Calls `callback` once if the client disconnects between `start()` and `stop()` (or did already).

    Only for after the request body has been read: under another server, the watcher consumes `receive()`."""

    __slots__ = ("_callback", "_disconnect", "_receive", "_told", "_watcher")

    def __init__(self, scope: Scope, receive: Receive, callback: Callable[[], object]) -> None:
        self._disconnect: Disconnect | None = scope.get(DISCONNECT)
        self._receive = receive
        self._callback = callback
        self._watcher: asyncio.Future[None] | None = None
        self._told: asyncio.Handle | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The connection's loop when our connection tells of the disconnect; else None (the running one)."""
        return self._disconnect.loop if self._disconnect is not None else None

    def start(self) -> None:
        disconnect = self._disconnect
        if disconnect is None:
            self._watcher = asyncio.ensure_future(_call_on_disconnect(self._receive, self._callback))
            return
        if disconnect.happened:  # gone already: called once the block waits, as a watcher would be
            self._told = disconnect.loop.call_soon(self._callback)
        disconnect.listen(self._callback)

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        if self._disconnect is not None:
            self._disconnect.forget(self._callback)
        if self._told is not None:
            self._told.cancel()


@contextmanager
def on_disconnect(scope: Scope, receive: Receive, callback: Callable[[], object]) -> Iterator[None]:
    """Run the block; if the client disconnects meanwhile (or did already), call `callback`, once."""
    watch = DisconnectWatch(scope, receive, callback)
    watch.start()
    try:
        yield
    finally:
        watch.stop()


async def _call_on_disconnect(receive: Receive, callback: Callable[[], object]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    callback()


class CancelledOnDisconnect:
    """`async with`: run the block; if the client disconnects meanwhile, cancel it and raise `ClientGone`.

    A class rather than an `asynccontextmanager`, whose generator costs a few microseconds more: every request
    enters one, and a streamed answer a second."""

    __slots__ = ("_gone", "_receive", "_scope", "_task", "_watch")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self._scope, self._receive = scope, receive
        # Made on entry and dropped on exit: it holds this object's method, and this object the request's task,
        # so a watch kept after the block would leave the whole request to the garbage collector.
        self._watch: DisconnectWatch | None = None
        self._task: asyncio.Task[Any] | None = None
        self._gone = False

    def _cancel(self) -> None:
        self._gone = True
        if self._task is not None:
            self._task.cancel()

    async def __aenter__(self) -> None:
        watch = self._watch = DisconnectWatch(self._scope, self._receive, self._cancel)
        self._task = asyncio.current_task(watch.loop)
        assert self._task is not None, "entered from a task of the connection's loop"
        watch.start()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        task, self._task = self._task, None
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        if kind is not None and issubclass(kind, asyncio.CancelledError) and self._gone and task is not None:
            task.uncancel()
            raise ClientGone() from None


def note_send_timeout(scope: Scope, exchange: Exchange) -> None:
    """On the request's log line: the client was cut for reading nothing (`client_send_timeout_s=60`)."""
    timeout = scope.get(SEND_TIMED_OUT)
    if timeout is not None:
        exchange.send_timed_out = True
        exchange.note("client_send_timeout_s", f"{timeout:g}")

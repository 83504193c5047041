"""A client that leaves while the upstream is still thinking: stop waiting for it at once.

Nothing else tells the handler: the ASGI server only reports the disconnect to whoever awaits
`receive()`. While the upstream is waited on or relayed, a watcher awaits it and cancels the
handler's task, so the upstream request is closed and its pool slot given back (a slow upstream
and clients that give up would otherwise hold every connection until the upstream answers).

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


class ClientGone(Exception):
    """The client disconnected while it was being answered: there is no one to answer any more."""


@dataclass
class _Watch:
    gone: bool = False


@contextmanager
def on_disconnect(receive: Receive, callback: Callable[[], object]) -> Iterator[None]:
    """Run the block; if the client disconnects meanwhile, call `callback` (once, at once).

    Only for after the request body has been read: the watcher consumes `receive()` messages.
    """
    watcher = asyncio.ensure_future(_call_on_disconnect(receive, callback))
    try:
        yield
    finally:
        watcher.cancel()


async def _call_on_disconnect(receive: Receive, callback: Callable[[], object]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    callback()


@asynccontextmanager
async def cancelled_on_disconnect(receive: Receive) -> AsyncIterator[None]:
    """Run the block; if the client disconnects meanwhile, cancel it and raise `ClientGone`."""
    task = asyncio.current_task()
    assert task is not None
    watch = _Watch()

    def cancel() -> None:
        watch.gone = True
        task.cancel()

    with on_disconnect(receive, cancel):
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

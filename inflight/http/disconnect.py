"""A client that leaves while the upstream is still thinking: stop waiting for it at once.

Nothing else tells the handler: the ASGI server only reports the disconnect to whoever awaits
`receive()`. Until the response starts, a watcher awaits it and cancels the handler's task, so
the upstream request is closed and its pool slot given back (a slow upstream and clients that
give up would otherwise hold every connection until the upstream answers).

A client that stays but reads nothing is cut by the connection (`inflight.http.server`, after
`limits.client_send_timeout_s`), which marks the request's scope so that its log line says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.types import Receive, Scope

from inflight.http.exchange import Exchange

# The scope's key the connection sets (to the timeout, in seconds) when it cut a client that read nothing.
SEND_TIMED_OUT = "inflight.client_send_timeout_s"


class ClientGone(Exception):
    """The client disconnected before its response began: there is no one to answer."""


@dataclass
class _Watch:
    gone: bool = False


async def disconnected(receive: Receive) -> None:
    """Return once the client has disconnected (the body is read: nothing else comes from `receive`)."""
    while (await receive())["type"] != "http.disconnect":
        pass


@asynccontextmanager
async def cancelled_on_disconnect(receive: Receive) -> AsyncIterator[None]:
    """Run the block; if the client disconnects meanwhile, cancel it and raise `ClientGone`.

    Only for after the request body has been read: the watcher consumes `receive()` messages.
    """
    task = asyncio.current_task()
    assert task is not None
    watch = _Watch()

    async def cancel_on_disconnect() -> None:
        await disconnected(receive)
        watch.gone = True
        task.cancel()

    watcher = asyncio.ensure_future(cancel_on_disconnect())
    try:
        yield
    except asyncio.CancelledError:
        if not watch.gone:
            raise
        task.uncancel()
        raise ClientGone() from None
    finally:
        watcher.cancel()


def note_send_timeout(scope: Scope, exchange: Exchange) -> None:
    """On the request's log line: the client was cut for reading nothing (`client_send_timeout_s=60`)."""
    timeout = scope.get(SEND_TIMED_OUT)
    if timeout is not None:
        exchange.send_timed_out = True
        exchange.note("client_send_timeout_s", f"{timeout:g}")

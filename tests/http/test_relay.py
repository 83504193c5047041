"""The relay, driven in process: chunks in, ASGI messages out.

A body that is all in, to a client with room, is sent in slices with the loop let run between them; however the
relay ends, the iterator it reads is closed before it returns, so one that reads more upstream closes that too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

from inflight.http.disconnect import DISCONNECT, Disconnect
from inflight.http.exchange import Exchange
from inflight.http.relay import SLICE_BYTES, Relay

CHUNK = b"x" * 65536


async def nothing() -> None:
    return None


async def never_received() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def relay_of(chunks: AsyncIterator[bytes]) -> Relay:
    return Relay(200, [], chunks, close=nothing, exchange=Exchange("POST", "/v1/chat/completions"))


async def test_a_body_all_in_goes_in_slices_with_the_loop_let_run_between_them() -> None:
    async def all_in() -> AsyncIterator[bytes]:
        for _ in range(64):  # 4 MiB, none of it waited for
            yield CHUNK

    sent = 0
    seen: list[int] = []  # the bytes sent each time the loop ran something else

    async def send(message: MutableMapping[str, Any]) -> None:  # a client with room: never waits
        nonlocal sent
        sent += len(message.get("body", b""))

    loop = asyncio.get_running_loop()

    def other() -> None:
        seen.append(sent)
        if sent < 64 * len(CHUNK):
            loop.call_soon(other)

    loop.call_soon(other)
    await relay_of(all_in())({"type": "http"}, never_received, send)
    assert sent == 64 * len(CHUNK)
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert len(seen) > 8 and max(steps) <= SLICE_BYTES + len(CHUNK), steps


async def test_a_client_gone_while_it_is_sent_to_closes_what_the_relay_reads_before_it_returns() -> None:
    closed: list[str] = []

    async def continuation() -> AsyncIterator[bytes]:  # stands for a read-back's continuation, still upstream
        try:
            while True:
                yield CHUNK
        finally:
            closed.append("continuation")

    disconnect = Disconnect(asyncio.get_running_loop())
    sends = 0

    async def send(message: MutableMapping[str, Any]) -> None:  # the client stops taking bytes at the third, and is cut
        nonlocal sends
        sends += 1
        if sends == 3:
            disconnect.happen()
            await asyncio.Event().wait()

    relay = relay_of(continuation())
    await relay({"type": "http", DISCONNECT: disconnect}, never_received, send)
    assert closed == ["continuation"]  # not left to the garbage collector: the relay holds it still
    assert relay.exchange.fields.get("client_disconnected") == 1 and relay.exchange.finished

"""A streaming answer begun before it is ready: SSE comment lines while the compaction is waited on.

Off unless `summarize.keepalive_after_s` is set. A streaming client that waits long for its first
byte (a summary made on the turn that needs it, with a slow model) may give up; a comment line every
few seconds (`: ...`, which SSE clients ignore) keeps it and every proxy between reading. The
price: the 200 status and the headers go out before the upstream has answered, so the
`x-inflight-*` headers of the compaction are not sent, an error (ours or the upstream's) can
only arrive as an SSE `data: {"error": ...}` event, and the upstream is asked for an unencoded
body (the headers that went out say no Content-Encoding). It begins only when the compaction
is slow (a request with compaction off never gets it); once begun, the comments go on until the
upstream's answer starts.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from starlette.types import Receive, Scope, Send

from inflight.errors import ProxyError
from inflight.formats import WireFormat
from inflight.http.disconnect import on_disconnect
from inflight.http.error_response import body_of, error_body
from inflight.http.exchange import Exchange
from inflight.http.relay import Relay

log = logging.getLogger("inflight")

COMMENT = b": inflight is compacting the conversation\n\n"
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-inflight-keepalive", b"1"),
]


@dataclass
class KeepAlive:
    work: asyncio.Future[Relay]  # the rest of the request: compaction, upstream, retry
    interval: float
    exchange: Exchange
    wire: WireFormat  # errors after the 200 go out as events in its error shape

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.exchange.status = 200
        self.exchange.note("keepalive", 1)
        try:
            with on_disconnect(scope, receive, self.work.cancel):
                await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
                while not (await asyncio.wait({self.work}, timeout=self.interval))[0]:
                    await send({"type": "http.response.body", "body": COMMENT, "more_body": True})
        except OSError:
            self.work.cancel()
        except BaseException:  # cancelled (the client left as the stream began): the rest of the request goes too
            self.work.cancel()
            raise
        await self._answer(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.work.cancelled():
            self.exchange.note("client_disconnected", 1)
            self.exchange.finish()
            return
        try:
            relay = self.work.result()
        except ProxyError as exc:
            self.exchange.note("error", exc.code or exc.error_type)
            self.exchange.unanswered = True
            await self._end(send, self.wire.spec.errors.event(body_of(exc, self.wire)))
            return
        except Exception as exc:  # a bug of ours, after the 200: still an answer in OpenAI's shape, and logged
            log.exception("internal error while a keep-alive stream waited")
            self.exchange.note("error", type(exc).__name__)
            self.exchange.unanswered = True
            await self._end(
                send,
                self.wire.spec.errors.event(
                    body_of(ProxyError(f"inflight internal error: {type(exc).__name__}"), self.wire)
                ),
            )
            return
        if relay.status != 200:  # the upstream's error, as an event: the 200 is out already
            try:
                body = b"".join([chunk async for chunk in relay.chunks])
            except Exception as exc:
                body = error_body(f"upstream error {relay.status}", error_type="upstream_error", wire=self.wire)
                self.exchange.note("upstream_stream_error", type(exc).__name__)
            finally:
                await relay.close()
            self.exchange.note("upstream_status", relay.status)
            self.exchange.unanswered = True
            await self._end(send, self.wire.spec.errors.event(body))
            return
        relay.started = True
        await relay(scope, receive, send)

    async def _end(self, send: Send, last: bytes) -> None:
        try:
            await send({"type": "http.response.body", "body": last, "more_body": False})
        except OSError:
            self.exchange.note("client_disconnected", 1)
        self.exchange.finish()

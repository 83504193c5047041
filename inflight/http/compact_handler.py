"""`POST /v1/responses/compact`: the upstream's, or inflight's when it has none.

The request is read and counted here; `inflight.pipeline.compact_turn.CompactTurn` decides what to
do and `inflight.http.driver.Driver` does it.
"""

from __future__ import annotations

from starlette.requests import Request

from inflight.config import Limits
from inflight.formats import Responses
from inflight.formats.compaction_items import ItemKey
from inflight.http.body import read_limited
from inflight.http.conversation_handler import options_of
from inflight.http.disconnect import cancelled_on_disconnect
from inflight.http.driver import Driver, post_upstream
from inflight.http.exchange import Exchange
from inflight.http.intake import read_request
from inflight.http.keepalive import KeepAlive
from inflight.http.relay import Relay, relay
from inflight.pipeline.compact_turn import CompactTurn
from inflight.pipeline.engine import Pipeline
from inflight.upstream.client import UpstreamClient


class CompactHandler:
    def __init__(
        self, wire: Responses, item_key: ItemKey, pipeline: Pipeline, upstream: UpstreamClient, *, limits: Limits
    ) -> None:
        self.wire = wire
        self.item_key = item_key
        self.pipeline = pipeline
        self.upstream = upstream
        self.limits = limits

    async def __call__(self, request: Request, exchange: Exchange) -> Relay | KeepAlive:
        encoding = request.headers.get("content-encoding", "")
        chunks = await read_limited(request, self.limits)
        options = options_of(request, self.wire, client_keys=self.upstream.client_keys)
        limit = self.limits.max_body_bytes
        intake = await read_request(chunks, encoding, self.pipeline, self.wire, limit=limit, tenant=options.tenant)
        async with cancelled_on_disconnect(request.receive):
            if intake.counted is None:  # not ours to judge: the upstream answers whatever this is
                response = await post_upstream(self.upstream, request, exchange, intake.raw, rewritten=False)
                return relay(response, exchange)
            turn = CompactTurn(self.pipeline, intake.counted, options, self.item_key)
            return await Driver(
                turn,
                pipeline=self.pipeline,
                wire=self.wire,
                request=request,
                exchange=exchange,
                upstream=self.upstream,
                limits=self.limits,
            ).drive()

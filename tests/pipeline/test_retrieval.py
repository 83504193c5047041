"""A compacted request that offers `inflight_retrieve` counts the tool's definition against its budget.

Through a real pipeline (counting, the compactor's stages, records in memory), offline."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from inflight.compaction.retrieval import TOOL_NAME
from inflight.pipeline.engine import Options
from inflight.tokens import TokenCounter
from tests.pipeline.test_big_requests import agent_body, count, exact_total, pipeline_with_window

BASH: Any = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}


def test_the_tool_added_to_a_compacted_request_is_counted_in_what_is_sent() -> None:
    body = {**agent_body(turns=30, lines=60), "tools": [BASH]}
    pipeline = pipeline_with_window(8_000)
    counted = count(pipeline, body)
    prepared = asyncio.run(pipeline.prepare(counted, pipeline.account(counted), Options()))
    sent = orjson.loads(prepared.body)
    assert prepared.retrieves and sent["tools"][-1]["function"]["name"] == TOOL_NAME
    assert prepared.outcome is not None and prepared.outcome.fits
    assert prepared.sent_tokens == exact_total(sent) <= prepared.limit  # the tool's definition included
    assert prepared.sent_fixed == TokenCounter().count_request(sent, "o200k_base").fixed  # for calibration

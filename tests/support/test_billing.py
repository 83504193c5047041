"""The fakes' bill: its arithmetic, and what the Messages fake and the app write into it."""

from __future__ import annotations

import orjson
import pytest

from inflight.config import Prices
from inflight.policy.refusals import detect_event
from tests.support.billing import Bill
from tests.support.messages import COMPACTION_REQUEST, FakeMessages
from tests.support.responses import sse_event
from tests.support.upstream import UpstreamApp

ANTHROPIC = Prices(cache_write=1.25)


def test_a_bill_prices_each_part_and_keeps_the_summaries_apart() -> None:
    bill = Bill()
    bill.add("agent", uncached=1_000, cache_read=10_000, cache_write=2_000, output=20)
    bill.add("own compaction", uncached=500, output=40)
    bill.add("summary", uncached=3_000, output=100)
    bill.refuse()
    split = bill.split(ANTHROPIC)
    assert split == pytest.approx(
        {"reads": 1_000, "writes": 2_500, "uncached": 1_500, "output": 300, "summaries": 3_500}
    )
    assert bill.cost(ANTHROPIC) == pytest.approx(8_800)
    assert bill.cost(Prices(cache_read=0.5, cache_write=2, output=1)) == pytest.approx(
        5_000 + 4_000 + 1_500 + 60 + 3_100
    )
    assert (bill.requests(), bill.requests("own compaction"), bill.requests("summary"), bill.refusals) == (3, 1, 1, 1)
    assert bill.cached_share == pytest.approx(10_000 / 16_500)
    assert Bill().cost(ANTHROPIC) == 0 and Bill().cached_share == 0


def test_the_app_keeps_one_bill_for_both_apis() -> None:
    app = UpstreamApp()
    assert app.bill is app.messages.bill is app.responses.bill


def request(text: str, *, stream: bool = False) -> dict[str, object]:
    return {"model": "m", "max_tokens": 100, "stream": stream, "messages": [{"role": "user", "content": text}]}


def test_the_messages_fake_bills_its_cache_usage_and_claude_codes_own_compaction_as_such() -> None:
    fake = FakeMessages()
    status, body, _ = fake.answer(request("Hello."))
    assert status == 200 and body is not None
    fake.answer(request(f"Please {COMPACTION_REQUEST} so far."))
    agent, own = fake.bill.lines
    usage = body["usage"]
    assert (agent.kind, agent.uncached, agent.cache_read, agent.cache_write, agent.output) == (
        "agent",
        usage["input_tokens"],
        usage["cache_read_input_tokens"],
        usage["cache_creation_input_tokens"],
        usage["output_tokens"],
    )
    assert own.kind == "own compaction"


def test_the_messages_fake_can_refuse_inside_the_stream_in_words_inflight_reads() -> None:
    fake = FakeMessages(windows={"m": 50}, refusal_in_stream=True)
    status, body, events = fake.answer(request("word " * 200, stream=True))
    assert status == 200 and body is None and events is not None
    assert events[0]["type"] == "error" and events[0]["error"]["message"].startswith("prompt is too long: ")
    refusal = detect_event(sse_event(events[0]))
    assert refusal is not None and refusal.context_window == 50
    status, body, events = fake.answer(request("word " * 200))  # not streamed: the HTTP refusal
    assert status == 400 and events is None and orjson.dumps(body).count(b"prompt is too long") == 1
    assert fake.bill.lines == [] and fake.bill.refusals == fake.refused == 2

"""The demo's scripted upstream on a real server: the recording's replies, OpenAI's refusal, and summaries
the proxy accepts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from inflight.compaction.conversation import Message
from inflight.compaction.summary_job import InPlace, SummaryJob, render_transcript, summary_message
from inflight.compaction.validation import headings, rejection
from inflight.demo.run import load_trace
from inflight.demo.upstream import ScriptedUpstream
from inflight.tokens import TokenCounter
from tests.support.servers import serve

TRACE = load_trace()
MESSAGES: list[Message] = TRACE["messages"]
WINDOW = 6000


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, httpx.Client]]:
    app = ScriptedUpstream(MESSAGES, model="gpt-4o", window=WINDOW)
    with serve(app) as url, httpx.Client(base_url=url) as client:
        yield app, client


def chat(client: httpx.Client, messages: list[Message], **extra: Any) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": messages, **extra})


def test_it_answers_each_turn_with_the_recordings_next_message_and_counts_the_prompt(
    upstream: tuple[ScriptedUpstream, httpx.Client],
) -> None:
    app, client = upstream
    answer = chat(client, MESSAGES[:4]).json()
    assert answer["choices"][0]["message"]["tool_calls"] == MESSAGES[4]["tool_calls"]
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    expected = TokenCounter().count_request({"model": "gpt-4o", "messages": MESSAGES[:4]}, "o200k_base").total
    assert answer["usage"]["prompt_tokens"] == expected
    assert app.seen.requests == 1 and app.seen.usage == [expected]


def test_a_conversation_not_recorded_gets_the_scripted_line(upstream: tuple[ScriptedUpstream, httpx.Client]) -> None:
    _, client = upstream
    answer = chat(client, [{"role": "user", "content": "hello"}]).json()
    assert "no model here" in answer["choices"][0]["message"]["content"]


def test_a_prompt_over_the_window_is_refused_as_openai_refuses_it(
    upstream: tuple[ScriptedUpstream, httpx.Client],
) -> None:
    app, client = upstream
    answer = chat(client, MESSAGES)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith(f"This model's maximum context length is {WINDOW} tokens.")
    assert app.seen.refused == 1 and app.seen.requests == 0


def test_a_stream_carries_the_same_message_and_its_usage(upstream: tuple[ScriptedUpstream, httpx.Client]) -> None:
    _, client = upstream
    answer = chat(client, MESSAGES[:2], stream=True, stream_options={"include_usage": True})
    data = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    events = [orjson.loads(item) for item in data[:-1]]
    assert events[0]["choices"][0]["delta"]["content"] == MESSAGES[2]["content"]
    assert events[-1]["usage"]["prompt_tokens"] > 0


def test_other_paths_get_a_json_404(upstream: tuple[ScriptedUpstream, httpx.Client]) -> None:
    _, client = upstream
    answer = client.post("/v1/embeddings", json={})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert client.get("/v1/models").json()["data"][0]["context_length"] == WINDOW


def summarized(client: httpx.Client, job: SummaryJob) -> str:
    answer = chat(client, job.messages(), max_tokens=job.max_tokens).json()
    assert answer["choices"][0]["finish_reason"] == "stop"
    text: str = answer["choices"][0]["message"]["content"]
    transcript = job.transcript
    assert rejection(text, finish_reason="stop", transcript=transcript, sections=headings(job.prompt)) is None
    return text


def test_a_summary_request_gets_a_note_the_proxy_accepts(upstream: tuple[ScriptedUpstream, httpx.Client]) -> None:
    app, client = upstream
    transcript = "\n\n".join(render_transcript(MESSAGES[2:12], clip_tool_output=1800))
    note = summarized(client, SummaryJob(None, transcript, 800, head=MESSAGES[1]["content"]))
    assert 'open(path="setup.py")' in note and "setup.py" in note
    assert "TimeDelta serialization precision" in note  # the task
    later = "\n\n".join(render_transcript(MESSAGES[12:20], clip_tool_output=1800))
    folded = summarized(client, SummaryJob(note, later, 800, head=MESSAGES[1]["content"]))
    assert 'open(path="setup.py")' in folded  # the earlier note's commands stay
    assert app.seen.summaries == 2 and app.seen.requests == 0


def test_an_in_place_summary_request_gets_a_note_of_the_messages_it_replaces(
    upstream: tuple[ScriptedUpstream, httpx.Client],
) -> None:
    _, client = upstream
    earlier = summary_message("## Task\nFix it.\n## Files and changes\n- named: docs/earlier.rst")
    sent = [*MESSAGES[:2], earlier, *MESSAGES[2:14]]
    in_place = InPlace("gpt-4o", sent, 4000, keep_from=MESSAGES[10]["content"][:80])
    transcript = "\n\n".join(render_transcript(MESSAGES[2:10], clip_tool_output=1800))
    note = summarized(client, SummaryJob(None, transcript, 800, in_place=in_place))
    assert "docs/earlier.rst" in note  # folded in from the earlier summary
    assert "ls -F" in note  # the first command it replaces
    assert MESSAGES[10]["tool_calls"][0]["function"]["arguments"] not in note  # the first message that stays

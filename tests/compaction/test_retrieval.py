"""Handles and what an `inflight_retrieve` call is answered with: the pure core, no I/O."""

from __future__ import annotations

import asyncio

import orjson

from inflight.compaction.retrieval import HANDLE, fitted, handle_of, originals, read_back
from inflight.compaction.stages.mask import placeholder
from inflight.config import Settings
from inflight.formats import CHAT_COMPLETIONS
from inflight.pipeline.engine import Options, build_pipeline
from tests.compaction.test_compactor import agent_conversation

TEXT = "\n".join(f"line {n}: {'ERROR disk full' if n % 10 == 0 else 'ok'}" for n in range(1, 101))


def test_a_handle_depends_only_on_the_original_and_is_short() -> None:
    digest = b"\x01" * 16
    assert handle_of(digest) == handle_of(bytes(digest)) != handle_of(b"\x02" * 16)
    assert HANDLE.fullmatch(handle_of(digest))
    masked = placeholder({"role": "tool", "tool_call_id": "c", "content": TEXT}, None, 900, handle_of(digest))
    assert masked["content"].endswith(f"; read it back: {handle_of(digest)}]")


def test_a_call_reads_the_whole_original_or_the_lines_or_matches_asked() -> None:
    assert read_back(TEXT, '{"handle": "inflight:x"}', max_chars=10_000) == TEXT
    lines = read_back(TEXT, '{"handle": "inflight:x", "lines": "3-4"}', max_chars=10_000)
    assert lines == "line 3: ok\nline 4: ok\n[inflight_retrieve: lines 3-4 of 100]"
    found = read_back(TEXT, '{"handle": "inflight:x", "grep": "ERROR"}', max_chars=10_000)
    assert found.splitlines()[0] == "10: line 10: ERROR disk full" and "10 lines match 'ERROR'" in found
    clipped = read_back(TEXT, '{"handle": "inflight:x"}', max_chars=1000)
    assert clipped.startswith(TEXT[:1000]) and "clipped to its first 1,000 of" in clipped


def test_anything_else_is_unavailable_never_an_error() -> None:
    for arguments in ("", "not json", "[]", '{"handle": 3}', '{"lines": "1-2"}'):
        assert read_back(TEXT, arguments, max_chars=100).startswith("[inflight_retrieve: unavailable: ")
    assert read_back(None, '{"handle": "inflight:0"}', max_chars=100).startswith("[inflight_retrieve: unavailable")
    bad_grep = read_back(TEXT, '{"handle": "inflight:x", "grep": "("}', max_chars=100)
    assert "is not a regular expression" in bad_grep


def test_every_handle_a_compacted_request_names_has_its_original() -> None:
    messages = agent_conversation(12, output_lines=60)
    body = {"model": "gpt-4o", "messages": messages, "tools": [{"type": "function", "function": {"name": "bash"}}]}
    settings = Settings.model_validate(
        {"models": {"gpt-4o": {"context_window": 8000}}, "discover_context_window": False}
    )
    pipeline = build_pipeline(settings, summarizers=None)

    async def prepare() -> tuple[bytes, dict[str, str]]:
        counted = pipeline.count(orjson.dumps(body), body, CHAT_COMPLETIONS)
        assert counted is not None
        prepared = await pipeline.prepare(counted, pipeline.account(counted), Options())
        assert prepared.outcome is not None and prepared.retrieves
        kept = originals(prepared.outcome.record, counted.request.messages, counted.count.digests)
        await pipeline.aclose()
        return prepared.body, {handle: text() for handle, text in kept}

    sent, kept = asyncio.run(prepare())
    named = set(HANDLE.findall(sent.decode()))
    assert named and named == set(kept)
    assert set(kept.values()) <= {m["content"] for m in messages if m["role"] == "tool"}


def test_a_read_back_is_clipped_to_the_room_left_or_says_there_is_none() -> None:
    assert fitted(TEXT, room=10_000, count=len) == TEXT
    clipped = fitted(TEXT, room=500, count=len)
    kept, note = clipped.split("\n[inflight_retrieve: ")
    assert len(clipped) <= 500 and TEXT.startswith(kept) and kept
    assert note == f"clipped to its first {len(kept):,} of {len(TEXT):,} characters to fit the room left in the " + (
        "context window (ask for `lines` or `grep`)]"
    )
    assert fitted(TEXT, room=20, count=len) == "[inflight_retrieve: unavailable: no room left]"

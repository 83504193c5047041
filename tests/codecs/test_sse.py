"""A stream's events, found the same whatever chunks the stream comes in."""

from __future__ import annotations

from inflight.codecs.sse import EventBuffer, event_data

STREAM = b'data: {"a": 1}\n\n: comment\r\n\r\ndata: x\ndata: y\n\n\n\nevent: e\r\ndata: z\r\n\r\ntail'
EVENTS = [b'data: {"a": 1}', b": comment", b"data: x\ndata: y", b"", b"event: e\r\ndata: z"]


def test_the_events_are_the_same_whatever_the_chunking() -> None:
    for size in (1, 2, 3, 5, len(STREAM)):
        events = EventBuffer()
        seen: list[bytes] = []
        for start in range(0, len(STREAM), size):
            events.add(STREAM[start : start + size])
            while (complete := events.next_event()) is not None:
                seen.append(complete)
        assert seen == EVENTS, size
        assert events.pending == b"tail"
        assert len(events) == len(b"tail")


def test_a_long_event_without_an_end_is_searched_once() -> None:
    events = EventBuffer()
    for _ in range(10_000):  # quadratic, searched from the start each time: 10^4 searches of up to 1 MB
        events.add(b"x" * 100)
        assert events.next_event() is None
    events.add(b"\n\n")
    assert events.next_event() == b"x" * 1_000_000


def test_an_events_data_is_its_data_lines_joined() -> None:
    assert event_data(b"event: e\r\ndata: z\r\n") == b"z"
    assert event_data(b"data: x\ndata:y\n: comment\nid: 1") == b"x\ny"
    assert event_data(b": comment") == b""

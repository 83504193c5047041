"""Server-sent events (`text/event-stream`): a stream cut into its events as its chunks come, and an event's data.

An event ends at a blank line (`\\n\\n` or `\\r\\n\\r\\n`). The relay passes a stream's bytes on as they came;
these are for what reads the events on the way: a held stream's first event, the usage an upstream reports,
the event a report of ours is written into.
"""

from __future__ import annotations

import re

SEPARATOR = re.compile(rb"\n\n|\r\n\r\n")  # the leftmost match ends an event


class EventBuffer:
    """A stream's events as its chunks come, each byte searched for the end of an event once.

    Searching the whole buffer again after each chunk would cost time quadratic in an event's size (an
    upstream's first line of 300 MB with no newline took minutes); this searches on from where it stopped.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._searched = 0  # bytes at the start of `_buffer` known to hold no separator's start

    def add(self, chunk: bytes) -> None:
        self._buffer += chunk

    def next_event(self) -> bytes | None:
        """The next complete event (without its separator), or None until more comes."""
        found = self.next_with_separator()
        return None if found is None else found[0]

    def next_with_separator(self) -> tuple[bytes, bytes] | None:
        """The next complete event and the separator that ended it as it came (`\n\n`, `\r\n\r\n`...), or None
        until more comes: what passes unchanged can go on byte for byte."""
        found = SEPARATOR.search(self._buffer, self._searched)
        if found is None:
            self._searched = max(0, len(self._buffer) - 3)  # a separator may start in the last 3 bytes
            return None
        event = bytes(self._buffer[: found.start()])
        separator = bytes(self._buffer[found.start() : found.end()])
        del self._buffer[: found.end()]
        self._searched = 0
        return event, separator

    @property
    def pending(self) -> bytes:
        """What came after the last complete event."""
        return bytes(self._buffer)

    def __len__(self) -> int:
        return len(self._buffer)


def event_data(event: bytes) -> bytes:
    """The data of an SSE event: its `data:` lines, joined."""
    return b"\n".join(line[5:].strip() for line in event.splitlines() if line.startswith(b"data:"))

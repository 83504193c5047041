"""The prefix tracker's bound holds in memory, not only in its own count: many tenants' one-message conversations.

Each client key is a tenant, and each tenant's conversation a key of its own (`conversation_key`), so a client
that sends a new key with every request adds a conversation each time. The tracker keeps the last request of
at most `max_bytes` of them (`compaction.cache.max_bytes / 4` in the server: 32 MiB, some 48,000 one-message
conversations), so the memory they take levels off there. Measured with tracemalloc, which counts what Python
allocates, not the process's RSS.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import xxhash

from inflight.compaction.prefix import PrefixTracker, SentRequest
from inflight.compaction.record import conversation_key
from inflight.policy.tenants import tenant_of

MAX_BYTES = 1 << 20
MAX_TALLIES = 1000
KiB = 1024


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def one_message_conversations(start: int, stop: int) -> Iterator[tuple[str, SentRequest]]:
    """As the server keys and measures a one-message chat completion, each under a key of its own."""
    for number in range(start, stop):
        tenant = tenant_of([(b"authorization", f"Bearer sk-{number:08d}".encode())])
        digests = [xxhash.xxh3_128_digest(b'{"role":"user","content":"Say ok."}')]
        key = conversation_key(session=None, model="gpt-4o-mini", head_digests=digests, tenant=tenant)
        yield key, SentRequest.untouched(digests, [10], fixed=3)


def test_the_memory_of_new_tenants_conversations_levels_off_at_the_trackers_bytes() -> None:
    tracemalloc.start()
    try:
        before = traced()
        tracker = PrefixTracker(MAX_BYTES, max_tallies=MAX_TALLIES)
        held = []
        # About 1,500 such conversations fill a MiB: each step is three times that many new tenants.
        for start in range(0, 20_000, 5_000):
            for key, sent in one_message_conversations(start, start + 5_000):
                tracker.observe(key, sent)
            held.append(traced() - before)
    finally:
        tracemalloc.stop()
    assert tracker.rewrites()["conversations"] == MAX_TALLIES
    # Full after the first step: later steps, three times the tracker's worth of new tenants each, add nothing.
    assert max(held[1:]) - held[0] < 32 * KiB, [f"{size / KiB:.0f} KiB" for size in held]
    # What it holds is what it counts, within a quarter (7 to 11% over, measured), and the tallies on top (about
    # 330 bytes each).
    assert held[-1] < 1.25 * MAX_BYTES + 400 * MAX_TALLIES, f"{held[-1] / KiB:.0f} KiB"

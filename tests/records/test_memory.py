"""The in-memory record store stays within its bounds: conversations, bytes (its keys' too), and a record too big
for it."""

from __future__ import annotations

import tracemalloc

from inflight.compaction.record import Record, Replacement
from inflight.records.memory import KEY_BYTES, MemoryRecordStore, weight

MB = 1024 * 1024


def record_holding(text_bytes: int, index: int = 0) -> Record:
    message = {"role": "tool", "tool_call_id": f"c{index}", "content": "x" * text_bytes}
    replaced = {5: Replacement(bytes(16), message, text_bytes // 4, "truncate")}
    return Record(head_len=2, prefix_len=2, prefix_hash=bytes(16), replaced=replaced)


async def test_big_records_are_bounded_by_bytes_not_only_by_count() -> None:
    store = MemoryRecordStore(max_entries=10_000, max_bytes=4 * MB, ttl_s=60)
    for key in range(40):  # 40 conversations holding 500 kB each: 20 MB if only counted
        await store.save(f"k{key}", [record_holding(500_000, key)])
    assert store.bytes <= 4 * MB and len(store) == 8
    assert await store.load("k39") and not await store.load("k0")  # the newest stay


async def test_the_count_bound_still_holds_for_small_records() -> None:
    store = MemoryRecordStore(max_entries=3, max_bytes=4 * MB, ttl_s=60)
    for key in range(10):
        await store.save(f"k{key}", [record_holding(100, key)])
    assert len(store) == 3


async def test_a_record_heavier_than_the_store_is_not_kept() -> None:
    store = MemoryRecordStore(max_entries=10, max_bytes=1 * MB, ttl_s=60)
    await store.save("small", [record_holding(100)])
    await store.save("huge", [record_holding(2 * MB)])
    assert await store.load("huge") == [] and await store.load("small")


def test_weight_counts_the_text_held() -> None:
    assert 500_000 < weight([record_holding(500_000)]) < 510_000


async def test_a_long_session_id_is_kept_as_a_digest_not_as_given() -> None:
    store = MemoryRecordStore(max_entries=100_000, max_bytes=MB, ttl_s=60)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for n in range(20):  # 20 sessions named with a megabyte each: 20 MB if their keys were kept
            key = f"session:{n}" + "s" * MB
            await store.save(key, [record_holding(100, n)])
            assert await store.load(key)
            del key
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held - before < MB and len(store) == 20


async def test_each_key_costs_bytes_of_the_bound_beside_its_records() -> None:
    store = MemoryRecordStore(max_entries=100_000, max_bytes=MB, ttl_s=60)
    for n in range(10_000):
        await store.save(f"k{n}", [record_holding(0, n)])
    assert store.bytes == len(store) * (weight([record_holding(0)]) + KEY_BYTES) <= MB

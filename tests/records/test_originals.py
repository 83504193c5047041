"""The originals kept for `inflight_retrieve`: per tenant, within their bytes."""

from __future__ import annotations

import functools

from inflight.records.originals import OriginalStore


def test_an_original_is_read_back_only_by_its_tenant() -> None:
    store = OriginalStore(max_bytes=1024 * 1024, ttl_s=60)
    assert store.keep("tenant-a", "inflight:1", lambda: "the original")
    assert store.get("tenant-a", "inflight:1") == "the original"
    assert store.get("tenant-b", "inflight:1") is None and store.get("tenant-a", "inflight:2") is None


def test_a_kept_original_is_not_rendered_again_and_the_oldest_go_past_the_bound() -> None:
    store = OriginalStore(max_bytes=10_000, ttl_s=60)
    rendered: list[str] = []

    def text(name: str) -> str:
        rendered.append(name)
        return name * 3000

    for name in "abcd":
        store.keep("t", name, functools.partial(text, name))
    store.keep("t", "d", lambda: text("d"))
    assert rendered == ["a", "b", "c", "d"]  # `d` was kept already: not rendered again
    assert store.get("t", "a") is None and store.get("t", "d") == "d" * 3000
    assert store.stats()["bytes"] <= 10_000
    assert not store.keep("t", "huge", lambda: "x" * 20_000)  # larger than the whole store

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


def test_the_bound_is_in_bytes_as_stored_whatever_the_characters() -> None:
    """A 4-byte character takes four bytes stored (and four in a Python string): 16 MiB of such text is not 4 MiB."""
    store = OriginalStore(max_bytes=1024 * 1024, ttl_s=60)
    wide = "\U0001f600" * 100_000  # 400,000 bytes in UTF-8
    for n in range(4):
        assert store.keep("t", f"inflight:{n}", lambda: wide)
    assert 400_000 * 2 <= store.stats()["bytes"] <= 1024 * 1024
    assert store.get("t", "inflight:0") is None and store.get("t", "inflight:3") == wide  # the oldest went
    assert not store.keep("t", "huge", lambda: "\U0001f600" * 300_000)  # 1.2 MB stored: larger than the store

"""The originals compaction took out, kept so the model can read them back (`inflight_retrieve`).

They are kept in this process's memory under the tenant (the digest of the client's key) and the handle
together, so a handle from another client's conversation is simply not found. The store is bounded by bytes
(the oldest go first) and by age (`compaction.retrieval.ttl_s`). Memory is enough across workers and restarts:
each compacted turn keeps what its placeholders name from the history the client resends, and the model's calls
are answered within that request, by the same process.
"""

from __future__ import annotations

from collections.abc import Callable

from cachetools import TTLCache

ENTRY_OVERHEAD_BYTES = 160  # the key's two strings and the cache's link, timer and dict entry


def entry_weight(text: str) -> int:
    return len(text) + ENTRY_OVERHEAD_BYTES


class OriginalStore:
    """Originals by (tenant, handle), within `max_bytes` and `ttl_s`."""

    def __init__(self, *, max_bytes: int, ttl_s: float) -> None:
        self.max_bytes = max_bytes
        self._texts: TTLCache[tuple[str, str], str] = TTLCache(maxsize=max_bytes, ttl=ttl_s, getsizeof=entry_weight)

    def keep(self, tenant: str, handle: str, text: Callable[[], str]) -> bool:
        """Keep an original unless it is kept already; `text` is rendered only if needed. False when it is larger
        than the whole store."""
        key = (tenant, handle)
        if self._texts.get(key) is not None:
            return True
        rendered = text()
        if entry_weight(rendered) > self.max_bytes:
            return False
        self._texts[key] = rendered
        return True

    def get(self, tenant: str, handle: str) -> str | None:
        """The original, if it is kept for this tenant."""
        return self._texts.get((tenant, handle))

    def stats(self) -> dict[str, int]:
        return {"originals": len(self._texts), "bytes": int(self._texts.currsize)}

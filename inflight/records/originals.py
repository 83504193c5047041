"""The originals compaction took out, kept so the model can read them back (`inflight_retrieve`).

They are kept in this process's memory under the tenant (the digest of the client's key) and the handle
together, so a handle from another client's conversation is simply not found. The store is bounded by bytes
(the oldest go first) and by age (`compaction.retrieval.ttl_s`). Memory is enough across workers and restarts:
each compacted turn keeps what its placeholders name from the history the client resends, and the model's calls
are answered within that request, by the same process.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from cachetools import TTLCache

ENTRY_OVERHEAD_BYTES = 160  # the key's two strings and the cache's link, timer and dict entry
BYTES_OVERHEAD = sys.getsizeof(b"")  # a bytes object's own header


def entry_weight(stored: bytes) -> int:
    """An entry's memory: its UTF-8 bytes as stored, their object's header, the key and the cache's entry."""
    return len(stored) + BYTES_OVERHEAD + ENTRY_OVERHEAD_BYTES


class OriginalStore:
    """Originals by (tenant, handle), within `max_bytes` and `ttl_s`.

    Stored as UTF-8, so the bound is the memory they take whatever their characters (a text of 4-byte characters
    takes four times its length as a Python string too). Read back in worker threads while turns keep new ones
    on the event loop: a lock keeps the cache whole."""

    def __init__(self, *, max_bytes: int, ttl_s: float) -> None:
        self.max_bytes = max_bytes
        self._texts: TTLCache[tuple[str, str], bytes] = TTLCache(maxsize=max_bytes, ttl=ttl_s, getsizeof=entry_weight)
        self._lock = threading.Lock()

    def keep(self, tenant: str, handle: str, text: Callable[[], str]) -> bool:
        """Keep an original unless it is kept already; `text` is rendered only if needed. False when it is larger
        than the whole store."""
        key = (tenant, handle)
        with self._lock:
            if self._texts.get(key) is not None:
                return True
        stored = text().encode("utf-8", "surrogatepass")
        if entry_weight(stored) > self.max_bytes:
            return False
        with self._lock:
            self._texts[key] = stored
        return True

    def get(self, tenant: str, handle: str) -> str | None:
        """The original, if it is kept for this tenant."""
        with self._lock:
            stored = self._texts.get((tenant, handle))
        return stored.decode("utf-8", "surrogatepass") if stored is not None else None

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"originals": len(self._texts), "bytes": int(self._texts.currsize)}

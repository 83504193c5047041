"""Compacting one conversation at a time, from the record kept for it, and keeping the new record.

A big conversation is compacted in a worker thread (`offload`), so the event loop keeps serving.
Two turns of one conversation may arrive together (an agent retrying, parallel sub-agents sharing a
head): a lock per conversation key makes the second reuse the first's record instead of paying
for a second summary.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from proxy.compaction.compactor import Compactor
from proxy.compaction.conversation import Conversation
from proxy.compaction.draft import Budget
from proxy.compaction.offload import OFFLOAD_AT_TOKENS, in_worker_thread
from proxy.compaction.records import RecordStore, best_record, with_record
from proxy.compaction.work import Outcome
from proxy.heavy import HEAVY_TOKENS


class ConversationCompactions:
    def __init__(self, records: RecordStore) -> None:
        self.records = records
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def compact(
        self,
        key: str,
        conversation: Conversation,
        *,
        compactor: Callable[[], Compactor],
        budget: Budget,
        force: bool,
    ) -> Outcome | None:
        """The outcome (None: send the conversation untouched); the record is saved under `key`.

        Most requests fit and have no record: they are told so without a lock or a compactor.
        """
        if not force and conversation.tokens <= budget.prune_at:
            if best_record(await self.records.load(key), conversation.digests) is None:
                return None
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            records = await self.records.load(key)
            record = best_record(records, conversation.digests)
            built = compactor()  # on this loop: its summarizer calls come back here (`offload.on_home_loop`)

            def run() -> Awaitable[Outcome | None]:
                return built.run(conversation, budget=budget, record=record, force=force)

            tokens = conversation.tokens
            offload = tokens >= OFFLOAD_AT_TOKENS
            outcome = await (in_worker_thread(run, heavy=tokens >= HEAVY_TOKENS) if offload else run())
            if outcome is not None:
                await self.records.save(key, with_record(records, record, outcome.record))
            return outcome

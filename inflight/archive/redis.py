"""The archive in Redis, next to the records; every key expires after `archive.retention_s`.

`inflight:arch:conv:<id>` is a conversation's hash (label, model, first, last, turns,
compactions), `inflight:arch:turns:<id>` its list of turns (the newest `max_turns`),
`inflight:arch:cmp:<id>` a compaction's JSON, and `inflight:arch:index` orders conversations by
their last turn. Redis's memory is limited by its own `maxmemory`, as for the records; labels and
models are stored clipped (`store.clipped`), and a listing returns at most `MAX_LISTED` conversations.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from inflight.archive.store import MAX_LISTED, TurnWrite, clipped, kept_turn
from inflight.config import Archive
from inflight.records.redis import connect

PREFIX = "inflight:arch:"
INDEX = PREFIX + "index"
FIELDS = ("label", "model", "first", "last", "turns", "compactions")


class RedisArchive:
    def __init__(self, url: str, archive: Archive) -> None:
        self.archive = archive
        self.ttl_s = max(int(archive.retention_s), 1)
        self.client = connect(url)

    async def add_turns(self, writes: list[TurnWrite]) -> None:
        async with self.client.pipeline(transaction=False) as pipe:  # first get the turns' numbers
            for write in writes:
                pipe.hincrby(PREFIX + "conv:" + write.conversation, "turns", 1)
                pipe.expire(PREFIX + "conv:" + write.conversation, self.ttl_s)  # never a key without a TTL
            numbers = (await pipe.execute())[::2]
        async with self.client.pipeline(transaction=False) as pipe:
            for write, number in zip(writes, numbers, strict=True):
                turn, meta, turns = (
                    write.turn,
                    PREFIX + "conv:" + write.conversation,
                    PREFIX + "turns:" + write.conversation,
                )
                pipe.hsetnx(meta, "first", turn["time"])
                pipe.hsetnx(meta, "compactions", 0)
                stored = kept_turn(number, turn)
                pipe.hset(meta, mapping={"label": clipped(write.label), "model": stored["model"], "last": turn["time"]})
                pipe.rpush(turns, orjson.dumps(stored))
                pipe.ltrim(turns, -self.archive.max_turns, -1)
                pipe.zadd(INDEX, {write.conversation: turn["time"]})
                for key in (meta, turns):
                    pipe.expire(key, self.ttl_s)
            pipe.zremrangebyscore(INDEX, "-inf", time.time() - self.archive.retention_s)
            pipe.expire(INDEX, self.ttl_s)
            await pipe.execute()

    async def add_compaction(self, entry: dict[str, Any]) -> None:
        body = await asyncio.to_thread(orjson.dumps, entry)  # its dropped messages may weigh megabytes
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.set(PREFIX + "cmp:" + entry["id"], body, ex=self.ttl_s)
            pipe.hincrby(PREFIX + "conv:" + entry["conversation"], "compactions", 1)
            pipe.expire(PREFIX + "conv:" + entry["conversation"], self.ttl_s)
            await pipe.execute()

    async def conversations(self, limit: int) -> list[dict[str, Any]]:
        since = time.time() - self.archive.retention_s
        found = await self.client.zrevrangebyscore(INDEX, "+inf", since, start=0, num=min(limit, MAX_LISTED))
        ids = [cid.decode() for cid in found if isinstance(cid, bytes)]
        async with self.client.pipeline(transaction=False) as pipe:
            for conversation in ids:
                pipe.hmget(PREFIX + "conv:" + conversation, FIELDS)
            rows = await pipe.execute()
        return [_meta(cid, row) for cid, row in zip(ids, rows, strict=True) if row[0] is not None]

    async def conversation(self, conversation: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(PREFIX + "conv:" + conversation, FIELDS)
            pipe.lrange(PREFIX + "turns:" + conversation, 0, -1)
            row, turns = await pipe.execute()
        since = time.time() - self.archive.retention_s
        if row[0] is None or float(row[FIELDS.index("last")] or 0) <= since:
            return None, []
        return _meta(conversation, row), await asyncio.to_thread(_turns, turns, since)

    async def compaction(self, compaction_id: str) -> bytes | None:
        body = await self.client.get(PREFIX + "cmp:" + compaction_id)
        return body if isinstance(body, bytes) else None

    async def close(self) -> None:
        await self.client.aclose()


def _turns(bodies: list[bytes], since: float) -> list[dict[str, Any]]:
    """The turns within the retention, sorted (workers may push them out of order). Run off the event loop."""
    turns = [turn for turn in (orjson.loads(body) for body in bodies) if turn["time"] > since]
    return sorted(turns, key=lambda turn: turn["n"])


def _meta(conversation: str, row: list[bytes | None]) -> dict[str, Any]:
    values = dict(zip(FIELDS, row, strict=True))
    return {
        "id": conversation,
        "label": (values["label"] or b"").decode("utf-8", "replace"),
        "model": (values["model"] or b"").decode("utf-8", "replace"),
        "first": float(values["first"] or 0),
        "last": float(values["last"] or 0),
        "turns": int(values["turns"] or 0),
        "compactions": int(values["compactions"] or 0),
    }

"""Compaction records in Redis, shared by every worker and replica that points at the same server.

It uses redis-py's asyncio client with short timeouts, so a Redis that does not answer does not hold up
requests (`ResilientStore` falls back to memory meanwhile); the client reconnects by itself. Keys are
`inflight:rec:<digest of the conversation key>` and `inflight:lease:<digest of the name>` (`codec.stored_key`,
so a client's session id is never stored as given), each with a TTL; reading a record renews it (GETEX).
A lease is a `SET NX PX`, released only by its owner.
"""

from __future__ import annotations

import redis.asyncio as redis

from inflight.compaction.record import Record
from inflight.records.codec import decode, encode, stored_key

RECORD_PREFIX = "inflight:rec:"
LEASE_PREFIX = "inflight:lease:"
TIMEOUT_S = 0.5
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


def connect(url: str) -> redis.Redis:
    """A Redis client for the record store and the archive alike.

    It gives up on a silent server within `TIMEOUT_S`, and pings a connection idle for 30 s before using it,
    so a dead one is replaced first."""
    return redis.Redis.from_url(
        url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S, health_check_interval=30
    )


class RedisRecordStore:
    def __init__(self, url: str, *, ttl_s: float) -> None:
        self.ttl_s = max(int(ttl_s), 1)
        self.client = connect(url)

    @property
    def degraded(self) -> bool:
        """Always False: this store either serves or fails (`ResilientStore` is what falls back to memory)."""
        return False

    async def load(self, key: str) -> list[Record]:
        body = await self.client.getex(RECORD_PREFIX + stored_key(key), ex=self.ttl_s)
        return decode(body) if isinstance(body, bytes) else []

    async def save(self, key: str, records: list[Record]) -> None:
        await self.client.set(RECORD_PREFIX + stored_key(key), encode(records), ex=self.ttl_s)

    async def lease(self, name: str, owner: str, ttl_s: float) -> bool:
        key = LEASE_PREFIX + stored_key(name)
        if await self.client.set(key, owner, nx=True, px=int(ttl_s * 1000)):
            return True
        return await self.client.get(key) == owner.encode()

    async def release(self, name: str, owner: str) -> None:
        await self.client.eval(RELEASE, 1, LEASE_PREFIX + stored_key(name), owner)

    async def close(self) -> None:
        await self.client.aclose()

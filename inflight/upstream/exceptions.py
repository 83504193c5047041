"""What can go wrong talking to the upstream, and the one place where it becomes a proxy error (502, 504)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from inflight.errors import UpstreamTimeout, UpstreamUnreachable


class NetworkError(Exception):
    """The connection to the upstream failed."""


class ConnectError(NetworkError):
    pass


class ReadError(NetworkError):
    pass


class WriteError(NetworkError):
    pass


class RemoteProtocolError(NetworkError):
    """The upstream closed the connection without a response, or sent something that is not HTTP/1.1."""


class NetworkTimeout(NetworkError):
    pass


class ConnectTimeout(NetworkTimeout):
    pass


class ReadTimeout(NetworkTimeout):
    pass


class WriteTimeout(NetworkTimeout):
    pass


class PoolTimeout(NetworkTimeout):
    pass


# What a broken or silent upstream raises while a response body is being relayed.
STREAM_ERRORS = (NetworkError,)


@asynccontextmanager
async def upstream_errors(host: str) -> AsyncIterator[None]:
    try:
        yield
    except NetworkTimeout as exc:
        raise UpstreamTimeout(f"upstream {host} timed out ({type(exc).__name__})") from exc
    except NetworkError as exc:
        raise UpstreamUnreachable(f"upstream {host} is unreachable ({type(exc).__name__}: {exc})") from exc

"""The one place where the upstream connection's exceptions become proxy errors (502, 504)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpcore

from proxy.errors import UpstreamTimeout, UpstreamUnreachable

# What a broken or silent upstream raises while a response body is being relayed.
STREAM_ERRORS = (httpcore.NetworkError, httpcore.ProtocolError, httpcore.TimeoutException)


@asynccontextmanager
async def upstream_errors(host: str) -> AsyncIterator[None]:
    try:
        yield
    except httpcore.TimeoutException as exc:
        raise UpstreamTimeout(f"upstream {host} timed out ({type(exc).__name__})") from exc
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        raise UpstreamUnreachable(f"upstream {host} is unreachable ({type(exc).__name__}: {exc})") from exc

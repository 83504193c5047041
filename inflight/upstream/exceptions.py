"""What can go wrong talking to the upstream, and the one place where it becomes a proxy error (502, 504)."""

from __future__ import annotations

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


class UpstreamErrors:
    """`with UpstreamErrors(host):` what goes wrong talking to `host` in the block leaves it as a proxy error.

    A plain context manager (it needs no `await`): one is entered for every request sent."""

    __slots__ = ("host",)

    def __init__(self, host: str) -> None:
        self.host = host

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, NetworkTimeout):
            raise UpstreamTimeout(f"upstream {self.host} timed out ({type(exc).__name__})") from exc
        if isinstance(exc, NetworkError):
            raise UpstreamUnreachable(f"upstream {self.host} is unreachable ({type(exc).__name__}: {exc})") from exc

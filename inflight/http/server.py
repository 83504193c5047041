"""Serving the app with uvicorn: its options, and a connection protocol that bounds slow clients.

uvicorn closes a kept-alive connection left idle for `timeout_keep_alive`, but only after a first
response, and it puts no limit on how long a request's headers may take. A client that opens
connections and sends nothing, or a byte now and then (a slow loris), would keep each connection
and its file descriptor forever. `BoundedHttpProtocol` adds the two missing clocks:

- a new connection gets uvicorn's own idle timer at once (`limits.client_idle_timeout_s`), not only
  after its first response;
- from the first byte of a request to the end of its headers, `limits.client_header_timeout_s`;
  past it the client gets a 408 in OpenAI's shape and the connection is closed.

And one bound: a request's head (request line and headers) may take `limits.max_header_bytes`. The
parser is fed in slices of that size, and bytes that bring it no progress (no end of the head, no
body, no end of the request) are counted, so a client with no key gets a 431 once that much came,
not after uvicorn buffered its 100 MB header (httptools assembles a header value by repeated
concatenation, so an unbounded one also costs quadratic time); the same holds for a chunked body's
trailer or chunk lines that never end, and pipelined requests each start afresh.

Trailer fields of a chunked request are dropped: httptools reports them like headers, and uvicorn
appends them to the request's header list, so a request that arrived in one read would have them
forwarded as headers (and past every check made on the headers), one that arrived in two would not.

And a clock for the other direction (`limits.client_send_timeout_s`): uvicorn's `send` waits, with no
limit, for the connection's write buffer to drain, so a client that stops reading would hold the
relay, and the upstream stream behind it, until the upstream's own `read_timeout_s`. Once the
buffer passes its high-water mark (the kernel's buffers are full already), or a finished answer
left bytes in it, the `SendClock` watches whether the client takes any of them; when it has
taken none for that long the connection is reset, and the relay, told by the disconnect, closes
the upstream stream and notes it on the request's log line.

It tells each request's `Disconnect` (`inflight.http.disconnect`) the moment its client leaves, so
that no task need wait on `receive()` to learn it, and when the request's body is all in; and it
refuses WebSocket upgrades before any app sees them (a 501 saying to use HTTP).

The body's own clock (`limits.client_body_timeout_s`) runs where the body is read (`inflight.http.body`),
so that its 408 goes through the endpoint like any other error, with its log line; a body the
connection has all in already needs none.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import socket
import struct
import sys
import termios
import time
from collections.abc import Callable
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inflight import __version__
from inflight.config import Limits, Settings
from inflight.config.settings import redacted_url
from inflight.http.disconnect import DISCONNECT, SEND_TIMED_OUT, Disconnect
from inflight.http.error_response import error_body
from inflight.http.exchange import REQUEST_FIELDS, LineFields, clean, clipped
from inflight.upstream.client import missing_v1

log = logging.getLogger("inflight")

GIL_SWITCH_INTERVAL_S = 0.0005
# Linux's SIOCOUTQ (the same number): the bytes of a TCP socket's send queue its peer has not acknowledged.
UNACKED_QUERY = getattr(termios, "TIOCOUTQ", None)
JOIN_BYTES = 64 * 1024  # a first chunk up to this size is copied after the head, to go in one write
SEND_CLOCK_TICKS = 4  # looks per `client_send_timeout_s`: a cut comes between 1 and 1.25 times it after the last byte


def closing_answer(status: bytes, message: str, *, code: str) -> bytes:
    """An answer of ours written on the connection itself (before any app runs), which then closes."""
    body = error_body(message, error_type="invalid_request_error", code=code)
    head = b"HTTP/1.1 %b\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
    return head % (status, len(body)) + body


def header_timeout_response(timeout_s: float) -> bytes:
    message = f"request headers not received within {timeout_s:g} s (limits.client_header_timeout_s)"
    return closing_answer(b"408 Request Timeout", message, code="request_timeout")


def header_too_large_response(max_bytes: int) -> bytes:
    message = f"request headers exceed {max_bytes} bytes (limits.max_header_bytes)"
    return closing_answer(b"431 Request Header Fields Too Large", message, code="request_header_fields_too_large")


WEBSOCKET_REFUSAL = "inflight does not proxy WebSocket connections; send the same request over HTTP"


def websocket_refusal_response() -> bytes:
    return closing_answer(b"501 Not Implemented", WEBSOCKET_REFUSAL, code="websocket_unsupported")


def unacknowledged(transport: asyncio.Transport) -> int:
    """The answer's bytes the client's TCP stack has not acknowledged yet: those still in the transport's
    buffer, and (on Linux) those in the kernel's send queue. It falls only as the client reads."""
    pending = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if UNACKED_QUERY is not None and sock is not None:
        with contextlib.suppress(OSError):  # not Linux, or the socket is gone: the transport's share alone
            pending += struct.unpack("i", fcntl.ioctl(sock.fileno(), UNACKED_QUERY, b"\0\0\0\0"))[0]
    return pending


class SendClock:
    """How long the bytes of an answer have waited on a client that takes none of them.

    It runs while nothing more is written to the connection: from the moment its buffer passes the
    high-water mark (`uvicorn`'s `send` waits then) until writing resumes, and once an answer is done
    with bytes left in the buffer. Meanwhile the bytes not yet acknowledged can only fall, and only
    as the client reads; the kernel's send queue is counted with the transport's buffer, else a
    client reading slowly behind megabytes of kernel buffer would look as if it took nothing (the
    transport's buffer moves only once the kernel has room for a good share of it). It looks a
    few times a timeout, and calls `on_timeout` once no byte has been taken for `timeout_s`.
    """

    def __init__(self, transport: asyncio.Transport, *, timeout_s: float, on_timeout: Callable[[], None]) -> None:
        self.transport = transport
        self.timeout_s = timeout_s
        self.on_timeout = on_timeout
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.pending = 0  # unacknowledged at the last look
        self.last_progress = 0.0

    def start(self) -> None:
        if self.timer is None:
            self.pending = unacknowledged(self.transport)
            self.last_progress = self.loop.time()
            self.timer = self.loop.call_later(self.timeout_s / SEND_CLOCK_TICKS, self.look)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def look(self) -> None:
        self.timer = None
        if self.transport.get_write_buffer_size() == 0:  # the kernel took the rest: nothing of ours waits
            return
        pending, now = unacknowledged(self.transport), self.loop.time()
        if pending < self.pending:
            self.last_progress = now
        self.pending = pending
        if now - self.last_progress >= self.timeout_s:
            self.on_timeout()
            return
        self.timer = self.loop.call_later(self.timeout_s / SEND_CLOCK_TICKS, self.look)


class HeadCork:
    """A response's transport that holds the first write (its head) until the next one, joined in one write.

    uvicorn writes an answer's status line and headers when the app sends `http.response.start`, and
    its body with the next message: two writes, two system calls, and often two reads for the client
    before it has a byte of the body. When the body follows at once (a JSON answer, a held stream's
    first event) the two go out together; when it does not (a stream still waiting on the upstream),
    the head goes out alone at the loop's next turn, so the client sees the headers without waiting for the body."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop  # the connection's: asking for the running loop costs a system call
        self.held: bytes | None = None
        self.written = False  # the head went by: every later write goes straight through

    def write(self, data: bytes) -> None:
        if self.written:
            self.transport.write(data)
        elif self.held is None:
            self.held = data
            self.loop.call_soon(self.flush)
        else:
            head, self.held, self.written = self.held, None, True
            if len(data) <= JOIN_BYTES:
                self.transport.write(head + data)
            else:  # not copied to join it: two writes
                self.transport.write(head)
                self.transport.write(data)

    def flush(self) -> None:
        if self.held is not None:
            head, self.held, self.written = self.held, None, True
            self.transport.write(head)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's own
        return getattr(self.transport, name)


# uvicorn has no public hook for these clocks, so this subclasses its httptools protocol, which is not part of
# its API: pyproject.toml pins uvicorn to the versions tested, and tests/http/test_uvicorn_protocol.py names
# what a later uvicorn no longer has.
class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with an idle clock from the first moment, a header clock, a header bound
    and a send clock."""

    header_timeout_s: float = 30.0
    max_header_bytes: int = 64 * 1024
    send_timeout_s: float = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_deadline: asyncio.TimerHandle | None = None
        # When the current request's first bytes came (the loop's clock), until its headers are all in.
        self.head_since: float | None = None
        self.reading_head = True  # between the end of a request (or the start) and the end of the next one's headers
        # Bytes fed since the parser last made progress (a head's end, body, a request's end): a head, a
        # trailer or a chunk line that grows past the bound is refused, however it is cut into reads.
        self.quiet_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # uvicorn arms this only when a response is done; a connection that never sends would stay.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        self.send_clock = SendClock(transport, timeout_s=self.send_timeout_s, on_timeout=self.send_too_slow)

    def data_received(self, data: bytes) -> None:
        if self.head_since is None and (self.cycle is None or self.cycle.response_complete):
            # The first bytes of a new request: its header clock, if it needs one, counts from now.
            self.head_since = self.loop.time()
        start = 0
        while start < len(data):  # never more than the bound's room past the last progress at once
            piece = data[start : start + max(self.max_header_bytes - self.quiet_bytes, 1)]
            start += len(piece)
            self.quiet_bytes += len(piece)  # a callback of progress sets it back to 0
            super().data_received(piece)
            if self.transport.is_closing():
                return
            if self.quiet_bytes >= self.max_header_bytes:  # a head, a trailer, a chunk line that never ends
                self.headers_too_large()
                return
        if self.head_since is not None and self.header_deadline is None:
            # The headers are not all in: the clock runs. Headers that came whole in one read never needed one.
            self.header_deadline = self.loop.call_at(self.head_since + self.header_timeout_s, self.headers_too_slow)

    def on_body(self, body: bytes) -> None:
        self.quiet_bytes = 0
        super().on_body(body)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.reading_head:
            super().on_header(name, value)
        # else: a trailer field of a chunked body, dropped (see the module's docstring)

    def on_headers_complete(self) -> None:
        self.stop_header_clock()
        self.reading_head, self.quiet_bytes = False, 0
        super().on_headers_complete()
        if self.cycle is not None:  # its task has not run yet: its answer's head goes out with its body
            self.cycle.transport = HeadCork(self.transport, self.loop)  # type: ignore[assignment]
            self.cycle.scope[DISCONNECT] = Disconnect(self.loop)  # type: ignore[literal-required]

    def on_message_complete(self) -> None:
        self.reading_head, self.quiet_bytes = True, 0
        super().on_message_complete()
        if self.cycle is not None:
            disconnect = self.cycle.scope.get(DISCONNECT)
            if isinstance(disconnect, Disconnect):
                disconnect.body_in = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_header_clock()
        self.send_clock.stop()
        super().connection_lost(exc)
        if self.cycle is not None and not self.cycle.response_complete:  # the request uvicorn tells it is gone
            disconnect = self.cycle.scope.get(DISCONNECT)
            if isinstance(disconnect, Disconnect):
                disconnect.happen()

    def pause_writing(self) -> None:  # the buffer is over its high-water mark: `send` waits on the client now
        super().pause_writing()
        self.send_clock.start()

    def resume_writing(self) -> None:  # the buffer drained below its low-water mark: the client reads
        super().resume_writing()
        self.send_clock.stop()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.get_write_buffer_size():  # its last bytes wait on the client (a close would wait for ever)
            self.send_clock.start()

    def stop_header_clock(self) -> None:
        self.head_since = None
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def handle_websocket_upgrade(self) -> None:
        """A WebSocket upgrade (Codex tries one on `/v1/responses` before HTTP): refused here with a 501
        that says why, so the client falls back to HTTP at once; no app sees it, and uvicorn logs no
        half-done handshake."""
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
        target = self.url.decode("latin-1", "replace")
        log.info("client %s: WebSocket upgrade on %s refused (501): inflight serves HTTP only", client, clean(target))
        self.transport.write(websocket_refusal_response())
        self.transport.close()

    def headers_too_large(self) -> None:
        self.stop_header_clock()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
        log.info(
            "client %s: request headers over %d bytes (limits.max_header_bytes); answered 431 and closed",
            client,
            self.max_header_bytes,
        )
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(header_too_large_response(self.max_header_bytes))
        # else: the next request of a pipelining client, while this one's answer is under way: a 431 would
        # land inside that answer, so the connection only closes.
        self.transport.close()

    def headers_too_slow(self) -> None:
        self.header_deadline = None
        if self.transport.is_closing():
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
        log.info(
            "client %s: request headers not complete within %g s; answered 408 and closed",
            client,
            self.header_timeout_s,
        )
        self.transport.write(header_timeout_response(self.header_timeout_s))
        self.transport.close()

    def send_too_slow(self) -> None:
        """The client took no byte of its answer for `send_timeout_s`: reset the connection.

        A reset (SO_LINGER 0, as nginx's `reset_timedout_connection`), not a close: a close would keep the
        unread megabytes in the kernel, retrying to a peer that takes none. The disconnect reaches the
        relay, which closes the upstream stream; the mark in the scope tells it why."""
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
        log.info(
            "client %s: took no byte of its answer for %g s (limits.client_send_timeout_s); connection reset",
            client,
            self.send_timeout_s,
        )
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.scope[SEND_TIMED_OUT] = self.send_timeout_s  # type: ignore[literal-required]
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


def bounded_protocol(limits: Limits) -> type[BoundedHttpProtocol]:
    """The protocol class for one server: uvicorn instantiates it per connection, with no arguments of ours."""
    bounds = {
        "header_timeout_s": limits.client_header_timeout_s,
        "max_header_bytes": limits.max_header_bytes,
        "send_timeout_s": limits.client_send_timeout_s,
    }
    return type("BoundedHttpProtocol", (BoundedHttpProtocol,), bounds)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # `log.format: text`


class LineFormatter(logging.Formatter):
    """logging's own formatter, with the date and time of a line written once a second rather than for each line
    (there is a line per request, and `time.strftime` took half of the time a line took to format)."""

    _second: tuple[int, str] = (-1, "")  # the second last written, and its text

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.default_msec_format is None:
            return super().formatTime(record, datefmt)
        second, text = self._second
        if int(record.created) != second:
            second, text = int(record.created), time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (second, text)
        return self.default_msec_format % (text, record.msecs)


class JsonFormatter(logging.Formatter):
    """`log.format: json`: each line one JSON object, `time` (UTC, ISO 8601, to the millisecond), `level`,
    `logger`, `message` (the text line's own words), and `exception` for a traceback. A request line's fields
    (`Exchange.finish` gives them as `extra`: method, path, status, each `key=value`, the timings) are keys of
    their own, none of them over a text line's `MAX_FIELD_CHARS`; they never replace the four."""

    _second: tuple[int, str] = (-1, "")  # the second last written, and its text

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, REQUEST_FIELDS, None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                entry.setdefault(str(key), json_value(value))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(entry, default=str).decode()
        except TypeError:  # what orjson does not take (a lone surrogate, an int past 64 bits): the standard library
            return json.dumps(entry, default=str)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second, text = self._second
        if int(record.created) != second:
            second, text = int(record.created), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            self._second = (second, text)
        return f"{text}.{int(record.msecs):03d}Z"


def json_value(value: object) -> object:
    """A request field as a JSON value: numbers, booleans and None as they are, anything else as text clipped
    like the text line's."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return clipped(str(value))


def log_formatter(settings: Settings) -> logging.Formatter:
    """The formatter of `log.format`; JSON also asks each request's line for its fields (`LineFields`)."""
    LineFields.wanted = settings.log.format == "json"
    return JsonFormatter() if LineFields.wanted else LineFormatter(LOG_FORMAT)


# Libraries that log a line of their own per HTTP request they make (httpx's "HTTP Request: POST …" at
# INFO, httpcore's at DEBUG): the log has one line per request, ours, so these speak only of trouble,
# unless `log_level: debug` asks for everything.
CHATTY_LOGGERS = ("httpx", "httpcore")


def prepare_process(settings: Settings) -> None:
    """What a serving process (`inflight serve`, or each of its `--workers`) sets before uvicorn starts.

    Its log lines to stderr at `log_level`, one per request (uvicorn's access log is off, and the
    `CHATTY_LOGGERS` say only warnings), each with no more looked up than `LOG_FORMAT` shows (or, with
    `log.format: json`, as JSON objects: `JsonFormatter`, uvicorn's own lines too); and a
    short GIL switch interval: counting runs in worker threads, and with Python's default of 5 ms a
    counting thread could hold up the event loop (and every small request) that long."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(log_formatter(settings))
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler])
    # What the format never shows is not looked up for each line (the logging HOWTO's "Optimization").
    logging.logThreads, logging.logProcesses, logging.logMultiprocessing = False, False, False
    logging._srcfile = None
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if settings.log_level == "debug" else logging.WARNING)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def startup_line(settings: Settings, *, workers: int) -> str:
    """The one line `inflight serve` logs as it starts: what runs, where each format's requests go, where its state
    goes, who may use it. After `->` comes the upstream of Chat Completions and the Responses API (unless one has
    its own: `chat_completions -> URL`), then always where the Messages and Gemini APIs go.

    Credentials never appear: a password or a credential-like query parameter in a URL is starred
    (`redacted_url`), and an upstream's `user:password@` was taken out of its URL when the config was read."""
    listen = settings.listen
    host = f"[{listen.host}]" if ":" in listen.host else listen.host
    upstream = redacted_url(settings.upstream.base_url)
    own = [wire for wire in ("chat_completions", "responses") if wire in settings.format_upstreams]
    upstreams = "".join(f", {wire} -> {settings.destination(wire)}" for wire in (*own, "messages", "gemini"))
    compaction = settings.compaction.mode if settings.compaction.enabled else "off"  # `models:` may override it
    return (
        f"inflight {__version__} listening on http://{host}:{listen.port}/v1 -> {upstream}"
        f"{upstreams}; compaction {compaction}; state {settings.state.redacted_url}; "
        f"archive {'on' if settings.archive.enabled else 'off'}; "
        f"tracing {'on' if settings.telemetry.exports(os.environ) else 'off'}; "
        f"access: {access_summary(settings)}; workers {workers}"
    )


def upstream_warnings(settings: Settings) -> list[str]:
    """A hint for each upstream base URL with no version segment: `/v1/chat/completions` would reach
    `http://host:8080/chat/completions`, which llama.cpp, vLLM and OpenAI answer with a bare 404."""
    upstreams = {"upstream": settings.upstream, **{f"upstreams.{k}": v for k, v in settings.format_upstreams.items()}}
    google = upstreams.pop("upstreams.gemini", None)  # Gemini's paths carry their version (`/v1beta/...`)
    warnings = [
        f"{name}.base_url: {redacted_url(upstream.base_url)} has no /v1, so a request for /v1/X goes to "
        f"{redacted_url(upstream.base_url)}/X; most servers (llama.cpp, vLLM, OpenAI, Anthropic) want it to end in /v1"
        for name, upstream in upstreams.items()
        if missing_v1(upstream.base_url)
    ]
    if google is not None and not missing_v1(google.base_url):
        url = redacted_url(google.base_url)
        warnings.append(
            f"upstreams.gemini.base_url: {url} has a version in its path, so a request for /v1beta/X goes to "
            f"{url.rstrip('/')}/v1beta/X; Google's API wants its origin (https://generativelanguage.googleapis.com)"
        )
    return warnings


def state_warning(settings: Settings) -> str | None:
    """Why a SQLite `state.url` will not be writable, said at startup rather than at the first compaction
    (the store then keeps records in memory only: lost on restart, not shared by workers), or None."""
    if settings.state.scheme != "sqlite":
        return None
    directory = os.path.dirname(os.path.abspath(settings.state.sqlite_path))
    if not os.path.isdir(directory):
        problem = "does not exist"
    elif not os.access(directory, os.W_OK | os.X_OK):
        problem = "is not writable by this user"
    else:
        return None
    return (
        f"state.url {settings.state.url}: the directory {directory} {problem}; compaction records will be kept "
        "in this process's memory only (set INFLIGHT_DATA_DIR, or mount a volume there)"
    )


def access_summary(settings: Settings) -> str:
    """Who may use the proxy, in a few words: keys for `/v1`, admin keys for `/inflight/*` and `/metrics`."""
    access = settings.access
    if access.keys:
        clients = "keys required"
    elif settings.held_keys:
        clients = f"no keys ({', '.join(settings.held_keys)} spent for any client)"
    else:
        clients = "no keys (each client's own key goes upstream)"
    if not access.admin:
        return f"{clients}, " + ("no admin keys (/inflight/* and /metrics closed)" if access.keys else "no admin keys")
    return f"{clients}, admin keys required"


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """How `inflight serve` runs uvicorn (besides host and port)."""
    return {
        "http": bounded_protocol(settings.limits),
        "timeout_keep_alive": settings.limits.client_idle_timeout_s,
        "log_level": settings.log_level,
        "access_log": False,
        # `log.format: json`: uvicorn's lines go to the process's handler (`prepare_process`), not its own format.
        **({"log_config": None} if settings.log.format == "json" else {}),
        # The upstream's own Date/Server headers are relayed; uvicorn must not add a second pair.
        "server_header": False,
        "date_header": False,
        # X-Forwarded-* are the client's headers to forward, not ours to act on.
        "proxy_headers": False,
        "lifespan": "on",
    }

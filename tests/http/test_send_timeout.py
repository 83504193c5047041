"""A client that stops reading its answer is cut after `limits.client_send_timeout_s`, and the upstream stream
behind it closed; a client that reads slowly, however slowly, is not.

The upstream floods a stream (events of 16 KB as fast as they are taken) to a raw socket with a small
receive buffer, so the proxy's buffers to the client fill within the first megabytes. Every wait is on
an event with a generous ceiling; no duration is asserted.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import orjson
import pytest

from tests.conftest import ProxyFactory
from tests.http.test_metrics import scrape_when
from tests.http.test_retrieval import BASH, MODEL, WINDOW, chat_conversation
from tests.support.logs import log_lines
from tests.support.retriever import RetrievingModel
from tests.support.servers import serve
from tests.support.upstream import FLOOD_CAP_BYTES, Recorded, UpstreamApp
from tests.support.waiting import wait_until

SEND_TIMEOUT_S = 1.0
LIMITS = {"limits": {"client_send_timeout_s": SEND_TIMEOUT_S}}
BODY = orjson.dumps({"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "go"}]})
CEILING_S = 30.0  # what a wait may take on the busiest machine before the test fails
END_OF_ANSWER = b"data: [DONE]\n\n\r\n0\r\n\r\n"  # the last event, then the end of the chunked body


@contextmanager
def flood_request(
    proxy_url: str, *, flood_bytes: int | None = None, body: bytes = BODY, flood: bool = True
) -> Iterator[socket.socket]:
    """A raw connection that has sent a streaming request for a flood, with a 4 KB receive buffer (set before
    connecting: no window autotuning) and nothing read yet."""
    parts = urlsplit(proxy_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    size = f"x-flood-bytes: {flood_bytes}\r\n" if flood_bytes is not None else ""
    scenario = "x-scenario: flood\r\n" if flood else ""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n{scenario}"
        f"{size}content-length: {len(body)}\r\n\r\n"
    )
    with sock:
        sock.sendall(head.encode() + body)
        yield sock


def read_until_closed(sock: socket.socket) -> None:
    """Read until the proxy closes the connection (an end of file, or the reset it sends); fail past the ceiling."""
    sock.settimeout(0.25)
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return
        except TimeoutError:
            continue
        except ConnectionResetError:
            return
    raise AssertionError(f"the connection was still open after {CEILING_S} s")


def the_request(upstream: UpstreamApp) -> Recorded:
    wait_until(lambda: len(upstream.chat_requests()) == 1, timeout=CEILING_S)
    return upstream.chat_requests()[0]


def test_a_client_that_reads_nothing_is_cut_and_its_upstream_stream_closed(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app, url = upstream
    caplog.set_level(logging.INFO, logger="inflight")
    with start_proxy(url, **LIMITS) as proxy_url:
        with flood_request(proxy_url) as sock:
            record = the_request(app)
            # Without the send clock the relay would wait on this client until `upstream.read_timeout_s` (600 s).
            assert record.disconnected.wait(CEILING_S), "the upstream stream was never closed"
            read_until_closed(sock)
        [line] = log_lines(caplog, "POST /v1/chat/completions")
        base = proxy_url.removesuffix("/v1")
        chat = {"route": "/v1/chat/completions", "status": "200"}  # told to the metrics just after the log line
        metrics = scrape_when(base, lambda scrape: scrape.get("inflight_requests_total", **chat) == 1)
    assert " 200 " in line and "client_disconnected=1" in line and "client_send_timeout_s=1 " in line, line
    assert metrics.get("inflight_client_send_timeouts_total") == 1
    [cut] = log_lines(caplog, "limits.client_send_timeout_s")
    assert "took no byte of its answer for 1 s" in cut
    assert record.flooded > 1024 * 1024  # what the proxy took before its buffers to the client were full


def test_a_client_that_reads_slowly_is_not_cut(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Reading 16 KB every 0.1 s, slower than the flood, behind the proxy's full buffers: the transport's own
    buffer does not move for seconds meanwhile (the kernel's send buffer, megabytes, takes more only once
    it has room for a good share of it), but each read is acknowledged, and that is what the clock sees."""
    app, url = upstream
    flood_bytes = 8 * 1024 * 1024  # more than the buffers between the proxy and this client hold
    caplog.set_level(logging.INFO, logger="inflight")
    with start_proxy(url, **LIMITS) as proxy_url, flood_request(proxy_url, flood_bytes=flood_bytes) as sock:
        record = the_request(app)
        wait_until(lambda: record.flooded > 1024 * 1024, timeout=CEILING_S)  # under way: buffers fill at once
        received = bytearray()
        slow_until = time.monotonic() + 4 * SEND_TIMEOUT_S  # reading all along, several timeouts long
        while time.monotonic() < slow_until:
            time.sleep(0.1)
            wanted = len(received) + 16 * 1024
            while len(received) < wanted:
                chunk = sock.recv(wanted - len(received))
                assert chunk, "the proxy closed the connection of a client that reads"
                received += chunk
        sock.settimeout(CEILING_S)
        while not received.endswith(END_OF_ANSWER):  # now the rest, at full speed
            chunk = sock.recv(1024 * 1024)
            assert chunk, "the proxy closed the connection before the answer's end"
            received += chunk
        [line] = log_lines(caplog, "POST /v1/chat/completions")
    assert received.startswith(b"HTTP/1.1 200 ")
    assert record.flooded >= flood_bytes  # the whole flood went through
    assert "client_send_timeout_s" not in line and "client_disconnected" not in line, line


def test_a_client_that_reads_nothing_of_a_read_back_is_cut_and_the_continuations_stream_closed(
    start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The model reads back a masked output, and the continuation inflight sends is answered with a flood: the
    client, reading nothing, is cut, and the continuation's upstream stream is closed with it."""
    app = UpstreamApp()
    app.retriever, app.flood_read_backs = RetrievingModel(), True
    body = orjson.dumps({"model": MODEL, "stream": True, "messages": chat_conversation(), "tools": [BASH]})
    caplog.set_level(logging.INFO, logger="inflight")
    with serve(app) as url, start_proxy(url + "/v1", **WINDOW, **LIMITS) as proxy_url:
        with flood_request(proxy_url, body=body, flood=False) as sock:
            wait_until(lambda: any(r.flooded for r in app.chat_requests()), timeout=CEILING_S)
            [continuation] = [r for r in app.chat_requests() if r.flooded]
            assert continuation.disconnected.wait(CEILING_S), "the continuation's stream was never closed"
            read_until_closed(sock)
        [line] = log_lines(caplog, "POST /v1/chat/completions")
    assert "client_send_timeout_s=1 " in line and "retrieved=" in line, line
    assert continuation.flooded < FLOOD_CAP_BYTES  # cut off, not read to its end

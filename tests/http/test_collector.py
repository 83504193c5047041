"""The garbage collector tuned for `inflight serve`: startup's objects frozen, young collections spaced out; and
a request that leaves it nothing to do."""

import gc
import subprocess
import sys
import time
from collections import Counter

import httpx

from inflight.app import GC_YOUNG_THRESHOLD
from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

PROBE = """
import gc
from inflight.app import tune_collector
before = gc.get_threshold()
tune_collector()
print(gc.get_freeze_count() > 0, gc.get_threshold()[0], gc.get_threshold()[1:] == before[1:])
"""


def test_a_whole_process_freezes_what_it_started_with_and_spaces_young_collections() -> None:
    # In a process of its own: tuning the collector of the test run itself would change every later test.
    shown = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["True", str(GC_YOUNG_THRESHOLD), "True"]


# What each request makes and nothing keeps once it is done.
PER_REQUEST = {
    "Turn",
    "Driver",
    "Exchange",
    "Counted",
    "Prepared",
    "Response",
    "ResponseReader",
    "CancelledOnDisconnect",
}
REQUESTS: list[tuple[str, dict[str, object], dict[str, str]]] = [
    ("/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, {}),
    ("/responses", {"model": "gpt-4o", "input": "hi"}, {}),
    (
        "/messages",
        {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
        {"x-api-key": "k", "anthropic-version": "2023-06-01"},
    ),
]


def test_a_request_leaves_nothing_of_ours_for_the_garbage_collector(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """A request's objects are freed by reference counting as soon as it is done. One caught in a reference cycle
    (the turn and its suspended steps, a watch holding its owner's method) lives until a collection, and so does
    everything it holds: under load the collector then walked thousands of them again and again."""
    _, url = upstream
    with start_proxy(url) as proxy_url, httpx.Client(timeout=30) as client:

        def requests() -> None:
            for path, body, headers in REQUESTS:
                for stream in (False, True):
                    response = client.post(f"{proxy_url}{path}", json={**body, "stream": stream}, headers=headers)
                    assert response.status_code == 200, response.text
            assert client.get(f"{proxy_url}/models").status_code == 200  # a route passed through

        requests()  # what comes once: encodings, pools, connections
        gc.collect()
        gc.disable()  # an object in a cycle now stays for good
        try:
            requests()
            deadline = time.monotonic() + 10
            while left := alive(PER_REQUEST):  # the last request's objects go once the proxy has finished it
                assert time.monotonic() < deadline, left
                time.sleep(0.01)
        finally:
            gc.enable()


def alive(names: set[str]) -> Counter[str]:
    """The objects of these inflight classes that exist now."""
    found = (type(each) for each in gc.get_objects())
    return Counter(kind.__qualname__ for kind in found if kind.__qualname__ in names and ours(kind))


def ours(kind: type) -> bool:
    return kind.__module__.startswith("inflight.")

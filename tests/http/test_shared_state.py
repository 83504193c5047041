"""Proxies in separate processes sharing one store (a SQLite file, a redis-server): one summary per
conversation, the same bytes whichever proxy a turn reaches, and records that outlive a restart."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from inflight.records.resilient import RETRY_AFTER_S
from tests.http.test_background import TOOLS, conversation_at
from tests.http.test_responses import MODEL as RESPONSES_MODEL
from tests.http.test_responses import agent_items, compact
from tests.support.processes import ROOT, inflight, wait_for_port
from tests.support.redis import redis_server
from tests.support.servers import free_port, serve
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until

BUDGET = 6000


def config(state_url: str, *, jobs: int = 4) -> str:
    # A short note, so that a compacted turn lands under background_at and starts no second job.
    return (
        f"models: {{gpt-4o: {{context_window: 8000}}, {RESPONSES_MODEL}: {{context_window: 9000}}}}\n"
        f"compaction: {{summarize: {{max_summary_tokens: 256, max_concurrent_jobs: {jobs}}}}}\n"
        f'state: {{url: "{state_url}"}}\n'
    )


@pytest.fixture
def recording_upstream() -> Iterator[tuple[UpstreamApp, str]]:
    app = UpstreamApp()
    with serve(app) as url:
        yield app, url + "/v1"


@pytest.fixture(params=["sqlite", "redis"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/inflight.db"
    else:
        with redis_server() as url:
            yield url


def post(proxy_url: str, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
    return httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=30)


def jobs(proxy_url: str) -> dict[str, int]:
    return httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()["summary_jobs"]  # type: ignore[no-any-return]


def test_turns_alternating_between_two_proxies_get_one_summary_and_the_same_bytes(
    recording_upstream: tuple[UpstreamApp, str], state_url: str
) -> None:
    app, url = recording_upstream
    early, crossing = conversation_at(0.62), conversation_at(0.9)
    turns = [early, conversation_at(0.66), crossing, [*crossing, {"role": "user", "content": "Go on."}]]
    with inflight(url, config(state_url)) as one, inflight(url, config(state_url)) as two:
        proxies = [one, two]
        responses = []
        for number, messages in enumerate(turns):
            responses.append(post(proxies[number % 2], messages))
            if number == 0:
                wait_until(lambda: jobs(one)["landed"] == 1)
        time.sleep(0.5)
        counts = [jobs(proxy) for proxy in proxies]
    actions = [r.headers["x-inflight-actions"] for r in responses]
    assert actions[:2] == ["none", "none"]  # the second proxy found the summary made ahead: no job of its own
    assert "summary-precomputed" in actions[2] and "summary-cached" in actions[3]
    assert int(responses[2].headers["x-inflight-tokens-after"]) < 0.6 * BUDGET
    assert app.summary_count == 1 and sum(c["started"] for c in counts) == 1
    third, fourth = (request.json()["messages"] for request in app.chat_requests()[2:4])
    assert fourth[: len(third)] == third  # the second proxy sent the first one's compaction, byte for byte
    assert all("x-inflight-state" not in r.headers for r in responses)


def test_two_proxies_asked_at_once_make_one_summary(
    recording_upstream: tuple[UpstreamApp, str], state_url: str
) -> None:
    app, url = recording_upstream
    app.summarizer_delay = 1.0
    early = conversation_at(0.62)
    with inflight(url, config(state_url)) as one, inflight(url, config(state_url)) as two:
        threads = [threading.Thread(target=post, args=(proxy, early)) for proxy in (one, two) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wait_until(lambda: sum(jobs(p)["landed"] for p in (one, two)) == 1)
        counts = [jobs(proxy) for proxy in (one, two)]
    assert app.summary_count == 1 and sum(c["landed"] for c in counts) == 1
    # The other proxy's jobs found the lease taken and ended at once (one per burst of its requests).
    assert sum(c["elsewhere"] for c in counts) >= 1 and sum(c["failed"] for c in counts) == 0


def another_conversation_at(fraction: float) -> list[dict[str, Any]]:
    """`conversation_at(fraction)` with another task: another head, so another conversation."""
    messages = [dict(message) for message in conversation_at(fraction)]
    messages[1]["content"] = "Fix the flaky test in src/db.py."
    return messages


async def burst(proxies: list[str], messages: list[dict[str, Any]], count: int) -> list[httpx.Response]:
    """`count` requests of one conversation at once, spread over the proxies in turn."""
    body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
    async with httpx.AsyncClient(timeout=30) as client:
        sent = (client.post(f"{proxies[i % len(proxies)]}/chat/completions", json=body) for i in range(count))
        return await asyncio.gather(*sent)


def test_a_burst_over_two_proxies_makes_one_summary_even_when_a_job_waits_out_the_others(
    recording_upstream: tuple[UpstreamApp, str], state_url: str
) -> None:
    """20 first requests of one conversation at once, half to each proxy. The second proxy's job for it
    waits for a slot (another conversation's summary holds its only one) while the first proxy's job
    makes the summary and lands it: when its turn comes, the store has the summary, and no call is made.
    Before, it took the lease the first had let go and summarized the conversation a second time."""
    app, url = recording_upstream
    conversation, other = conversation_at(0.62), another_conversation_at(0.62)
    held = {"src/app.py": threading.Event(), "src/db.py": threading.Event()}  # the two conversations' tasks
    app.summarizer_holds = held
    with inflight(url, config(state_url)) as one, inflight(url, config(state_url, jobs=1)) as two:
        post(two, other)  # its summary holds the second proxy's only job slot until released
        wait_until(lambda: app.summary_count == 1)
        responses = asyncio.run(burst([one, two], conversation, 20))
        assert jobs(two)["queued"] == 1 and jobs(one)["running"] == 1  # both proxies found no summary in the store
        held["src/app.py"].set()
        wait_until(lambda: jobs(one)["landed"] == 1)
        held["src/db.py"].set()
        wait_until(lambda: jobs(two)["landed"] >= 1 and jobs(two)["queued"] + jobs(two)["running"] == 0)
        counts = [jobs(proxy) for proxy in (one, two)]
        # The next turn, on either proxy, finds the summary made ahead.
        crossing = post(two, conversation_at(0.9))
    assert [r.status_code for r in responses] == [200] * 20
    assert app.summary_count == 2  # the other conversation's, and this one's once
    assert counts[1].get("superseded") == 1 and sum(c["failed"] for c in counts) == 0
    assert "summary-precomputed" in crossing.headers["x-inflight-actions"].split(",")


def test_a_restarted_proxy_serves_the_next_turn_from_the_stored_record(
    recording_upstream: tuple[UpstreamApp, str], tmp_path: Path
) -> None:
    app, url = recording_upstream
    state_url = f"sqlite:///{tmp_path}/inflight.db"
    early, crossing = conversation_at(0.62), conversation_at(0.9)
    with inflight(url, config(state_url)) as proxy:
        post(proxy, early)
        wait_until(lambda: jobs(proxy)["landed"] == 1)
        before = post(proxy, crossing)
    with inflight(url, config(state_url)) as proxy:  # a new process on the same file
        after = post(proxy, [*crossing, {"role": "user", "content": "Go on."}])
    assert "summary-precomputed" in before.headers["x-inflight-actions"]
    assert "summary-cached" in after.headers["x-inflight-actions"]
    assert app.summary_count == 1  # no summarizer call after the restart
    sent_before, sent_after = (request.json()["messages"] for request in app.chat_requests()[1:3])
    assert sent_after[: len(sent_before)] == sent_before


def test_an_unreachable_redis_costs_no_request_and_is_said(recording_upstream: tuple[UpstreamApp, str]) -> None:
    _app, url = recording_upstream
    with inflight(url, config(f"redis://127.0.0.1:{free_port()}/0")) as proxy:
        untouched = post(proxy, conversation_at(0.62))  # far smaller ones never ask the store
        compacted = post(proxy, conversation_at(0.9))
    assert untouched.status_code == compacted.status_code == 200
    assert untouched.headers["x-inflight-state"] == compacted.headers["x-inflight-state"] == "degraded"
    assert int(compacted.headers["x-inflight-tokens-after"]) <= BUDGET  # compacted all the same, from memory


@contextmanager
def workers(upstream_url: str, state_url: str, count: int, *, port: int | None = None) -> Iterator[str]:
    port = port or free_port()
    config_file = Path(state_url.removeprefix("sqlite:///")).parent / "workers.yaml"
    config_file.write_text(config(state_url))
    command = [sys.executable, "-m", "inflight", "serve", "--config", str(config_file), "--port", str(port)]
    command += ["--upstream", upstream_url, "--workers", str(count)]
    with ExitStack() as stack:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(proc.wait, 30)
        stack.callback(proc.terminate)
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}/v1"


def test_workers_share_one_port_and_each_takes_connections(
    recording_upstream: tuple[UpstreamApp, str], tmp_path: Path
) -> None:
    _, url = recording_upstream
    with workers(url, f"sqlite:///{tmp_path}/inflight.db", 2) as proxy:
        deadline = time.monotonic() + 20
        pids: set[int] = set()
        while len(pids) < 2 and time.monotonic() < deadline:  # the second worker may still be starting
            pids.add(httpx.get(proxy.removesuffix("/v1") + "/inflight/stats").json()["worker_pid"])
        assert post(proxy, conversation_at(0.3)).status_code == 200
    assert len(pids) == 2


def test_more_than_one_worker_needs_a_shared_store() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inflight", "serve", "--workers", "2"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "state.url memory://" in result.stderr and "sqlite:///" in result.stderr


def worker_pids(proxy_url: str, wanted: int) -> set[int]:
    """The workers that answered, asked until `wanted` of them have (the last may still be starting)."""
    deadline, pids = time.monotonic() + 20, set[int]()
    while len(pids) < wanted and time.monotonic() < deadline:
        pids.add(httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()["worker_pid"])
    return pids


def test_workers_open_each_others_compaction_items(recording_upstream: tuple[UpstreamApp, str], tmp_path: Path) -> None:
    """With neither `responses.item_key` nor an upstream key, each worker sealed items with a key of its own: 7 of
    20 later turns sent "could not be read" upstream, while `x-inflight-actions` said `expanded`."""
    app, url = recording_upstream
    items = agent_items(20)
    with workers(url, f"sqlite:///{tmp_path}/inflight.db", 2) as proxy:
        assert len(worker_pids(proxy, 2)) == 2
        output = compact(proxy, items).json()["output"]
        body = {"model": RESPONSES_MODEL, "input": [*output, {"role": "user", "content": "Go on."}]}
        turns = [httpx.post(f"{proxy}/responses", json=body, timeout=30) for _ in range(20)]
    said = [turn.headers["x-inflight-actions"] for turn in turns]
    sent = [r.body.decode() for r in app.responses_requests()[-20:]]
    assert said == ["expanded"] * 20  # each turn a new connection: the kernel spreads them over both workers
    assert all("Summary number" in body and "could not be read" not in body for body in sent)


@pytest.mark.parametrize("count", [1, 2])
def test_a_busy_port_is_one_line_and_exit_2(count: int, tmp_path: Path) -> None:
    """Before: uvicorn's error and exit 3 for one worker, six tracebacks over 8 s for two."""
    config_file = tmp_path / "inflight.yaml"
    config_file.write_text(config(f"sqlite:///{tmp_path}/inflight.db"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "inflight", "serve", "--config", str(config_file), "--port", str(port)]
        result = subprocess.run(
            [*command, "--workers", str(count)], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"inflight: port {port} on 127.0.0.1 is in use (another inflight or another server listens there): "
        "stop it, or give this one another --port"
    ]


def test_a_second_proxy_with_workers_on_the_same_port_refuses_to_start(
    recording_upstream: tuple[UpstreamApp, str], tmp_path: Path
) -> None:
    """SO_REUSEPORT let a second `--workers 2` join the port silently and take part of the traffic."""
    _, url = recording_upstream
    port = free_port()
    with workers(url, f"sqlite:///{tmp_path}/inflight.db", 2, port=port) as proxy:
        first = worker_pids(proxy, 2)
        command = [sys.executable, "-m", "inflight", "serve", "--config", str(tmp_path / "workers.yaml")]
        command += ["--port", str(port), "--upstream", url, "--workers", "2"]
        second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
        stats = proxy.removesuffix("/v1") + "/inflight/stats"
        answered = {httpx.get(stats).json()["worker_pid"] for _ in range(40)}
    assert len(first) == 2 and answered <= first  # only the first proxy's workers take connections
    assert second.returncode == 2 and "is in use" in second.stderr and "Traceback" not in second.stderr


def test_a_conversation_compacted_while_redis_was_down_keeps_its_summary_and_prompt_once_it_is_back(
    recording_upstream: tuple[UpstreamApp, str],
) -> None:
    """Records kept in memory during the outage are carried over to Redis when it returns: the next turn is served
    from them (no second summary of the same span) and the prompt sent upstream is the one before, grown."""
    app, url = recording_upstream
    port = free_port()
    crossing = conversation_at(0.9)
    turns = [crossing, [*crossing, {"role": "user", "content": "Go on."}]]
    later = [*turns[1], {"role": "assistant", "content": "Done."}, {"role": "user", "content": "And now?"}]
    with inflight(url, config(f"redis://127.0.0.1:{port}/0")) as proxy:
        down = [post(proxy, messages) for messages in turns]
        summaries = app.summary_count
        with redis_server(port):
            time.sleep(RETRY_AFTER_S)  # at least this long after its failure, the store is tried again
            back = post(proxy, later)
    assert [r.headers["x-inflight-state"] for r in down] == ["degraded", "degraded"]
    assert back.status_code == 200 and back.headers.get("x-inflight-state") != "degraded"
    assert app.summary_count == summaries  # no summary made again
    assert "summary-cached" in back.headers["x-inflight-actions"].split(",")
    sent_before, sent_after = (request.json()["messages"] for request in app.chat_requests()[-2:])
    assert sent_after[: len(sent_before)] == sent_before

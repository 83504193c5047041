"""docker-compose.yml's topology without Docker: redis-server, two `inflight serve` replicas on it, and what
Prometheus would scrape from both.

The compose file and deploy/prometheus.yml are read, not copied: the replicas get the environment the
compose file gives them (the Redis host made a loopback port), and Prometheus must scrape exactly them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.http.test_background import TOOLS, conversation_at
from tests.support.processes import process
from tests.support.redis import redis_server
from tests.support.servers import free_port, serve
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
# The replicas' own settings: the compose file's state and item key (from the environment, as there), a
# small window so that a short conversation compacts.
CONFIG = (
    "models: {gpt-4o: {context_window: 8000}}\n"
    "compaction: {summarize: {max_summary_tokens: 256}}\n"
    "state: {url: '${INFLIGHT_STATE_URL}'}\n"
    "responses: {item_key: '${INFLIGHT_ITEM_KEY}'}\n"
)


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def replicas(services: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The inflight services (those built from this repository) and their environment."""
    return {name: service["environment"] for name, service in services.items() if service.get("build") == "."}


def test_the_compose_file_runs_two_replicas_on_its_redis_and_prometheus_scrapes_both() -> None:
    services = compose()["services"]
    inflight = replicas(services)
    assert len(inflight) == 2 and "redis" in services and "prometheus" in services
    assert {env["INFLIGHT_STATE_URL"] for env in inflight.values()} == {"redis://redis:6379/0"}
    assert all(
        service["depends_on"]["redis"]["condition"] == "service_healthy" for service in map(services.get, inflight)
    )
    mounted = services["prometheus"]["volumes"][0].split(":")
    scrape = yaml.safe_load((ROOT / mounted[0]).read_text())["scrape_configs"]
    targets = [target for job in scrape for config in job["static_configs"] for target in config["targets"]]
    assert sorted(targets) == sorted(f"{name}:8787" for name in inflight)
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in scrape)


@contextmanager
def replica(upstream_url: str, environment: dict[str, str], config: Path) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "inflight", "serve", "--config", str(config), "--port", str(port)]
    with process([*command, "--upstream", upstream_url], port, env=environment):
        yield f"http://127.0.0.1:{port}"


def scrape(base_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """`GET /metrics`, as Prometheus reads it: each sample by name and labels."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def local_environment(environment: dict[str, str], redis_url: str) -> dict[str, str]:
    """A replica's compose environment with the `redis` service's address made the local redis-server's."""
    state = environment["INFLIGHT_STATE_URL"].replace("redis://redis:6379", redis_url.rpartition("/")[0])
    return {**environment, "INFLIGHT_STATE_URL": state, "INFLIGHT_ITEM_KEY": "one-key-for-both-replicas"}


def test_one_conversation_alternating_between_two_replicas_on_redis(tmp_path: Path) -> None:
    """Turns of one conversation go to each replica in turn. The first replica makes the summary ahead
    and puts it in place at the crossing; the second serves the next turn from the record in Redis (the
    same compaction, no summarizer call). Their /metrics add up to one summary and two compactions."""
    app = UpstreamApp()
    config = tmp_path / "inflight.yaml"
    config.write_text(CONFIG)
    early, crossing = conversation_at(0.62), conversation_at(0.9)
    turns = [early, conversation_at(0.66), crossing, [*crossing, {"role": "user", "content": "Go on."}]]
    with ExitStack() as stack:
        upstream = stack.enter_context(serve(app)) + "/v1"
        redis_url = stack.enter_context(redis_server())
        environments = replicas(compose()["services"]).values()
        proxies = [
            stack.enter_context(replica(upstream, local_environment(env, redis_url), config)) for env in environments
        ]
        responses = []
        for number, messages in enumerate(turns):
            body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
            responses.append(httpx.post(f"{proxies[number % 2]}/v1/chat/completions", json=body, timeout=60))
            if number == 0:  # the first replica's summary made ahead lands in Redis before the next turn
                wait_until(lambda: total(scrape(proxies[0]), "inflight_summarizer_calls_total") == 1, timeout=60)
        one, two = (scrape(proxy) for proxy in proxies)
    assert [r.status_code for r in responses] == [200] * 4
    assert [r.headers["x-inflight-actions"] for r in responses] == [
        "none",
        "none",
        "summary-precomputed",
        "summary-cached",
    ]
    assert responses[3].headers["x-inflight-compaction-id"] == responses[2].headers["x-inflight-compaction-id"]
    third, fourth = (request.json()["messages"] for request in app.chat_requests()[2:4])
    assert fourth[: len(third)] == third  # the second replica sent the first one's compaction, byte for byte
    assert app.summary_count == 1
    # What Prometheus scrapes: each replica's own counts, which add up to the deployment's.
    for replica_metrics in (one, two):
        assert total(replica_metrics, "inflight_requests_total", route="/v1/chat/completions", status="200") == 2
    assert total(one, "inflight_compactions_total", action="summary-precomputed") == 1
    assert total(two, "inflight_compactions_total", action="summary-cached") == 1
    assert total(one, "inflight_compactions_total") + total(two, "inflight_compactions_total") == 2
    assert total(one, "inflight_summarizer_calls_total", outcome="ok") == 1
    assert (
        total(two, "inflight_summarizer_calls_total") == 0
        and total(two, "inflight_record_lookups_total", result="hit") >= 1
    )

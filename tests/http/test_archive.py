"""The archive through the proxy: turns and compactions kept, the JSON endpoints, the compaction id header."""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx
import orjson
import pytest

from inflight.compaction.conversation import pinned
from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.fixtures.refusals import REFUSALS
from tests.support.servers import free_port
from tests.support.upstream import Scripted, UpstreamApp
from tests.support.waiting import wait_until

# Budget 3000 (a quarter of the window is reserved); summaries made on the turn that needs one; compactions only
# once the window needs them (`goal: fit`), so that each is a summary.
SETTINGS: dict[str, Any] = {
    "models": {"gpt-4o": {"context_window": 4000}},
    "compaction": {"summarize": {"background_at": None}, "goal": "fit"},
    "archive": {"enabled": True},
}


def replay(proxy_url: str, turns: range, **headers: str) -> list[httpx.Response]:
    """The agent's conversation resent in full each turn, as an agent does, growing a step at a time."""
    with httpx.Client(base_url=proxy_url, timeout=30, headers=headers) as client:
        return [
            client.post(
                "/chat/completions", json={"model": "gpt-4o", "messages": agent_conversation(n, output_lines=5)}
            )
            for n in turns
        ]


def admin(proxy_url: str, path: str, key: str | None = None) -> httpx.Response:
    base = proxy_url.removesuffix("/v1")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.get(base + path, headers=headers, timeout=10)


def archived(proxy_url: str, path: str, *, until: Any = None, key: str | None = None) -> Any:
    """The endpoint's JSON once `until(json)` holds (writes go in the background: a moment after the reply, or
    seconds on a busy machine)."""
    deadline = time.monotonic() + 30
    while True:
        response = admin(proxy_url, path, key)
        if response.status_code == 200 and (until is None or until(response.json())):
            return response.json()
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: {response.status_code} {response.text[:300]}")
        time.sleep(0.025)


def test_each_turn_and_each_compaction_is_archived(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, **SETTINGS) as proxy_url:
        responses = replay(proxy_url, range(2, 62))
        assert all(r.status_code == 200 for r in responses)
        ids = [r.headers.get("x-inflight-compaction-id") for r in responses]
        actions = [r.headers["x-inflight-actions"] for r in responses]
        # Compacted responses say which compaction they carry; a record hit the id of the one it replays.
        assert all((i is None) == (a == "none") for i, a in zip(ids, actions, strict=True))
        made = [i for n, i in enumerate(ids) if i is not None and i not in ids[:n]]
        assert len(made) >= 2 and len(set(ids) - {None}) == len(made)

        listed = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
        (conversation,) = listed["conversations"]
        assert conversation["label"] == "gpt-4o" and conversation["model"] == "gpt-4o"
        view = archived(
            proxy_url, f"/inflight/conversations/{conversation['id']}", until=lambda j: j["turn_count"] == 60
        )
        turns = view["turns"]
        assert [t["n"] for t in turns] == list(range(1, 61))
        assert [t["tokens"] for t in turns] == [int(r.headers["x-inflight-tokens-before"]) for r in responses]
        assert [t["sent"] for t in turns] == [int(r.headers["x-inflight-tokens-after"]) for r in responses]
        assert all(t["budget"] == 3000 and t["window"] == 4000 and t["status"] == 200 for t in turns)
        assert [m["id"] for m in view["compactions"]] == made
        assert view["compaction_count"] == len(made)
        growth = view["average_growth"]
        steps = [b["tokens"] - a["tokens"] for a, b in zip(turns[-21:-1], turns[-20:], strict=True)]
        assert growth == pytest.approx(sum(steps) / 20, abs=0.1)
        assert turns[-1]["next_at"] == turns[-1]["summarize_at"]  # a record is in use: masking waits for it
        assert view["turns_left"] == max(0, int((turns[-1]["summarize_at"] - turns[-1]["sent"]) // growth))
        assert turns[0]["next_at"] == turns[0]["prune_at"]

        last = archived(proxy_url, f"/inflight/compactions/{made[-1]}", until=lambda j: j["dropped"])
    sent = app.chat_requests()[-1].json()["messages"]
    assert last["summary_as_sent"] == sent[2]["content"] and last["summary_kind"] == "summary"
    assert last["summary"].startswith("## Task") and "Summary number" in last["summary"]
    assert "## Ledger" not in last["summary"] and last["ledger"].startswith("## Ledger")
    messages = agent_conversation(2 + next(n for n, i in enumerate(ids) if i == made[-1]), output_lines=5)
    start, end = last["summarized"]
    for item in last["dropped"]:  # the client's own messages, as they were sent to the proxy
        assert item["message"] == messages[item["index"]]
        assert item["how"] in ("summarized", "masked", "truncated")
        assert (start <= item["index"] < end) == (item["how"] == "summarized")
    summarized = [item["index"] for item in last["dropped"] if item["how"] == "summarized"]
    assert summarized and summarized[-1] == end - 1


def test_a_session_is_its_own_conversation_and_named_by_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    with start_proxy(upstream[1], **SETTINGS) as proxy_url:
        replay(proxy_url, range(2, 5), **{"x-inflight-session": "agent <b>one</b>"})
        replay(proxy_url, range(2, 4))
        # Every turn written, not only both conversations begun (their turns land in the background, in any order).
        found = archived(
            proxy_url,
            "/inflight/conversations",
            until=lambda j: sorted(c["turn_count"] for c in j["conversations"]) == [2, 3],
        )
    labels = {c["label"]: c["turn_count"] for c in found["conversations"]}
    assert labels == {"agent <b>one</b>": 3, "gpt-4o": 2}
    assert all(c["id"].isalnum() for c in found["conversations"])


def test_the_endpoints_say_when_the_archive_is_off_or_an_id_is_unknown(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    with start_proxy(upstream[1], models=SETTINGS["models"]) as proxy_url:
        response = replay(proxy_url, range(60, 61))[0]
        assert "x-inflight-compaction-id" in response.headers  # the id is sent with the archive off too
        off = admin(proxy_url, "/inflight/conversations")
        assert off.status_code == 404 and "archive.enabled" in off.json()["error"]["message"]
    with start_proxy(upstream[1], **SETTINGS) as proxy_url:
        for path in ("/inflight/conversations/nope", "/inflight/compactions/nope"):
            missing = admin(proxy_url, path)
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        bad = admin(proxy_url, "/inflight/conversations?limit=0")
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


def test_the_archive_needs_an_admin_key_and_the_viewer_page_does_not(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    keys = {"access": {"keys": ["client-key"], "admin_keys": ["admin-key"]}, "upstream": {"api_key": "sk-up"}}
    with start_proxy(upstream[1], **SETTINGS, **keys) as proxy_url:
        replay(proxy_url, range(2, 4), authorization="Bearer client-key")
        assert admin(proxy_url, "/inflight/conversations").status_code == 401
        assert admin(proxy_url, "/inflight/conversations", "client-key").status_code == 401
        found = archived(proxy_url, "/inflight/conversations", key="admin-key", until=lambda j: j["conversations"])
        assert found["conversations"][0]["turn_count"] == 2
        page = admin(proxy_url, "/inflight/ui")  # static files, no data: the page asks for the key itself
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert admin(proxy_url, "/inflight/ui/viewer.js").status_code == 200
        assert admin(proxy_url, "/inflight/ui/secrets.txt").status_code == 404


def test_the_archive_outlives_a_restart_on_sqlite(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, tmp_path: Any
) -> None:
    state = {"state": {"url": f"sqlite:///{tmp_path}/inflight.db"}}
    with start_proxy(upstream[1], **SETTINGS, **state) as proxy_url:
        responses = replay(proxy_url, range(40, 44))
        archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
    compaction_id = responses[0].headers["x-inflight-compaction-id"]
    with start_proxy(upstream[1], **SETTINGS, **state) as proxy_url:
        entry = archived(proxy_url, f"/inflight/compactions/{compaction_id}")
        (listed,) = archived(proxy_url, "/inflight/conversations")["conversations"]
    assert entry["id"] == compaction_id and entry["dropped"]
    assert listed["turn_count"] == 4 and not any(pinned(d["message"]) for d in entry["dropped"])


def test_an_archive_store_that_fails_costs_no_request(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    nowhere = {"state": {"url": f"redis://127.0.0.1:{free_port()}/0"}}  # nothing listens there
    with start_proxy(upstream[1], **SETTINGS, **nowhere) as proxy_url:
        responses = replay(proxy_url, range(40, 43))
        assert [r.status_code for r in responses] == [200, 200, 200]
        assert all(r.headers["x-inflight-state"] == "degraded" for r in responses[1:])  # the records say so
        down = admin(proxy_url, "/inflight/conversations")
        assert down.status_code == 503 and down.json()["error"]["code"] == "archive_unavailable"
        failed = 'inflight_store_errors_total{store="archive"} '
        wait_until(lambda: failed in admin(proxy_url, "/metrics").text)  # the writes fail a moment after the replies
        metrics = admin(proxy_url, "/metrics").text
        assert float(metrics.split(failed)[1].split()[0]) >= 1


def test_summaries_made_in_the_background_are_archived_with_the_turn_that_used_them(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    background = {**SETTINGS, "compaction": {}}  # summaries made ahead (the default)
    with start_proxy(url, **background) as proxy_url:
        responses = []
        for n in range(2, 90):
            responses += replay(proxy_url, range(n, n + 1))
            for _ in range(100):  # the job a turn started lands before the next turn, as with a slower agent
                if not admin(proxy_url, "/inflight/stats").json()["summary_jobs"]["running"]:
                    break
                time.sleep(0.01)
        used = [r for r in responses if "summary-precomputed" in r.headers["x-inflight-actions"]]
        assert used, [r.headers["x-inflight-actions"] for r in responses]
        compaction_id = used[-1].headers["x-inflight-compaction-id"]
        entry = archived(proxy_url, f"/inflight/compactions/{compaction_id}")
    sent = [r.json()["messages"] for r in app.chat_requests() if r.json()["messages"][2:3]]
    assert "Summary number" in entry["summary"] and any(m[2]["content"] == entry["summary_as_sent"] for m in sent)
    assert entry["summary_kind"] == "summary" and "summary-precomputed" in entry["actions"].split(",")
    assert any(item["how"] == "summarized" for item in entry["dropped"])


def test_a_retried_turn_archives_what_both_attempts_dropped(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    refusal = REFUSALS[0]  # OpenAI's context_length_exceeded
    app.script.append(Scripted(status=refusal.status, body=orjson.dumps(refusal.body)))
    # By thresholds: the first attempt stops at `target`, so the retry has further to go (by cost it goes to its
    # floor at once, and the retry can only send it again).
    settings = {**SETTINGS, "compaction": {**SETTINGS["compaction"], "schedule": "thresholds"}}
    with start_proxy(url, **settings) as proxy_url:
        (response,) = replay(proxy_url, range(60, 61))
        assert response.headers["x-inflight-retried"] == "1"
        entry = archived(proxy_url, f"/inflight/compactions/{response.headers['x-inflight-compaction-id']}")
        view = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
    first, second = app.chat_requests()
    assert first.json()["messages"] != second.json()["messages"]  # both attempts were compacted
    summarized = [item["index"] for item in entry["dropped"] if item["how"] == "summarized"]
    assert summarized[0] == 2 and entry["summarized"] == [2, summarized[-1] + 1]  # from the head, not the first try
    assert view["conversations"][0]["turn_count"] == 1 and view["conversations"][0]["compaction_count"] == 1


def test_without_admin_keys_the_archive_answers_only_requests_addressed_to_localhost(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    with start_proxy(upstream[1], **SETTINGS) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        rebound = httpx.get(base + "/inflight/conversations", headers={"host": "attacker.example:8787"})
        assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "loopback_only"
        for host in ("localhost:8787", "127.0.0.1", "[::1]:8787"):
            assert httpx.get(base + "/inflight/conversations", headers={"host": host}).status_code == 200
    keys = {"access": {"admin_keys": ["admin-key"]}}
    with start_proxy(upstream[1], **SETTINGS, **keys) as proxy_url:  # with a key, any name will do
        headers = {"host": "inflight.internal", "authorization": "Bearer admin-key"}
        assert httpx.get(proxy_url.removesuffix("/v1") + "/inflight/conversations", headers=headers).status_code == 200


def test_prefix_rewrites_and_the_cached_share_are_measured_per_conversation(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Each turn says whether its compaction changed what had been sent before (as the upstream saw it), and what
    the prompt cache could serve of it; the conversation's view and the metrics add them up."""
    app, url = upstream
    with start_proxy(url, **SETTINGS) as proxy_url:
        responses = replay(proxy_url, range(2, 62))
        assert all(r.status_code == 200 for r in responses)
        sent = [r.json()["messages"] for r in app.chat_requests()]
        rewritten = [False] + [b[: len(a)] != a for a, b in itertools.pairwise(sent)]
        assert sum(rewritten) >= 1
        (conversation,) = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])[
            "conversations"
        ]
        view = archived(
            proxy_url, f"/inflight/conversations/{conversation['id']}", until=lambda j: j["turn_count"] == 60
        )
        assert [t["rewrite"] for t in view["turns"]] == rewritten
        assert view["rewrites_per_100_turns"] == round(100 * sum(rewritten) / 60, 1)
        assert all(t["cached"] <= t["sent"] for t in view["turns"]) and view["turns"][0]["cached"] == 0
        assert all(
            t["cached"] > t["sent"] * 0.5 for t, r in zip(view["turns"][1:], rewritten[1:], strict=True) if not r
        )
        assert 0.5 < view["cached_share"] < 1
        metrics = admin(proxy_url, "/metrics").text
    assert f"inflight_prefix_rewrites_total {float(sum(rewritten))}" in metrics
    assert "inflight_cached_share_count 60.0" in metrics

"""The viewer in a real browser (`tests.viewer.browser`), on conversations replayed through the proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, expect

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.http.test_archive import SETTINGS, archived, replay
from tests.support.retriever import RetrievingModel
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp
from tests.viewer.browser import open_viewer, origin

HOSTILE = '<img src="/x" onerror="document.title=1">'  # a session name is the client's text, shown as text


def test_a_marker_opens_the_summary_and_what_was_dropped(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, browser: Browser, tmp_path: Path
) -> None:
    with start_proxy(upstream[1], **SETTINGS) as proxy_url:
        replay(proxy_url, range(2, 4), **{"x-inflight-session": HOSTILE})
        replay(proxy_url, range(2, 62))
        listed = archived(proxy_url, "/inflight/conversations", until=lambda j: len(j["conversations"]) == 2)
        (conversation,) = [c for c in listed["conversations"] if c["label"] == "gpt-4o"]
        path = f"/inflight/conversations/{conversation['id']}"
        view = archived(proxy_url, path, until=lambda j: j["turn_count"] == 60)
        summarized = [c["id"] for c in view["compactions"] if "summarize" in c["actions"]][-1]
        entry: Any = archived(proxy_url, f"/inflight/compactions/{summarized}", until=lambda j: j["dropped"])

        viewer = open_viewer(browser, proxy_url)
        page = viewer.page
        expect(page.get_by_role("link", name=HOSTILE)).to_be_visible()  # as text: no <img> made of it
        page.get_by_role("link", name="gpt-4o").click()
        markers = page.locator("svg circle.marker")
        expect(markers).to_have_count(len(view["compactions"]))
        assert len(view["compactions"]) >= 3
        expect(page.locator("#detail")).to_be_hidden()

        page.locator(f'circle.marker[data-compaction="{summarized}"]').click()
        detail = page.locator("#detail")
        expect(detail.locator("pre.summary")).to_contain_text("Summary number")
        expect(detail.locator("pre.ledger")).to_contain_text("## Ledger")
        dropped = entry["dropped"][0]["message"]["content"]
        expect(detail.locator("ol.dropped")).to_contain_text(dropped)
        expect(page.locator(f'button[data-compaction="{summarized}"]')).to_have_attribute("aria-pressed", "true")
        page.screenshot(path=tmp_path / "viewer.png")

        page.go_back()  # the conversation without a compaction open, from the hash
        expect(detail).to_be_hidden()
        first = view["compactions"][0]  # and from the keyboard, by the list of compactions under the chart
        page.locator(f'button[data-compaction="{first["id"]}"]').focus()
        page.keyboard.press("Enter")
        expect(detail.locator("h2")).to_contain_text(f"Compaction at turn {first['n']}")
        expect(detail.locator("ol.dropped li").first).to_contain_text(first["actions"].split(",")[0])
        assert page.locator("img").count() == 0 and page.title() != "1"
        assert not viewer.elsewhere(origin(proxy_url)), viewer.requests
        assert not viewer.errors


def test_the_viewer_asks_for_the_admin_key_and_keeps_it_for_the_tab(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, browser: Browser
) -> None:
    keys = {"access": {"keys": ["client-key"], "admin_keys": ["admin-key"]}, "upstream": {"api_key": "sk-up"}}
    with start_proxy(upstream[1], **SETTINGS, **keys) as proxy_url:
        replay(proxy_url, range(2, 4), authorization="Bearer client-key")
        archived(proxy_url, "/inflight/conversations", key="admin-key", until=lambda j: j["conversations"])

        viewer = open_viewer(browser, proxy_url)
        page = viewer.page
        key = page.get_by_label("Key")
        expect(key).to_be_visible()
        key.fill("client-key")  # a client's key is not an admin key
        key.press("Enter")
        expect(page.locator("#key-error")).to_have_text("That key was refused.")
        key.fill("admin-key")
        page.get_by_role("button", name="Open the archive").click()
        expect(page.get_by_role("link", name="gpt-4o")).to_be_visible()
        expect(key).to_be_hidden()

        page.reload()  # sessionStorage: asked once a tab
        expect(page.get_by_role("link", name="gpt-4o")).to_be_visible()
        assert not viewer.elsewhere(origin(proxy_url)), viewer.requests
        # The browser logs each 401 it was answered; nothing else may go wrong.
        assert all("401" in error for error in viewer.errors), viewer.errors


def test_the_header_gives_the_cache_figures_and_churning_compactions_are_marked(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, browser: Browser
) -> None:
    """Turns of about a fifth of the budget each: too big for the window to space compactions four turns apart,
    so they churn; the viewer marks exactly those, and its header gives the rewrites and the cached share."""
    with start_proxy(upstream[1], **SETTINGS) as proxy_url:
        with httpx.Client(base_url=proxy_url, timeout=30) as client:
            for n in range(2, 30):
                messages = agent_conversation(n, output_lines=60)
                client.post("/chat/completions", json={"model": "gpt-4o", "messages": messages}).raise_for_status()
        (conversation,) = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])[
            "conversations"
        ]
        view = archived(
            proxy_url, f"/inflight/conversations/{conversation['id']}", until=lambda j: j["turn_count"] == 28
        )
        churned = [c for c in view["compactions"] if "churn" in c["actions"].split(",")]
        assert churned
        metrics = httpx.get(proxy_url.removesuffix("/v1") + "/metrics").text
        assert f'inflight_compactions_total{{action="churn"}} {float(len(churned))}' in metrics
        assert view["rewrites_per_100_turns"] > 0 and 0 < view["cached_share"] < 1

        viewer = open_viewer(browser, proxy_url)
        page = viewer.page
        page.get_by_role("link", name="gpt-4o").click()
        facts = page.locator("p.facts")
        expect(facts).to_contain_text(f"prefix rewrites {view['rewrites']} (")
        expect(facts).to_contain_text("per 100 turns)")
        expect(facts).to_contain_text(f"cached share (estimated) {round(view['cached_share'] * 100)}%")
        expect(facts).to_contain_text(f"churn {len(churned)} compactions left too few turns before the next")
        expect(page.locator("svg circle.marker.churn")).to_have_count(len(churned))
        expect(page.locator("button.churn")).to_have_count(len(churned))
        for compaction in churned:
            expect(page.locator(f'circle.marker[data-compaction="{compaction["id"]}"]')).to_have_class("marker churn")
        assert not viewer.errors


def test_a_conversation_says_how_much_its_model_read_back(start_proxy: ProxyFactory, browser: Browser) -> None:
    app = UpstreamApp()
    app.retriever = RetrievingModel()
    messages = agent_conversation(12, output_lines=60)
    body = {"model": "gpt-4o", "messages": messages, "tools": [{"type": "function", "function": {"name": "bash"}}]}
    settings = {"models": {"gpt-4o": {"context_window": 8000}}, "archive": {"enabled": True}}
    with serve(app) as url, start_proxy(url + "/v1", **settings) as proxy_url:
        assert httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=30).status_code == 200
        listed = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
        (conversation,) = listed["conversations"]
        archived(proxy_url, f"/inflight/conversations/{conversation['id']}", until=lambda j: j["turns"])
        viewer = open_viewer(browser, proxy_url)
        viewer.page.get_by_role("link", name="gpt-4o").click()
        expect(viewer.page.locator("p.facts")).to_contain_text("read back 1 original (inflight_retrieve)")
        assert not viewer.errors

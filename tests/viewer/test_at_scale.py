"""The viewer at scale, in Chromium: from one compaction to three hundred, from a conversation inside the window
to one of eighty windows, its labels never overlap, what was sent keeps a fair share of the chart, the list of
compactions stays a row and the detail opens in view. And shadow compactions are marked as such.

The conversations are written into a real SQLite archive (`tests.viewer.synthetic`) and served by the real
app. With INFLIGHT_SCREENSHOT set, the 240k-token conversation with a compaction open is saved there at
1280x800: README's docs/viewer.png comes from `INFLIGHT_SCREENSHOT=docs/viewer.png pytest tests/viewer -k 240k`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp
from tests.viewer.browser import Viewer, open_viewer
from tests.viewer.synthetic import Archived, Shape, archive

WINDOW = 16_000
VIEWPORT = {"width": 1280, "height": 800}
LONG = Shape("agent, 240k tokens", window=WINDOW, turns=300, growth=800)  # 240,857 tokens, 58 compactions
ONE = Shape("agent, one compaction", window=WINDOW, turns=14, growth=800)
MANY = Shape("agent, 300 compactions", window=WINDOW, turns=1300, growth=1000)  # 1.3M tokens, 299 compactions

# Every box the page draws text in, with its text: the chart's, the legend's, the list of compactions'.
BOXES = """() => {
  const box = (node) => {
    const r = node.getBoundingClientRect();
    return { left: r.left, top: r.top, right: r.right, bottom: r.bottom, text: node.textContent };
  };
  const all = (selector) => [...document.querySelectorAll(selector)].map(box);
  const svg = document.querySelector("figure.chart svg");
  return {
    chart: all("svg text"), legend: all(".legend li"), list: all("nav.compactions > *"), svg: box(svg),
    plot: box(document.querySelector("rect.plot-sent") ?? svg), sent: all("polyline.curve-sent"),
    client: all("rect.plot-client"),
  };
}"""


@contextmanager
def archived_proxy(
    start_proxy: ProxyFactory, upstream_url: str, tmp_path: Path, shapes: list[Shape]
) -> Iterator[tuple[str, list[Archived]]]:
    """The proxy serving an archive that holds `shapes`' conversations."""
    path = tmp_path / "inflight.db"
    written = archive(str(path), shapes)
    settings: dict[str, Any] = {
        "models": {"gpt-4o": {"context_window": WINDOW}},
        "state": {"url": f"sqlite:///{path}"},
        "archive": {"enabled": True},
    }
    with start_proxy(upstream_url, **settings) as proxy_url:
        yield proxy_url, written


def open_conversation(browser: Browser, proxy_url: str, conversation: Archived) -> Viewer:
    viewer = open_viewer(browser, proxy_url, **VIEWPORT, path=f"#/c/{conversation.id}")
    expect(viewer.page.locator("svg circle.marker")).to_have_count(len(conversation.compactions))
    return viewer


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of boxes that overlap (by more than a rounding's half pixel)."""
    return [
        (a["text"], b["text"])
        for a, b in itertools.combinations(boxes, 2)
        if min(a["right"], b["right"]) - max(a["left"], b["left"]) > 0.5
        and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 0.5
    ]


def inside(box: dict[str, Any], frame: dict[str, Any]) -> bool:
    return bool(
        box["left"] >= frame["left"]
        and box["right"] <= frame["right"]
        and box["top"] >= frame["top"]
        and box["bottom"] <= frame["bottom"]
    )


def check_readable(page: Page) -> dict[str, Any]:
    """No label overlaps another or leaves the chart; the list of compactions is one row. Returns the boxes."""
    boxes: dict[str, Any] = page.evaluate(BOXES)
    assert overlapping(boxes["chart"]) == []
    assert [b["text"] for b in boxes["chart"] if not inside(b, boxes["svg"])] == []
    assert overlapping(boxes["legend"]) == []
    assert overlapping(boxes["list"]) == []
    assert max(b["top"] for b in boxes["list"]) < min(b["bottom"] for b in boxes["list"])  # all on one row
    return boxes


def sent_share(boxes: dict[str, Any]) -> float:
    """The height the sent line spans, over the height of its panel."""
    top = min(b["top"] for b in boxes["sent"])
    bottom = max(b["bottom"] for b in boxes["sent"])
    return float((bottom - top) / (boxes["plot"]["bottom"] - boxes["plot"]["top"]))


def open_in_view(page: Page, conversation: Archived, index: int) -> None:
    """The conversation's `index`th compaction opened, its detail's heading within the viewport."""
    compaction = conversation.compactions[index]
    expect(page.locator("#detail h2")).to_contain_text(f"Compaction at turn {conversation.turn_of(compaction)}")
    expect(page.locator(f'#compactions button[data-compaction="{compaction["id"]}"]')).to_have_attribute(
        "aria-pressed", "true"
    )
    top = page.evaluate("document.getElementById('detail').getBoundingClientRect().top")
    assert 0 <= top <= VIEWPORT["height"] - 80


def test_a_240k_token_conversation_over_a_16k_window_with_58_compactions_stays_readable(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, browser: Browser, tmp_path: Path
) -> None:
    with archived_proxy(start_proxy, upstream[1], tmp_path, [LONG]) as (proxy_url, (conversation,)):
        assert conversation.tokens > 15 * WINDOW and len(conversation.compactions) == 58
        viewer = open_conversation(browser, proxy_url, conversation)
        page = viewer.page
        boxes = check_readable(page)
        # What was sent is scaled to the window (it used to be squeezed into 6% of the chart under the client's
        # 240k tokens): it spans most of its panel, and the client's tokens have a panel of their own.
        assert sent_share(boxes) > 0.4
        assert len(boxes["client"]) == 1
        expect(page.locator("svg text.client-label").last).to_have_text("240,857")
        labels = page.locator("svg text.limit-label")
        for name in ("window 16,000", "budget 12,000", "summarize at", "prune at", "background at", "target"):
            expect(labels.filter(has_text=name)).to_have_count(1)

        # A row of the compactions at a time, the rest a click away.
        chips = page.locator("#compactions button.chip")
        shown = chips.count()
        assert 10 < shown < 58
        expect(page.locator("#compactions")).to_contain_text(f"Compactions 1\N{EN DASH}{shown} of 58")
        page.get_by_role("button", name="Later compactions").click()
        expect(chips.first).to_have_text(str(conversation.turn_of(conversation.compactions[shown])))

        # A marker far along opens its compaction, its page of the list and the detail, in view.
        middle = conversation.compactions[29]
        page.locator(f'circle.marker[data-compaction="{middle["id"]}"]').click()
        open_in_view(page, conversation, 29)
        check_readable(page)
        page.screenshot(path=os.environ.get("INFLIGHT_SCREENSHOT") or tmp_path / "viewer.png")

        page.get_by_role("button", name="Next compaction").click()
        open_in_view(page, conversation, 30)
        expect(page.locator(".shadow-note")).to_have_count(0)
        expect(page.locator(".shadow")).to_have_count(0)
        assert not viewer.errors


@pytest.mark.parametrize("shape", [ONE, MANY], ids=["one compaction", "300 compactions"])
def test_one_compaction_and_three_hundred_stay_readable(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, browser: Browser, tmp_path: Path, shape: Shape
) -> None:
    with archived_proxy(start_proxy, upstream[1], tmp_path, [shape]) as (proxy_url, (conversation,)):
        viewer = open_conversation(browser, proxy_url, conversation)
        page = viewer.page
        boxes = check_readable(page)
        assert sent_share(boxes) > 0.3
        # Inside the window, the client's tokens share the sent line's scale; eighty windows long, they do not.
        assert len(boxes["client"]) == (0 if conversation.tokens < WINDOW else 1)
        page.locator(f'#compactions button[data-compaction="{conversation.compactions[0]["id"]}"]').click()
        open_in_view(page, conversation, 0)
        check_readable(page)
        if len(conversation.compactions) > 1:  # the last one, pages away, from the one before it by its link
            last = len(conversation.compactions) - 1
            page.goto(page.url.rpartition("/")[0] + f"/{conversation.compactions[last - 1]['id']}")
            page.get_by_role("button", name="Next compaction").click()
            open_in_view(page, conversation, last)
            check_readable(page)
        assert not viewer.errors


def test_shadow_compactions_are_marked_planned_not_sent(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, browser: Browser, tmp_path: Path
) -> None:
    """Turns past the 40th in shadow (`x-inflight-compaction: shadow`): their compactions hollow and dashed, the
    line of what would have been sent dashed, and the detail says the upstream got the request unchanged."""
    shape = Shape("agent, half in shadow", window=WINDOW, turns=80, growth=800, shadow_after=40)
    with archived_proxy(start_proxy, upstream[1], tmp_path, [shape]) as (proxy_url, (conversation,)):
        shadows = [c for c in conversation.compactions if c.get("shadow")]
        assert 0 < len(shadows) < len(conversation.compactions)
        viewer = open_conversation(browser, proxy_url, conversation)
        page = viewer.page
        check_readable(page)
        expect(page.locator("circle.marker.shadow")).to_have_count(len(shadows))
        expect(page.locator("#compactions button.shadow")).to_have_count(len(shadows))
        expect(page.locator("polyline.curve-sent.shadow")).to_have_count(1)
        expect(page.locator("polyline.curve-sent:not(.shadow)")).to_have_count(1)
        expect(page.locator(".legend")).to_contain_text("shadow: planned, not sent")
        expect(page.locator("p.facts")).to_contain_text(f"shadow {len(shadows)} compactions planned, not sent")

        page.locator(f'circle.marker[data-compaction="{shadows[0]["id"]}"]').click()
        expect(page.locator("#detail .shadow-note")).to_have_text(
            "shadow: planned, not sent — the upstream got the client's request unchanged"
        )
        page.get_by_role("button", name="Previous compaction").click()  # the last one sent
        expect(page.locator("#detail h2")).to_be_visible()
        expect(page.locator("#detail .shadow-note")).to_have_count(0)
        assert not viewer.errors

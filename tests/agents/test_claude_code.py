"""The real Claude Code CLI against the fake Messages API, whose window its 30-step task outgrows.

Without inflight, and without its own compaction, Claude Code dies around step 10 ("Prompt is too
long"): its first request alone is about 19k tokens (the system prompt and 12 tools). With a large
window it finishes every step, and the fake, which verifies every thinking block it gets back,
every tool call's result and the cache breakpoints, refuses nothing: the fake is faithful to what
Claude Code sends. With its own compaction on, Claude Code answers a refusal by compacting (a
summary request with its tools still offered) and goes on. The share of prompt tokens the fake's
simulated prompt cache served is printed.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.agents.claude_code import run_claude
from tests.agents.installed import required_binary
from tests.conftest import ProxyFactory
from tests.support.messages import COMPACTION_REQUEST, MessagesTaskAgent
from tests.support.responses import TASK_MARKER, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

BINARY = required_binary("claude", "INFLIGHT_CLAUDE", agent="Claude Code", package="@anthropic-ai/claude-code")

STEPS = 30
OUTPUT_LINES = 170  # each step: about 3.7k tokens
WINDOW = 55_000  # outgrown at step 10
LARGE_WINDOW = 1_000_000
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
MODEL = "claude-sonnet-4-5"  # thinking with a budget; its reminders are user text
# Adaptive thinking and effort; its reminders go first in a `system` message inside `messages` (under a beta),
# and as user text once refused
NEWER_MODEL = "claude-opus-5-5"


def fake_upstream(model: str, window: int, *, system_messages: bool = False) -> UpstreamApp:
    app = UpstreamApp(windows={model: window})
    app.messages.agent = MessagesTaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    app.messages.system_messages = system_messages
    return app


def steps_done(app: UpstreamApp) -> int:
    """The highest step whose output reached the upstream: how far Claude Code got."""
    return last_step(app.messages_requests()[-1].body.decode(), STEPS)


def report(app: UpstreamApp, label: str) -> None:
    fake = app.messages
    print(
        f"\n{label}: {len(app.messages_requests())} requests, {fake.refused} refused, "
        f"cached share {app.cached_share():.1%} (inflight's {len(app.summaries)} summaries in it)"
    )


def test_claude_code_alone_runs_out_of_room() -> None:
    assert BINARY is not None
    app = fake_upstream(MODEL, WINDOW)
    with serve(app) as url:
        run = run_claude(BINARY, url, PROMPT, model=MODEL, own_compaction=False, timeout_s=120)
    assert run.returncode != 0 and "FINISHED" not in run.output
    assert "Prompt is too long" in run.output
    assert app.messages.refused == 1 and 8 <= steps_done(app) <= 12
    assert app.messages.rejected == []
    report(app, f"{MODEL} alone, window {WINDOW}")


@pytest.mark.parametrize(
    ("model", "system_messages"),
    [(MODEL, False), (NEWER_MODEL, True)],
    ids=["thinking-budget", "adaptive-system-messages"],
)
def test_claude_code_finishes_every_step_in_a_large_window(model: str, system_messages: bool) -> None:
    assert BINARY is not None
    app = fake_upstream(model, LARGE_WINDOW, system_messages=system_messages)
    with serve(app) as url:
        run = run_claude(BINARY, url, PROMPT, model=model, own_compaction=False, timeout_s=120)
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    assert steps_done(app) == STEPS
    assert app.messages.rejected == []  # thinking verbatim, every call with its result, at most 4 breakpoints
    assert app.messages.refused == 0
    roles = {message["role"] for request in app.messages_requests() for message in request.json()["messages"]}
    assert ("system" in roles) == system_messages
    report(app, f"{model} alone, window {LARGE_WINDOW}")


def test_claude_code_sends_its_reminders_as_user_text_once_system_messages_are_refused() -> None:
    assert BINARY is not None
    app = fake_upstream(NEWER_MODEL, LARGE_WINDOW, system_messages=False)
    with serve(app) as url:
        run = run_claude(BINARY, url, PROMPT, model=NEWER_MODEL, own_compaction=False, timeout_s=120)
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    assert len(app.messages.rejected) == 1 and 'Unexpected role "system"' in app.messages.rejected[0]
    first, *rest = app.messages_requests()
    assert "system" in {message["role"] for message in first.json()["messages"]}
    assert all(message["role"] != "system" for request in rest for message in request.json()["messages"])


def test_claude_code_compacts_itself_on_a_refusal_when_its_compaction_is_on() -> None:
    assert BINARY is not None
    app = fake_upstream(MODEL, WINDOW)
    with serve(app) as url:
        run = run_claude(BINARY, url, PROMPT, model=MODEL, own_compaction=True, timeout_s=120)
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    compactions = [r for r in app.messages_requests() if COMPACTION_REQUEST in r.body.decode()]
    assert app.messages.refused >= 1 and len(compactions) == app.messages.refused  # one per refusal, none ahead
    assert app.messages.rejected == []
    report(app, f"{MODEL} with its own compaction, window {WINDOW}")


def breakpoints(body: dict[str, Any]) -> int:
    """The request's `cache_control` blocks: on the system, the tools, the content blocks and their parts."""

    def count(value: Any) -> int:
        if isinstance(value, list):
            return sum(count(item) for item in value)
        if not isinstance(value, dict):
            return 0
        return (value.get("cache_control") is not None) + count(value.get("content"))

    return count(body.get("system")) + count(body.get("tools")) + count(body.get("messages"))


@pytest.mark.parametrize(
    ("model", "told", "own_compaction", "context_management", "in_stream"),
    [
        (MODEL, False, False, True, False),
        (MODEL, True, False, True, False),
        (MODEL, False, True, True, False),
        (NEWER_MODEL, True, True, True, False),
        (MODEL, False, False, False, False),
        (MODEL, False, False, True, True),
    ],
    ids=[
        "learned",
        "told",
        "learned-own-compaction-on",
        "newer-model-told-own-compaction-on",
        "learned-upstream-without-context-management",
        "learned-refusal-in-the-stream",
    ],
)
def test_claude_code_finishes_every_step_through_inflight(
    start_proxy: ProxyFactory, model: str, told: bool, own_compaction: bool, context_management: bool, in_stream: bool
) -> None:
    """Compacted before any refusal reaches it, with its own compaction off or on; over an upstream that
    refuses the `context_management` Claude Code always sends, inflight takes the field over; a refusal that
    comes as the stream's `error` event is learned from as one over HTTP."""
    assert BINARY is not None
    app = fake_upstream(model, WINDOW, system_messages=model == NEWER_MODEL)
    app.messages.supports_context_management = context_management
    app.messages.refusal_in_stream = in_stream
    models = {model: {"context_window": WINDOW}} if told else {}
    with serve(app) as url, start_proxy(f"{url}/v1", models=models) as proxy_url:
        run = run_claude(
            BINARY, proxy_url.removesuffix("/v1"), PROMPT, model=model, own_compaction=own_compaction, timeout_s=300
        )
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    assert "Prompt is too long" not in run.output  # Claude Code never saw a refusal
    assert steps_done(app) == STEPS
    requests = app.messages_requests()
    # every thinking block verbatim, every tool_use with its result; the field refused once, if it is
    assert app.messages.rejected == (
        [] if context_management else ["context_management: Extra inputs are not permitted"]
    )
    assert all(breakpoints(r.json()) <= 4 for r in requests)
    assert len({orjson.dumps(r.json()["system"]) for r in requests}) == 1  # `system` never touched
    assert not [r for r in requests if COMPACTION_REQUEST in r.body.decode()]  # it never summarized by itself
    assert app.messages.refused == (0 if told else 1)  # learned once, from the first refusal
    cached = app.cached_share()  # the summaries inflight asked for count too
    report(app, f"{model} through inflight, window {WINDOW}, told={told}, own compaction={own_compaction}")
    assert cached >= 0.70

"""Context windows, budgets and calibration: the registry alone, then through a proxy on loopback."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallParam,
    ChatCompletionToolParam,
)

from inflight.config import load_settings
from inflight.formats.chat_completions import output_limit
from inflight.policy.windows import ContextRegistry, parse_model_list, reserve_for
from inflight.tokens import TokenCounter
from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello world"}]  # 9 tokens


def registry(**overrides: Any) -> ContextRegistry:
    return ContextRegistry(load_settings(None, overrides=overrides))


def test_an_exact_name_beats_a_glob_and_config_beats_everything() -> None:
    models = {"gpt-4o*": {"context_window": 1000}, "gpt-4o-mini": {"context_window": 2000}}
    reg = registry(models=models)
    assert reg.resolve("gpt-4o-mini").context_window == 2000
    assert reg.resolve("gpt-4o-2024-08-06").context_window == 1000
    reg.learn("gpt-4o-2024-08-06", 500)
    assert reg.resolve("gpt-4o-2024-08-06").source == "config"


def test_learned_beats_the_builtin_table_which_beats_the_default() -> None:
    reg = registry(default_context_window=5000)
    assert (reg.resolve("gpt-4o").context_window, reg.resolve("gpt-4o").source) == (128_000, "builtin")
    assert reg.resolve("meta-llama/Llama-3.1-8B-Instruct").context_window == 131_072
    assert reg.resolve("my-finetune").context_window == 5000
    reg.learn("gpt-4o", 4096)
    assert (reg.resolve("gpt-4o").context_window, reg.resolve("gpt-4o").source) == (4096, "learned")
    reg.learn("gpt-4o", 1000, tenant="a")  # one client's refusal is that client's alone
    assert reg.resolve("gpt-4o", tenant="a").context_window == 1000
    assert reg.resolve("gpt-4o", tenant="b").source == "builtin" and reg.resolve("gpt-4o").context_window == 4096


def test_model_lists_from_vllm_llamacpp_and_openrouter_name_their_windows() -> None:
    body = (
        b'{"object":"list","data":[{"id":"qwen","max_model_len":32768},'
        b'{"id":"gguf","meta":{"n_ctx":4096,"n_ctx_train":131072}},'
        b'{"id":"router/x","context_length":200000},{"id":"gpt-4o"}]}'
    )
    assert parse_model_list(body) == {"qwen": 32768, "gguf": 4096, "router/x": 200000}
    assert parse_model_list(b"not json") == {}


@pytest.mark.parametrize(
    ("payload", "window", "reserve"),
    [
        ({"max_completion_tokens": 1000}, 128_000, 1000),
        ({"max_tokens": 700}, 128_000, 700),
        ({"max_completion_tokens": 900, "max_tokens": 700}, 128_000, 900),
        ({}, 128_000, 16_384),
        ({}, 8_000, 2_000),  # the configured reserve never takes more than a quarter of the window
        ({"max_tokens": None}, 8_000, 2_000),
    ],
)
def test_reserve_is_the_requested_output_else_the_capped_default(
    payload: dict[str, Any], window: int, reserve: int
) -> None:
    assert reserve_for(output_limit(payload), reserve_tokens=16_384, context_window=window) == reserve


def test_responses_carry_the_estimate_window_and_budget(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _app, url = upstream
    with start_proxy(url, models={"gpt-4o": {"context_window": 10_000}}) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json={"model": "gpt-4o", "messages": MESSAGES})
        assert response.status_code == 200
        assert response.headers["x-inflight-prompt-tokens"] == "9"
        assert response.headers["x-inflight-context-window"] == "10000"
        assert response.headers["x-inflight-budget"] == str(10_000 - 2_500)
        body = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 100}
        response = httpx.post(f"{proxy_url}/chat/completions", json=body)
        assert response.headers["x-inflight-budget"] == "9900"


def test_windows_are_discovered_from_the_upstream_model_list(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.models_body = {"object": "list", "data": [{"id": "served", "max_model_len": 6000}]}
    with start_proxy(url) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-client", max_retries=0)
        for _ in range(3):
            raw = client.chat.completions.with_raw_response.create(model="served", messages=MESSAGES)
            assert raw.headers["x-inflight-context-window"] == "6000"
    listing = [r for r in app.requests if r.path == "/v1/models"]
    assert len(listing) == 1  # discovered once, then cached
    assert listing[0].headers["authorization"] == "Bearer sk-client"
    assert "content-length" not in listing[0].headers


def test_calibration_converges_on_what_the_upstream_reports(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.prompt_tokens = 18  # twice our o200k estimate of 9 for this model's own tokenizer
    with start_proxy(url) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        first = client.chat.completions.with_raw_response.create(model="local-llama", messages=MESSAGES)
        assert first.headers["x-inflight-prompt-tokens"] == "9"
        stream = client.chat.completions.create(
            model="local-llama",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        assert [chunk for chunk in stream][-1].usage is not None  # the usage chunk was relayed untouched
        later = client.chat.completions.with_raw_response.create(model="local-llama", messages=MESSAGES)
        assert later.headers["x-inflight-prompt-tokens"] == "18"
        # A model with a tiktoken encoding is counted exactly and never calibrated.
        exact = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        assert exact.headers["x-inflight-prompt-tokens"] == "9"
        stats = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()
    learned = stats["calibration"]["local-llama"]
    assert learned["samples"] == 3 and learned["message_share"] == round(6 / 9, 4)  # 3 of our 9: the reply priming
    # Every sample held that share: the ratios meet them there, however they split it between text and priming.
    share = learned["message_share"]
    assert learned["ratio"] * share + learned["fixed_ratio"] * (1 - share) == pytest.approx(2.0, abs=1e-3)


def test_calibration_learns_a_template_that_leaves_the_tools_out(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """The upstream counts 1.3 tokens for each of ours of message text, 12 of its own framing, and none of the
    tools (llama.cpp's SmolLM2 template): a first turn that is mostly tools no longer drags the later turns."""
    app, url = upstream
    app.prompt_tokens_template = (12, 1.3)
    parameters: dict[str, object] = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools: list[ChatCompletionToolParam] = [  # the e2e agent's: about 60 tokens as OpenAI renders them
        {"type": "function", "function": {"name": name, "description": f"{name} on a path", "parameters": parameters}}
        for name in ("read_file", "run_tests")
    ]
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    estimates, actuals = [], []
    with start_proxy(url) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        for turn in range(6):
            raw = client.chat.completions.with_raw_response.create(model="local-llama", messages=messages, tools=tools)
            usage = raw.parse().usage
            assert usage is not None
            estimates.append(int(raw.headers["x-inflight-prompt-tokens"]))
            actuals.append(usage.prompt_tokens)
            call: ChatCompletionMessageToolCallParam = {
                "id": f"c{turn}",
                "type": "function",
                "function": {"name": "tool_0", "arguments": "{}"},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            output = "\n".join(
                f"src/module_{turn}.py:{line}: def handler_{line}(request): return None"
                for line in range(40 * (turn + 1))
            )
            messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": output})
        stats = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()["calibration"]["local-llama"]
    first = actuals[0] / estimates[0]  # uncalibrated: the first estimate is our own count
    assert first < 0.5  # mostly tools the template drops: the sample an average of ratios let drag the rest
    ours = TokenCounter().count_request({"messages": messages[:4], "tools": tools}, "o200k_base").total
    second_by_average = round(first * ours)  # what the one ratio learned would have made of the second turn
    assert abs(estimates[1] - actuals[1]) < abs(second_by_average - actuals[1]) / 2
    for estimate, actual in zip(estimates[2:], actuals[2:], strict=True):  # two shares seen: the line is known
        assert estimate == pytest.approx(actual, rel=0.01)
    assert stats["ratio"] == pytest.approx(1.3, abs=0.01) and stats["fixed_ratio"] < 0.5  # the tools, dropped
    assert stats["samples"] == 6


async def test_a_model_resolved_before_discovery_gets_the_discovered_window_after_it() -> None:
    """The registry keeps the model it resolved last; discovery must not leave the default window in place."""
    windows = registry()
    before = windows.resolve("served-model")
    assert before.source == "default"

    async def model_list() -> bytes:
        return b'{"object": "list", "data": [{"id": "served-model", "max_model_len": 6000}]}'

    await windows.discover(model_list)
    after = windows.resolve("served-model")
    assert (after.context_window, after.source) == (6000, "discovered")
    windows.learn("served-model", 5000, tenant="t1")
    assert windows.resolve("served-model", tenant="t1").context_window == 5000
    assert windows.resolve("served-model", tenant="t2").context_window == 6000

"""Context windows, budgets and calibration: the registry alone, then through a proxy on loopback."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from proxy.config import load_settings
from proxy.formats.chat_completions import output_limit
from proxy.policy.windows import ContextRegistry, parse_model_list, reserve_for
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
    assert stats["calibration"]["local-llama"] == {"ratio": 2.0, "samples": 3}

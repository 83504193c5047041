"""Counting: the formula on hand-checked cases, offline loading, and agreement with a reference."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import tiktoken
import xxhash
from openai_messages_token_helper.function_format import format_function_definitions

from inflight.tokens import TokenCounter, choose_encoding
from inflight.tokens.encodings import SPECS, EncodingFileError, parse_ranks

TRACES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "traces").glob("*.json"))
RANK_FILES = Path(__file__).resolve().parents[2] / "inflight" / "tokens" / "encodings"
TIKTOKEN_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def png_data_url(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height)
    return "data:image/png;base64," + base64.b64encode(header + b"\x08\x02\x00\x00\x00\x00\x00\x00\x00").decode()


def count(messages: list[dict[str, Any]], **fields: Any) -> int:
    return TokenCounter().count_request({"model": "gpt-4o", "messages": messages, **fields}, "o200k_base").total


def test_a_user_message_is_framing_role_and_text() -> None:
    # 3 reply priming + 3 framing + "user" (1) + "hello world" (2)
    assert count([{"role": "user", "content": "hello world"}]) == 9


def test_a_name_costs_its_tokens_plus_one() -> None:
    assert count([{"role": "user", "name": "bob", "content": "hello world"}]) == 11


def test_tool_calls_and_results_count_names_arguments_and_ids() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}}
    messages: list[dict[str, Any]] = [
        # framing 3 + "assistant" 1 + call (3 + "read_file" 2 + arguments 6)
        {"role": "assistant", "content": None, "tool_calls": [call]},
        # framing 3 + "tool" 1 + "call_1" 3 + "ok" 1
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    assert count(messages) == 3 + 15 + 8


def test_legacy_function_call_and_refusal_are_counted() -> None:
    call = {"name": "read_file", "arguments": '{"path":"a.py"}'}
    assert count([{"role": "assistant", "content": None, "function_call": call}]) == 3 + 3 + 1 + 11
    assert count([{"role": "assistant", "content": None, "refusal": "hello world"}]) == 3 + 3 + 1 + 2


def test_special_token_text_is_ordinary_text() -> None:
    # "<|endoftext|>" typed by a user is seven ordinary tokens, not a special token (nor an exception).
    assert count([{"role": "user", "content": "<|endoftext|>"}]) == 3 + 3 + 1 + 7


def test_text_parts_count_like_strings() -> None:
    parts = [{"type": "text", "text": "hello"}, {"type": "text", "text": " world"}]
    assert count([{"role": "user", "content": parts}]) == 9


@pytest.mark.parametrize(
    ("url", "detail", "expected"),
    [
        ("https://example.com/cat.png", "low", 85),
        ("https://example.com/cat.png", "high", 765),  # size unknown: a 1024x1024 image
        ("https://example.com/cat.png", None, 765),
        (png_data_url(2048, 4096), "high", 1105),  # OpenAI's worked example: 768x1536, 6 tiles
        (png_data_url(1024, 1024), "auto", 765),  # 768x768, 4 tiles
        (png_data_url(512, 512), "high", 255),  # 1 tile
        (png_data_url(4000, 3000), "low", 85),
    ],
)
def test_images_follow_the_tile_formula(url: str, detail: str | None, expected: int) -> None:
    image: dict[str, Any] = {"url": url} if detail is None else {"url": url, "detail": detail}
    content = [{"type": "image_url", "image_url": image}]
    assert count([{"role": "user", "content": content}]) == 3 + 3 + 1 + expected


def test_audio_and_files_are_estimated_from_their_size() -> None:
    second_of_wav = base64.b64encode(b"\0" * 32_000).decode()
    audio = [{"type": "input_audio", "input_audio": {"data": second_of_wav, "format": "wav"}}]
    assert count([{"role": "user", "content": audio}]) == 3 + 3 + 1 + 10
    data = "data:application/pdf;base64," + base64.b64encode(b"x" * 4000).decode()
    file = [{"type": "file", "file": {"filename": "a.pdf", "file_data": data}}]
    assert count([{"role": "user", "content": file}]) == 3 + 3 + 1 + 1000


def test_tool_definitions_count_as_openai_renders_them_not_as_json() -> None:
    function = {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
    tools = [{"type": "function", "function": function}]
    user = [{"role": "user", "content": "hello world"}]
    rendered = "namespace functions {\n\ntype read_file = (_: {\npath?: string,\n}) => any;\n\n} // namespace functions"
    # The namespace block plus 9 framing tokens; 4 fewer when a system message shares its framing.
    assert count(user, tools=tools) == count(user) + len(tiktoken_reference("o200k_base").encode(rendered)) + 9
    system = [{"role": "system", "content": "Be brief."}, *user]
    assert count(system, tools=tools) == count(system) + len(tiktoken_reference("o200k_base").encode(rendered)) + 5


def test_a_tool_set_counted_once_is_recounted_when_the_system_message_comes_or_goes() -> None:
    counter = TokenCounter()
    tools = [{"type": "function", "function": {"name": "ls"}}]
    user = {"role": "user", "content": "hi"}
    without = counter.count_request({"messages": [user], "tools": tools}, "o200k_base").tools
    with_system = counter.count_request(
        {"messages": [{"role": "system", "content": "x"}, user], "tools": tools}, "o200k_base"
    )
    assert with_system.tools == without - 4


def test_a_requests_tools_digest_is_the_one_conversation_keys_were_made_with() -> None:
    """Records stored under a conversation key still match: the digest of the tools is what it always was, and a
    change of `tool_choice` alone keys the count apart but not the conversation."""
    counter = TokenCounter()
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}]
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools}
    counted = counter.count_request(body, "o200k_base")
    assert counted.tools_digest == xxhash.xxh3_64_hexdigest(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS))
    chosen = counter.count_request({**body, "tool_choice": "required"}, "o200k_base")
    assert chosen.tools_digest == counted.tools_digest and chosen.tools_key != counted.tools_key
    assert counter.count_request({"messages": body["messages"]}, "o200k_base").tools_digest == ""


def test_a_tool_added_to_a_requests_own_counts_as_if_the_request_offered_it() -> None:
    """Looked up by the request's tools key, and never with a figure cached for another request: with or without a
    system message, with or without tools of its own, with another `tool_choice`."""
    ls = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}
    cat = {"type": "function", "function": {"name": "cat", "parameters": {"type": "object", "properties": {}}}}
    user = {"role": "user", "content": "hi"}
    bodies: list[dict[str, Any]] = [
        {"messages": [user]},
        {"messages": [{"role": "system", "content": "x"}, user]},
        {"messages": [user], "tools": [ls]},
        {"messages": [{"role": "system", "content": "x"}, user], "tools": [ls]},
        {"messages": [user], "tools": [ls], "tool_choice": "required"},
    ]
    shared = TokenCounter()  # every body through one cache, each looked up before anything else fills it
    enc = shared.encoding("o200k_base")
    for body in bodies:
        key = shared.count_request(body, "o200k_base").tools_key
        with_tool = {**body, "tools": [*body.get("tools", []), cat]}
        expected = TokenCounter().count_tools(with_tool, enc)  # a fresh cache: nothing another body left
        assert shared.count_tools_with(body, cat, enc, tools_key=key) == expected, body
        assert shared.count_tools_with(body, cat, enc, tools_key=key) == expected, body  # and from the cache


@pytest.mark.parametrize(
    ("model", "encoding", "exact"),
    [
        ("gpt-4o-2024-08-06", "o200k_base", True),
        ("openai/gpt-4.1-mini", "o200k_base", True),
        ("gpt-5", "o200k_base", True),
        ("o3-mini", "o200k_base", True),
        ("chatgpt-4o-latest", "o200k_base", True),
        ("gpt-4-turbo", "cl100k_base", True),
        ("gpt-3.5-turbo", "cl100k_base", True),
        ("llama-3.1-8b-instruct", "o200k_base", False),
    ],
)
def test_models_map_to_their_encoding(model: str, encoding: str, exact: bool) -> None:
    choice = choose_encoding(model)
    assert (choice.name, choice.exact) == (encoding, exact)
    assert choose_encoding(model, "cl100k_base").name == "cl100k_base"


def test_unchanged_messages_come_from_the_cache() -> None:
    counter = TokenCounter()
    body = json.loads(TRACES[0].read_text())
    first = counter.count_request(body, "o200k_base")
    misses = counter.misses
    body["messages"].append({"role": "user", "content": "one more thing"})
    second = counter.count_request(body, "o200k_base")
    assert counter.misses == misses + 1  # only the new message was encoded
    assert second.messages[:-1] == first.messages


def test_a_corrupt_rank_file_is_refused_with_a_clear_error() -> None:
    with pytest.raises(EncodingFileError, match="o200k_base is corrupt: sha256"):
        parse_ranks(b"AAAA 0\n", name="o200k_base", expected_sha256=SPECS["o200k_base"].expected_sha256)


def test_counting_needs_no_network_and_no_tiktoken_cache(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(cache),
        "HTTPS_PROXY": "http://127.0.0.1:9",  # any download attempt would fail loudly
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    script = (
        "from inflight.tokens import TokenCounter;"
        "body={'model':'gpt-4','messages':[{'role':'user','content':'hello world'}]};"
        "counter=TokenCounter();"
        "print(counter.count_request(body,'o200k_base').total, counter.count_request(body,'cl100k_base').total)"
    )
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["9", "9"]
    assert list(cache.iterdir()) == []


# --- an independent reference: tiktoken's own encodings and a plain transcription of the formula ---


def tiktoken_reference(name: str) -> tiktoken.Encoding:
    """tiktoken.get_encoding, fed the shipped rank file through tiktoken's own cache layout."""
    cache = Path(os.environ.get("INFLIGHT_TEST_TIKTOKEN_CACHE", "/tmp/inflight-test-tiktoken-cache"))
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / hashlib.sha1(TIKTOKEN_URLS[name].encode()).hexdigest()
    if not target.exists():
        # tiktoken checks the file against its own published sha256 when it loads it from the cache.
        target.write_bytes(gzip.decompress((RANK_FILES / f"{name}.tiktoken.gz").read_bytes()))
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        return tiktoken.get_encoding(name)
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous


def reference_count(body: dict[str, Any], enc: tiktoken.Encoding) -> int:
    def n(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    total = 3
    for message in body["messages"]:
        total += 3
        for key, value in message.items():
            if key == "tool_calls":
                for call in value:
                    total += 3 + n(call["function"]["name"]) + n(call["function"]["arguments"])
            elif key == "content" and isinstance(value, list):
                total += sum(n(part["text"]) for part in value)
            elif isinstance(value, str):
                total += n(value)
                if key == "name":
                    total += 1
    if body.get("tools"):
        # openai-messages-token-helper's rendering, validated against the API (a test-only dependency).
        total += n(format_function_definitions(body["tools"])) + 9  # type: ignore[no-untyped-call]
        total -= 4 if any(m["role"] == "system" for m in body["messages"]) else 0
    return total


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_traces_match_the_reference_within_one_percent(trace: Path, encoding: str) -> None:
    body = json.loads(trace.read_text())
    ours = TokenCounter().count_request(body, encoding).total
    reference = reference_count(body, tiktoken_reference(encoding))
    assert abs(ours - reference) <= 0.01 * reference, (ours, reference)

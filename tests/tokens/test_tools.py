"""inflight.tokens.tools against openai-messages-token-helper, the reference for OpenAI's tool rendering.

What is compared is the tools' share of a request: the reference's count with tools minus its count without,
against `tool_tokens` (which is that share by definition). The reference builds its encodings with
`tiktoken.encoding_for_model`, which would download them; the `reference` fixture points it at the shipped files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_messages_token_helper import model_helper

from inflight.tokens.encodings import load_encoding
from inflight.tokens.tools import render_tools, tool_tokens

TRACES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"
MODELS = {"gpt-4o": "o200k_base", "gpt-4": "cl100k_base"}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What should I do next?"}


def fn(name: str, properties: dict[str, Any] | None = None, required: list[Any] | None = None, **extra: Any) -> Any:
    """A `tools` entry; `properties=None` leaves `parameters` out altogether."""
    function: dict[str, Any] = {"name": name, **extra}
    if properties is not None:
        function["parameters"] = {"type": "object", "properties": properties, "required": required or []}
    return {"type": "function", "function": function}


STRING = {"type": "string"}
WEATHER = [
    fn("get_location", description="Gets the location of the user."),
    fn(
        "get_current_weather",
        {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        ["location"],
        description="Gets the current weather in the provided location.",
    ),
]
NESTED = [
    fn(
        "create_order",
        {
            "customer": {
                "type": "object",
                "description": "Who is ordering",
                "properties": {
                    "name": {"type": "string", "description": "Full name"},
                    "address": {
                        "type": "object",
                        "description": "Where to ship",
                        "properties": {
                            "street": STRING,
                            "city": STRING,
                            "zip": {"type": "string", "description": "Postal code"},
                            "geo": {
                                "type": "object",
                                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                            },
                        },
                        "required": ["street", "city"],
                    },
                },
                "required": ["name"],
            },
            "gift": {"type": "boolean", "description": "Wrap it"},
        },
        ["customer"],
        description="Create an order for a customer.",
    )
]
ARRAYS = [
    fn(
        "get_recipe",
        {
            "ingredients": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": STRING,
                        "unit": {"type": "string", "enum": ["grams", "ml", "cups", "pieces", "teaspoons"]},
                        "amount": {"type": "number"},
                    },
                    "required": ["name", "unit", "amount"],
                },
            },
            "instructions": {
                "type": "array",
                "items": STRING,
                "description": "Steps to prepare the recipe (no numbering)",
            },
            "time_to_cook": {"type": "number", "description": "Total time to prepare the recipe in minutes"},
        },
        ["ingredients", "instructions", "time_to_cook"],
    ),
    fn(
        "plot",
        {
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green"]}},
        },
        ["matrix"],
        description="Plot a matrix.",
    ),
]
ENUMS = [
    fn(
        "search_issues",
        {
            "query": {"type": "string", "description": "Search terms"},
            "state": {"type": "string", "enum": ["open", "closed", "all"], "description": "Issue state"},
            "sort": {"type": "string", "enum": ["created", "updated", "comments"]},
            "order": {"type": "string", "enum": ["asc", "desc"]},
            "page_size": {"type": "integer", "enum": [10, 25, 50]},
            "include_prs": {"type": "boolean"},
            "limit": {"type": "integer", "description": "At most this many"},
        },
        ["query"],
        description="Search the issue tracker.",
    )
]
DEFAULTS = [
    fn(
        "list_files",
        {
            "path": {"type": "string", "description": "Directory to list"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "depth": {"type": "integer", "default": 10},
            "hidden": {"type": "boolean", "default": False},
            "branch": {"type": "string", "default": "main"},
        },
        ["path"],
        description="List the files under a directory.",
    )
]
NO_PARAMETERS = [
    fn("submit"),
    fn("reset", {}, description="Reset the environment."),
    {"type": "function", "function": {"name": "noop", "parameters": {}}},
]
DESCRIPTIONS = [
    fn(
        "edit",
        {
            "path": {"type": "string", "description": "Absolute path of the file to edit; must exist."},
            "old": {"type": "string", "description": "Exact text to replace, including indentation and newlines."},
            "new": {"type": "string", "description": "Replacement text — may be empty to delete; ünïcode is fine."},
        },
        ["path", "old", "new"],
        description="Replace one exact occurrence of `old` with `new` in a file, failing if it is not unique.",
    )
]
MANY = [
    fn(
        f"tool_{i}",
        {
            "id": {"type": "integer", "description": f"Identifier of item {i}"},
            "mode": {"type": "string", "enum": ["fast", "safe", "dry-run"][: 1 + i % 3]},
            "labels": {"type": "array", "items": STRING},
            "meta": {"type": "object", "properties": {"owner": STRING, "priority": {"type": "number"}}},
        },
        ["id"] if i % 2 else [],
        description=f"Tool number {i} does thing {i}.",
    )
    for i in range(40)
]
UNIONS = [
    fn(
        "update",
        {
            "value": {"anyOf": [{"type": "string"}, {"type": "number"}]},
            "note": {"type": ["string", "null"], "description": "Optional note"},
            "ref": {"$ref": "#/definitions/Thing"},
        },
        ["value"],
    )
]
SETS: dict[str, list[Any]] = {
    "weather": WEATHER,
    "nested_objects": NESTED,
    "arrays_of_objects": ARRAYS,
    "enums_optional": ENUMS,
    "defaults": DEFAULTS,
    "no_parameters": NO_PARAMETERS,
    "descriptions": DESCRIPTIONS,
    "many_tools": MANY,
    "unions_and_ref": UNIONS,
}
# Where we knowingly render differently from the reference, as (our text, the reference's text) in context.
DEVIATIONS: dict[str, list[tuple[str, str]]] = {}


def trace_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(TRACES.glob("*.json")):
        body = json.loads(path.read_text())
        if body.get("tools"):
            yield path.stem, body


def cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, request body): every trace with tools, then each hand-written set with and without a system message."""
    yield from trace_cases()
    for name, tools in SETS.items():
        yield name, {"messages": [SYSTEM, USER], "tools": tools}
        yield f"{name}/no_system", {"messages": [USER], "tools": tools}
    legacy = [tool["function"] for tool in WEATHER + ARRAYS]
    yield "legacy_functions", {"messages": [SYSTEM, USER], "functions": legacy}
    for choice in ("auto", "none", "required", {"type": "function", "function": {"name": "get_current_weather"}}):
        label = choice if isinstance(choice, str) else "function"
        yield f"weather/tool_choice={label}", {"messages": [SYSTEM, USER], "tools": WEATHER, "tool_choice": choice}


CASES = list(cases())


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_helper, "encoding_for_model", lambda model, *_, **__: load_encoding(MODELS[model]))


def reference_share(body: dict[str, Any], model: str) -> int:
    """What openai-messages-token-helper says the tools, tool_choice and system interaction add to `body`."""
    system = next((m for m in body["messages"] if m.get("role") == "system"), None)
    tools = body.get("tools") or [{"type": "function", "function": f} for f in body.get("functions", [])]
    with_tools = model_helper.count_tokens_for_system_and_tools(model, system, tools, body.get("tool_choice"))
    return with_tools - model_helper.count_tokens_for_system_and_tools(model, system)


def deviation(name: str, encoding: tiktoken.Encoding) -> int:
    """Tokens by which our rendering of case `name` knowingly differs from the reference's."""
    pairs = DEVIATIONS.get(name.split("/")[0], [])
    return sum(len(encoding.encode_ordinary(ours)) - len(encoding.encode_ordinary(theirs)) for ours, theirs in pairs)


def tolerance(reference_tokens: int) -> float:
    return max(0.01 * reference_tokens, 3)


@pytest.mark.usefixtures("reference")
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("name", "body"), CASES, ids=[name for name, _ in CASES])
def test_matches_reference(name: str, body: dict[str, Any], model: str) -> None:
    encoding = load_encoding(MODELS[model])
    ours = tool_tokens(body, encoding)
    expected = reference_share(body, model) + deviation(name, encoding)
    assert abs(ours - expected) <= tolerance(expected), (ours, expected)


def test_traces_have_tools() -> None:
    assert len(list(trace_cases())) >= 3


def test_nothing_to_count() -> None:
    encoding = load_encoding("o200k_base")
    assert tool_tokens({"messages": [SYSTEM, USER]}, encoding) == 0
    assert tool_tokens({"messages": [USER], "tools": [], "response_format": {"type": "json_object"}}, encoding) == 0
    assert tool_tokens({"tools": [{"type": "custom", "custom": {"name": "x"}}, "junk", 3]}, encoding) == 0


def test_system_message_shares_its_framing() -> None:
    encoding = load_encoding("o200k_base")
    alone = tool_tokens({"messages": [USER], "tools": WEATHER}, encoding)
    assert tool_tokens({"messages": [SYSTEM, USER], "tools": WEATHER}, encoding) == alone - 4
    assert (
        tool_tokens({"messages": [{"role": "developer", "content": "x"}, USER], "tools": WEATHER}, encoding)
        == alone - 4
    )


def test_response_format_json_schema() -> None:
    encoding = load_encoding("o200k_base")
    schema = {"type": "object", "properties": {"answer": {"type": "number"}}, "required": ["answer"]}
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "math_answer", "description": "The final answer", "schema": schema, "strict": True},
    }
    text = (
        "# Response Formats\n\n## math_answer\n\n// The final answer\n"
        '{"type":"object","properties":{"answer":{"type":"number"}},"required":["answer"]}'
    )
    rendered = len(encoding.encode_ordinary(text))
    assert tool_tokens({"messages": [SYSTEM, USER], "response_format": response_format}, encoding) == rendered + 1
    assert tool_tokens({"messages": [USER], "response_format": response_format}, encoding) == rendered + 4
    with_tools = {"messages": [USER], "tools": WEATHER, "response_format": response_format}
    assert (
        tool_tokens(with_tools, encoding)
        == tool_tokens({"messages": [USER], "tools": WEATHER}, encoding) + rendered + 1
    )
    assert tool_tokens({"messages": [USER], "response_format": {"type": "json_object"}}, encoding) == 0


def test_legacy_function_call() -> None:
    encoding = load_encoding("o200k_base")
    body = {"messages": [USER], "functions": [WEATHER[1]["function"]]}
    base = tool_tokens(body, encoding)
    assert tool_tokens({**body, "function_call": "auto"}, encoding) == base
    assert tool_tokens({**body, "function_call": "none"}, encoding) == base + 1
    named = {**body, "function_call": {"name": "get_current_weather"}}
    assert tool_tokens(named, encoding) == base + 4 + len(encoding.encode_ordinary("get_current_weather"))


def test_render_small_definition() -> None:
    definition = {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "The path"}},
            "required": ["path"],
        },
    }
    expected = (
        "namespace functions {\n\n// Read a file\ntype read_file = (_: {\n// The path\npath: string,\n}) => any;\n\n"
        "} // namespace functions"
    )
    assert render_tools([definition]) == expected


def test_render_every_feature() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe", "description": "How\nto run"},
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            },
            "note": {"type": "string", "nullable": True, "default": "none"},
            "level": {"type": ["integer", "null"], "enum": [1, 2]},
            "choice": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "boolean"}}]},
            "ref": {"$ref": "#/$defs/x"},
            "blob": {"type": "object"},
            "list": {"type": "array"},
        },
        "required": ["mode"],
    }
    expected = """namespace functions {

type f = () => any;

// Does things
type g = (_: {
// How
to run
mode: "fast" | "safe",
items?: {
  id: number,
}[],
note?: string,
level?: any,
choice?: any,
ref?: any,
blob?: {

},
list?: any[],
}) => any;

} // namespace functions"""
    assert (
        render_tools([{"name": "f"}, {"name": "g", "description": "Does things", "parameters": parameters}]) == expected
    )


def test_odd_input_is_skipped_not_raised() -> None:
    encoding = load_encoding("cl100k_base")
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(3000):
        deep = {"type": "array", "items": deep}
    body = {
        "messages": "not a list",
        "tools": [None, {"function": {"name": 7}}, fn("ok", {"x": deep, "y": "junk", "z": {"type": 3}}, ["x", {}])],
        "tool_choice": {"type": "function", "function": {"name": ["x"]}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": deep}},
    }
    assert tool_tokens(body, encoding) > 0
    special = fn("t", {"x": {"type": "string", "description": "<|endoftext|> \ud800"}}, description="<|endofprompt|>")
    assert tool_tokens({"tools": [special]}, encoding) > 0


SCHEMA_KEYS = st.sampled_from(
    [
        "type",
        "properties",
        "items",
        "enum",
        "required",
        "description",
        "default",
        "anyOf",
        "oneOf",
        "allOf",
        "nullable",
        "const",
        "name",
        "parameters",
        "function",
        "json_schema",
        "schema",
        "role",
        "$ref",
    ]
)
JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
TYPE_NAMES = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null", "weird"])
JSON = st.recursive(
    JSON_LEAF | TYPE_NAMES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(SCHEMA_KEYS | st.text(max_size=4), children),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(
    tools=JSON | st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": JSON}), max_size=3),
    functions=JSON,
    tool_choice=JSON | st.sampled_from(["auto", "none", "required"]),
    response_format=JSON | st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": JSON}),
    messages=JSON,
)
def test_never_raises(tools: Any, functions: Any, tool_choice: Any, response_format: Any, messages: Any) -> None:
    body = {
        "tools": tools,
        "functions": functions,
        "tool_choice": tool_choice,
        "response_format": response_format,
        "messages": messages,
    }
    for name in MODELS.values():
        count = tool_tokens(body, load_encoding(name))
        assert isinstance(count, int) and count >= 0

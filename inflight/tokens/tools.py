"""What `tools`, `tool_choice` and `response_format` add to a chat-completion prompt, counted as OpenAI renders them.

OpenAI does not tokenize the JSON of a request's function definitions. It renders them into the system
message as a TypeScript-like `namespace functions { ... }` block (one `type name = (_: {...}) => any;` per
function, descriptions as `//` comments, `?` on optional parameters), about a third of the JSON's size. The
format is the one openai/harmony documents and hmarr/openai-chat-tokens reverse-engineered against the API;
openai-messages-token-helper (the reference this module is tested against) uses the same format and constants:

    tools        = tokens(namespace block) + 9, minus 4 when the request already has a system (or developer)
                   message: the block then joins that message instead of framing its own (hmarr's measurement;
                   hmarr also pads that message with a newline, worth 0-1 token, which we and the reference skip).
    tool_choice  = "none": 1; {"type": "function", "function": {"name": n}}: 7 + tokens(n)  (the reference).
    function_call (legacy) = "none": 1; {"name": n}: 4 + tokens(n)  (hmarr's measurement).

So the count depends on `messages` only through whether a system or developer message is present: a cache
keyed on the tool fields alone must add that flag to its key.

Where the reference is silent, these are assumptions:
- tool_choice "auto" and "required" cost nothing (the reference prices only "none" and a named function).
- A `json_schema` response format is rendered as harmony documents it, `# Response Formats\n\n## {name}\n\n`,
  `// {description}` and the schema as compact JSON, plus 1 token joining it to the system message (or the
  tools block), or 4 for a message of its own when there is neither. `json_object` is taken to add nothing:
  the API makes the messages themselves mention JSON, which suggests it injects no instructions.
- Schemas render as the reference renders them, since it is the one checked against the API: enum values
  quoted (numbers too), defaults and `nullable` not rendered, a type list, anyOf/oneOf, `$ref` and a missing
  or unknown type as `any`; keywords with no TypeScript counterpart (title, minimum, format, ...) are left
  out. Nesting deeper than MAX_DEPTH renders as `any` so that no schema can exhaust the stack.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import tiktoken

from inflight.tokens.text import text_tokens

TOOLS_OVERHEAD = 9
SYSTEM_MESSAGE_DISCOUNT = 4
TOOL_CHOICE_NONE = 1
TOOL_CHOICE_FUNCTION = 7
FUNCTION_CALL_NAME = 4
RESPONSE_FORMAT_JOINED = 1
RESPONSE_FORMAT_OWN_MESSAGE = 4
MAX_DEPTH = 24  # schema nesting rendered before falling back to `any`; keeps recursion far from Python's limit
INDENT_STEP = 2
SYSTEM_ROLES = ("system", "developer")


def render_tools(definitions: Sequence[Mapping[str, Any]]) -> str:
    """The `namespace functions` block for function definitions (the `function` objects of `tools`, or legacy
    `functions` entries). Definitions without a string name are skipped; "" when none is left."""
    blocks: list[str] = []
    for definition in definitions:
        blocks.extend(_function_lines(definition))
    if not blocks:
        return ""
    return "\n".join(["namespace functions {", "", *blocks, "} // namespace functions"])


def tool_tokens(payload: Mapping[str, Any], encoding: tiktoken.Encoding) -> int:
    """Tokens that `tools`/`functions`, `tool_choice`/`function_call` and `response_format` add to the request
    `payload` (see the module docstring). 0 when none is present; never raises on malformed input."""
    has_system = has_system_message(payload.get("messages"))
    tokens = 0
    block = render_tools(_definitions(payload))
    if block:
        tokens += text_tokens(encoding, block) + TOOLS_OVERHEAD
        if has_system:
            tokens -= SYSTEM_MESSAGE_DISCOUNT
    tokens += _tool_choice_tokens(payload.get("tool_choice"), encoding)
    tokens += _function_call_tokens(payload.get("function_call"), encoding)
    tokens += _response_format_tokens(payload.get("response_format"), encoding, joined=bool(block) or has_system)
    return max(tokens, 0)


def _definitions(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The function objects of `tools` entries of type function, then the legacy `functions` entries."""
    found: list[Mapping[str, Any]] = []
    tools = payload.get("tools")
    if isinstance(tools, list | tuple):
        for tool in tools:
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if isinstance(function, Mapping):
                found.append(function)
    functions = payload.get("functions")
    if isinstance(functions, list | tuple):
        found.extend(function for function in functions if isinstance(function, Mapping))
    return found


def has_system_message(messages: Any) -> bool:
    return isinstance(messages, list | tuple) and any(
        isinstance(message, Mapping) and message.get("role") in SYSTEM_ROLES for message in messages
    )


def _function_lines(definition: Any) -> list[str]:
    if not isinstance(definition, Mapping):
        return []
    name = definition.get("name")
    if not isinstance(name, str) or not name:
        return []
    lines = _comment_lines(definition.get("description"), "")
    parameters = definition.get("parameters")
    properties = _property_lines(parameters, 0, 1) if isinstance(parameters, Mapping) else []
    if properties:
        lines += [f"type {name} = (_: {{", *properties, "}) => any;"]
    else:
        lines.append(f"type {name} = () => any;")
    lines.append("")  # a blank line after every function
    return lines


def _comment_lines(description: Any, pad: str) -> list[str]:
    # One `//` for the whole description, even a multi-line one: that is what was measured.
    return [f"{pad}// {description}"] if isinstance(description, str) and description else []


def _property_lines(schema: Mapping[str, Any], indent: int, depth: int) -> list[str]:
    """One `name?: type,` line per property (after its description comment), indented by `indent`."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    required = schema.get("required")
    required_names = {name for name in required if isinstance(name, str)} if isinstance(required, list) else set()
    pad = " " * indent
    lines: list[str] = []
    for name, value in properties.items():
        if not isinstance(name, str):
            continue
        prop = value if isinstance(value, Mapping) else {}
        lines += _comment_lines(prop.get("description"), pad)
        optional = "" if name in required_names else "?"
        lines.append(f"{pad}{name}{optional}: {_type_text(prop, indent, depth)},")
    return lines


def _type_text(schema: Mapping[str, Any], indent: int, depth: int) -> str:
    """The TypeScript-like type of a JSON schema property, as measured: anything unusual is `any`."""
    kind = schema.get("type")
    enum = schema.get("enum")
    if depth > MAX_DEPTH or not isinstance(kind, str):
        return "any"  # no type, a list of types, anyOf/oneOf, $ref
    if kind in ("string", "integer", "number") and isinstance(enum, list) and enum:
        return " | ".join(f'"{_enum_text(item)}"' for item in enum)  # numbers quoted too
    if kind in ("string", "boolean", "null"):
        return kind
    if kind in ("integer", "number"):
        return "number"
    if kind == "array":
        items = schema.get("items")
        return f"{_type_text(items if isinstance(items, Mapping) else {}, indent, depth + 1)}[]"
    if kind == "object":
        # The closing brace is not indented: the measured rendering does the same.
        return "{\n" + "\n".join(_property_lines(schema, indent + INDENT_STEP, depth + 1)) + "\n}"
    return "any"


def _enum_text(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"  # the measured rendering is Python's str()
    return value if isinstance(value, str) else _literal(value)


def _literal(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # not JSON, an int too long to print, or nested too deep
        return "any"


def _tool_choice_tokens(choice: Any, encoding: tiktoken.Encoding) -> int:
    if isinstance(choice, str):
        return TOOL_CHOICE_NONE if choice == "none" else 0
    function = choice.get("function") if isinstance(choice, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return TOOL_CHOICE_FUNCTION + text_tokens(encoding, name) if isinstance(name, str) else 0


def _function_call_tokens(call: Any, encoding: tiktoken.Encoding) -> int:
    if isinstance(call, str):
        return TOOL_CHOICE_NONE if call == "none" else 0
    name = call.get("name") if isinstance(call, Mapping) else None
    return FUNCTION_CALL_NAME + text_tokens(encoding, name) if isinstance(name, str) else 0


def _response_format_tokens(response_format: Any, encoding: tiktoken.Encoding, *, joined: bool) -> int:
    """A `json_schema` response format, rendered as harmony documents it; other formats add nothing."""
    if not isinstance(response_format, Mapping) or response_format.get("type") != "json_schema":
        return 0
    spec = response_format.get("json_schema")
    if not isinstance(spec, Mapping):
        return 0
    name = spec.get("name")
    lines = ["# Response Formats", "", f"## {name if isinstance(name, str) else ''}", ""]
    lines += _comment_lines(spec.get("description"), "")
    if "schema" in spec:
        with contextlib.suppress(TypeError, ValueError, RecursionError):  # not serializable: the header alone
            lines.append(json.dumps(spec["schema"], ensure_ascii=False, separators=(",", ":")))
    framing = RESPONSE_FORMAT_JOINED if joined else RESPONSE_FORMAT_OWN_MESSAGE
    return text_tokens(encoding, "\n".join(lines)) + framing

"""The fake upstream's Anthropic Messages API (`POST /v1/messages`), faithful where clients and inflight look.

- Answers as a JSON message or as an event stream with Anthropic's event names (`event: <type>`):
  `message_start` (the message, empty, with its input `usage`), per content block
  `content_block_start`, its deltas (`thinking_delta` and `signature_delta`, `text_delta`,
  `input_json_delta`) and `content_block_stop`, a `ping`, `message_delta` (`stop_reason`, `usage`,
  and `context_management` when the request carried it), `message_stop`.
- Counts the request its own way (o200k_base over the tools, the system text and each content
  block's JSON, thinking signatures left out) and, past the model's window, refuses as Anthropic
  does: a 400 `invalid_request_error` "prompt is too long: N tokens > M maximum", or
  (`counts_max_tokens`) "input length and `max_tokens` exceed context limit: A + B > C, ...", or
  (`refusal_in_stream`, to a streaming request) the same words in an `error` event that opens a 200
  event stream.
- Validates as the API does and refuses with its words: the first turn is the user's, every
  `tool_use` is answered at the head of the next user turn and every `tool_result` answers one of
  the previous assistant turn, at most 4 `cache_control` blocks and no 1h one after a 5m one,
  thinking blocks signed by it and
  unedited, a final assistant turn that starts with thinking when thinking is on, no `system`
  messages inside `messages` (unless `system_messages`, under Claude Code's beta for them), no
  `context_management` unless `supports_context_management`.
- Issues a signed thinking block before each tool call when the request enables thinking.
- Simulates Anthropic's prompt cache: an entry per `cache_control` breakpoint (the prefix of tools,
  system and messages up to that block, per model); a request reads the longest entry that ends at
  a block boundary up to 20 blocks before one of its breakpoints, and creates the rest up to its
  last breakpoint (usage: `cache_read_input_tokens`, `cache_creation_input_tokens`, `input_tokens`).
  Claude Code's billing-header system block is neither counted nor cached, as Anthropic reads it.
  Each answered request is a line of `bill` (reads, writes, uncached input, output), Claude Code's
  own compaction requests billed as such.
- Plays an agent (`MessagesTaskAgent`): the same task as the Responses fake's `TaskAgent`, each
  step a command through the request's shell tool (Claude Code's `Bash`), reading its progress
  from the latest `tool_result` only. It answers Claude Code's own compaction request with a summary
  that quotes the task; side requests without a shell tool get a short text answer.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from inflight.tokens.media import image_size
from tests.support.billing import Bill
from tests.support.prompt_tokens import RememberedTokens
from tests.support.responses import STEP_DONE, TASK_MARKER, TaskAgent, last_step, sign, verified

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20  # how far before a breakpoint Anthropic looks for an earlier cache entry
OUTPUT_TOKENS = 20  # what every answer is said to cost
MESSAGE_OVERHEAD = 4  # tokens a turn costs beyond its blocks (role and separators)
IMAGE_TOKENS_MAX = 1_600  # an image is (width x height) / 750 tokens, resized to about 1.15 megapixels first
EXTENDED_THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
# Claude Code's first system block: read by Anthropic as a header, so neither prompt nor cache key (its
# suffix follows the first user message; Claude Code would miss the cache after each of its compactions)
BILLING_HEADER = "x-anthropic-billing-header:"
# The beta Claude Code sends with `system` messages inside `messages` (with its newer models)
SYSTEM_MESSAGES_BETA = "per-turn-control-2026-07-01"
# How Claude Code's own compaction asks for a summary (its last user message, the tools still offered)
COMPACTION_REQUEST = "create a detailed summary of the conversation"


def beta_names(header: str | None) -> frozenset[str]:
    """The betas an `anthropic-beta` header names (comma-separated)."""
    return frozenset(name.strip() for name in (header or "").split(",") if name.strip())


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def thinking_signature(thinking: str, serial: int) -> str:
    """A signature over the thinking text: `verified` by this fake, and only for that text."""
    return sign({"serial": serial, "thinking": hashlib.sha256(thinking.encode()).hexdigest()})


def signed_thinking(block: dict[str, Any]) -> bool:
    signature = block.get("signature")
    if not verified(signature):
        return False
    payload = orjson.loads(base64.b64decode(str(signature).rsplit(".", 1)[0]))
    digest = hashlib.sha256(str(block.get("thinking", "")).encode()).hexdigest()
    return isinstance(payload, dict) and payload.get("thinking") == digest


def text_of(content: Any) -> str:
    """The text of a `system` or a message's content: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def thinking_enabled(payload: dict[str, Any]) -> bool:
    thinking = payload.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def cache_ttl(block: Any) -> str | None:
    """The TTL of a block's `cache_control` ("5m" or "1h"), on the block or on a part of its content."""
    if not isinstance(block, dict):
        return None
    control = block.get("cache_control")
    if isinstance(control, dict):
        return str(control.get("ttl") or "5m")
    parts = block.get("content")
    if isinstance(parts, list):
        return next((ttl for ttl in map(cache_ttl, parts) if ttl is not None), None)
    return None


def without_cache_control(value: Any) -> Any:
    """The block as the model sees it: where its breakpoints are does not change its cache key."""
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def turns(messages: list[Any]) -> list[tuple[int, str, list[Any]]]:
    """(index of the first message, role, blocks) of each turn: consecutive messages of a role are one
    turn to the API, a string content is one text block."""
    merged: list[tuple[int, str, list[Any]]] = []
    for index, message in enumerate(messages):
        role = str(message.get("role"))
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if merged and merged[-1][1] == role:
            merged[-1][2].extend(blocks)
        else:
            merged.append((index, role, blocks))
    return merged


@dataclass(frozen=True)
class PromptBlock:
    """One block of the prompt as the cache sees it: a tool, a system block, or a content block."""

    key: bytes  # what it is, its breakpoint aside
    tokens: int
    ttl: str | None  # a breakpoint's TTL, None where there is none


@dataclass(frozen=True)
class CacheUsage:
    read: int
    created_5m: int
    created_1h: int
    uncached: int

    def usage(self) -> dict[str, Any]:
        return {
            "input_tokens": self.uncached,
            "cache_creation_input_tokens": self.created_5m + self.created_1h,
            "cache_read_input_tokens": self.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.created_5m,
                "ephemeral_1h_input_tokens": self.created_1h,
            },
        }


@dataclass
class MessagesTaskAgent:
    """A scripted agent: `steps` shell commands (those of the Responses fake's `TaskAgent`), each printing
    `output_lines` lines (or each step its own of `step_lines`), then a final answer. It finds the step it is at
    from the latest tool result (`STEP n DONE`), or with none, from the summary it starts from; it fails loudly
    (a message saying so) if the task is gone from the conversation."""

    steps: int = 30
    output_lines: int = 200
    narrate: bool = True  # a line of text before each call, as Claude writes one
    step_lines: tuple[int, ...] = ()  # the lines of each step in turn; empty: `output_lines` for all

    def shell(self) -> TaskAgent:
        """The Responses fake's agent, whose commands (and their outputs) these steps are."""
        return TaskAgent(steps=self.steps, output_lines=self.output_lines, step_lines=self.step_lines)

    def command(self, step: int) -> str:
        return self.shell().command(step)

    def output(self, step: int) -> str:
        """What the step's command prints (its last newline left out)."""
        return self.shell().output(step)

    def next_content(self, payload: dict[str, Any], serial: int) -> list[dict[str, Any]]:
        """The content of the next assistant message (a final one when it ends with text)."""
        messages = list(payload.get("messages") or [])
        shell = shell_tool(list(payload.get("tools") or []))
        if shell is None:
            return [text_block(side_answer(payload))]
        if TASK_MARKER not in orjson.dumps(messages).decode():
            return [text_block(f"I no longer know my task ({TASK_MARKER} is gone).")]
        result = latest_tool_result(messages)
        if result:
            done = [int(n) for n in STEP_DONE.findall(result)]
        else:  # a conversation that starts afresh from a summary: where it stands is in the summary's text
            summarized = last_step(text_of(messages[-1].get("content")), self.steps) if messages else 0
            done = [summarized] if summarized else []
        step = (max(done) if done else 0) + 1
        content: list[dict[str, Any]] = []
        if thinking_enabled(payload):
            thought = f"Step {step - 1} is done, so step {step} comes next." if done else "The task starts at step 1."
            content.append({"type": "thinking", "thinking": thought, "signature": thinking_signature(thought, serial)})
        if COMPACTION_REQUEST in text_of(messages[-1].get("content")):
            return [*content, text_block(self.summary(messages, step))]
        if step > self.steps:
            return [*content, text_block(f"All {self.steps} steps are done. FINISHED")]
        if self.narrate:
            content.append(text_block(f"Running step {step} of {self.steps}."))
        name, arguments = shell
        tool_input: dict[str, Any] = {"command": self.command(step)}
        if "description" in arguments:
            tool_input["description"] = f"Run step {step} of the task"
        content.append({"type": "tool_use", "id": f"toolu_{serial:06d}_{step}", "name": name, "input": tool_input})
        return content

    def summary(self, messages: list[Any], step: int) -> str:
        """What a model answers Claude Code's compaction request: the task, quoted, and where it stands."""
        asked = next(
            (
                text
                for message in messages
                if message.get("role") == "user"
                for text in text_of(message.get("content")).split("\n")
                if TASK_MARKER in text and COMPACTION_REQUEST not in text
            ),
            f"The {TASK_MARKER}, run step by step.",  # the task was asked where no user text says it
        )
        return (
            f"<analysis>\nThe user gave me a task of {self.steps} shell steps; I run them one by one.\n</analysis>\n\n"
            f"<summary>\n1. Primary Request and Intent:\n   {asked.strip()}\n"
            f"2. Progress: steps 1 to {step - 1} are done; step {step} is next.\n</summary>"
        )


def shell_tool(tools: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """(name, input properties) of the tool that runs a shell command: `Bash`, else the first with a
    `command` property."""
    candidates: list[tuple[str, dict[str, Any]]] = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("defer_loading"):
            continue
        properties = (tool.get("input_schema") or {}).get("properties") or {}
        if isinstance(properties, dict) and "command" in properties:
            candidates.append((str(tool.get("name")), properties))
    return next((c for c in candidates if c[0] == "Bash"), candidates[0] if candidates else None)


def latest_tool_result(messages: list[Any]) -> str:
    """The text of the last `tool_result` in the conversation."""
    for message in reversed(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in reversed(content):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                return text_of(block.get("content"))
    return ""


def side_answer(payload: dict[str, Any]) -> str:
    """A short answer to a request that is not the task: a title, a summary, a check."""
    system = text_of(payload.get("system")).lower()
    if "title" in system:
        return '{"title": "Run the task steps"}' if "json" in system else "Run the task steps"
    if "summar" in system:
        return "The user asked to run the task steps one by one."
    return "OK."


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@dataclass
class FakeMessages:
    """The Messages API of the fake upstream; `windows` by model or glob, as the other routes enforce them."""

    agent: MessagesTaskAgent | None = None
    windows: dict[str, int] = field(default_factory=dict)
    counts_max_tokens: bool = False  # refuse as "input length and `max_tokens` exceed context limit"
    refusal_in_stream: bool = False  # a streaming request over the window: a 200 stream opening with an `error` event
    supports_context_management: bool = True  # False: the field is refused, as a gateway refuses an unknown one
    # True: `system` messages inside `messages` are taken under SYSTEM_MESSAGES_BETA. False: refused with the
    # words Claude Code recognises, and it sends them again as user text (its newer models try them first)
    system_messages: bool = False
    min_cache_tokens: int = 1_024  # a shorter prefix is not cached (Sonnet's minimum)
    reply_text: str = "Hello from the Messages API."
    serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    cache: set[tuple[str, bytes]] = field(default_factory=set)  # (model, digest of a cached prefix)
    prompt_tokens: int = 0  # over all answered requests: read + created + uncached
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    refused: int = 0
    bill: Bill = field(default_factory=Bill)
    rejected: list[str] = field(default_factory=list)  # why a request was refused as malformed
    tokens: RememberedTokens = field(default_factory=RememberedTokens)  # each piece counted once

    def block_tokens(self, block: Any) -> int:
        """A content block's tokens: its JSON, less what is opaque (signatures) or not text (images)."""
        if not isinstance(block, dict):
            return self.tokens(block)
        kind = block.get("type")
        if kind == "thinking":
            return self.tokens(str(block.get("thinking", "")))
        if kind == "redacted_thinking":
            return self.tokens({"type": kind})
        if kind == "text":
            return self.tokens(str(block.get("text", "")))
        if kind == "image":
            return image_block_tokens(block)
        if kind == "tool_result" and isinstance(block.get("content"), list):
            parts = block["content"]
            rest = {k: v for k, v in block.items() if k not in ("content", "cache_control")}
            return self.tokens(rest) + sum(self.block_tokens(part) for part in parts)
        return self.tokens(without_cache_control(block))

    def prompt(self, payload: dict[str, Any]) -> list[PromptBlock]:
        """The request as the cache sees it, in Anthropic's order: tools, system, then each turn's blocks."""
        blocks = [
            PromptBlock(
                orjson.dumps(without_cache_control(tool)), self.tokens(without_cache_control(tool)), cache_ttl(tool)
            )
            for tool in payload.get("tools") or []
        ]
        system = payload.get("system")
        for part in [{"type": "text", "text": system}] if isinstance(system, str) else list(system or []):
            if isinstance(part, dict) and str(part.get("text", "")).startswith(BILLING_HEADER):
                continue
            blocks.append(
                PromptBlock(orjson.dumps(without_cache_control(part)), self.block_tokens(part), cache_ttl(part))
            )
        for message in payload.get("messages") or []:
            content = message.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            for n, part in enumerate(parts):
                key = orjson.dumps([message.get("role"), n == 0, without_cache_control(part)])
                overhead = MESSAGE_OVERHEAD if n == 0 else 0
                blocks.append(PromptBlock(key, self.block_tokens(part) + overhead, cache_ttl(part)))
        if isinstance(payload.get("cache_control"), dict) and blocks:  # automatic caching: the last block
            ttl = str(payload["cache_control"].get("ttl") or "5m")
            blocks[-1] = PromptBlock(blocks[-1].key, blocks[-1].tokens, blocks[-1].ttl or ttl)
        return blocks

    def count(self, payload: dict[str, Any]) -> int:
        return sum(block.tokens for block in self.prompt(payload))

    def problem(self, payload: dict[str, Any], betas: frozenset[str] = frozenset()) -> str | None:
        """Why the API would refuse this request as malformed (None: it accepts it)."""
        for name in ("model", "max_tokens", "messages"):
            if name not in payload:
                return f"{name}: Field required"
        if "context_management" in payload and not self.supports_context_management:
            return "context_management: Extra inputs are not permitted"
        thinking = payload.get("thinking")
        budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
        if isinstance(budget, int) and isinstance(payload["max_tokens"], int) and payload["max_tokens"] <= budget:
            return (
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
                f"{EXTENDED_THINKING_DOCS}#max-tokens-and-context-window-size"
            )
        breakpoints = [b for b in self.prompt(payload) if b.ttl is not None]
        ttls = [b.ttl for b in breakpoints]
        if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:  # a longer TTL may not follow a shorter one
            return "a cache_control block with ttl='1h' must not come after one with ttl='5m'"
        if len(breakpoints) > MAX_BREAKPOINTS:
            return (
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(breakpoints)}."
            )
        messages = payload["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return "messages: Input should be a valid list"
        system_messages = self.system_messages and SYSTEM_MESSAGES_BETA in betas
        return conversation_problem(
            turns(messages), thinking=thinking_enabled(payload), system_messages=system_messages
        )

    def answer(
        self, payload: dict[str, Any], betas: frozenset[str] = frozenset()
    ) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]] | None]:
        """(status, a JSON body, or the events of a stream) for one request, sent with the `anthropic-beta`s `betas`."""
        problem = self.problem(payload, betas)
        if problem is not None:
            self.rejected.append(problem)
            return 400, error_body(problem), None
        model = str(payload["model"])
        prompt = self.prompt(payload)
        tokens = sum(block.tokens for block in prompt)
        window = next((w for pattern, w in self.windows.items() if fnmatch.fnmatchcase(model, pattern)), None)
        max_tokens = int(payload["max_tokens"])
        if window is not None and tokens + (max_tokens if self.counts_max_tokens else 0) > window:
            self.refused += 1
            self.bill.refuse()
            if self.counts_max_tokens:
                message = (
                    f"input length and `max_tokens` exceed context limit: {tokens} + {max_tokens} > {window}, "
                    "decrease input length or `max_tokens` and try again"
                )
            else:
                message = f"prompt is too long: {tokens} tokens > {window} maximum"
            if self.refusal_in_stream and payload.get("stream") is True:
                return 200, None, [error_body(message)]
            return 400, error_body(message), None
        cached = self.read_and_write(model, prompt)
        self.prompt_tokens += tokens
        self.cache_read_tokens += cached.read
        self.cache_creation_tokens += cached.created_5m + cached.created_1h
        messages = payload["messages"]
        own = bool(messages) and COMPACTION_REQUEST in text_of(messages[-1].get("content"))
        serial = next(self.serial)
        agent = self.agent
        content = agent.next_content(payload, serial) if agent is not None else [text_block(self.reply_text)]
        output_tokens = OUTPUT_TOKENS
        cut = max_tokens < OUTPUT_TOKENS and all(block["type"] == "text" for block in content)
        if cut:  # Claude Code's probes ask for one token ("quota", "test"): the answer stops there
            content, output_tokens = [text_block(content[0]["text"].split(" ")[0])], max_tokens
        usage = {**cached.usage(), "output_tokens": output_tokens, "service_tier": "standard"}
        self.bill.add(
            "own compaction" if own else "agent",
            uncached=cached.uncached,
            cache_read=cached.read,
            cache_write=cached.created_5m + cached.created_1h,
            output=output_tokens,
        )
        reply = message_object(f"msg_{serial:06d}", model, content, usage)
        if cut:
            reply["stop_reason"] = "max_tokens"
        if "context_management" in payload:
            reply["context_management"] = {"applied_edits": []}
        if payload.get("stream") is True:
            return 200, None, message_stream(reply)
        return 200, reply, None

    def count_tokens(self, payload: dict[str, Any], betas: frozenset[str] = frozenset()) -> tuple[int, dict[str, Any]]:
        """`POST /v1/messages/count_tokens`: the same count, validated, with no window."""
        problem = self.problem({"max_tokens": 1 << 31, **payload}, betas)  # it takes none: no check of it
        if problem is not None:
            self.rejected.append(problem)
            return 400, error_body(problem)
        tokens = self.count(payload)
        answer: dict[str, Any] = {"input_tokens": tokens}
        if "context_management" in payload:
            answer["context_management"] = {"original_input_tokens": tokens}
        return 200, answer

    def read_and_write(self, model: str, prompt: list[PromptBlock]) -> CacheUsage:
        """What the cache serves this prompt, and the entries it writes at the prompt's breakpoints."""
        digests: list[bytes] = []
        running = hashlib.sha256()
        totals = list(itertools.accumulate(block.tokens for block in prompt))
        for block in prompt:
            running.update(hashlib.sha256(block.key).digest())
            digests.append(running.copy().digest())
        breakpoints = [
            i for i, block in enumerate(prompt) if block.ttl is not None and totals[i] >= self.min_cache_tokens
        ]
        read = 0  # blocks served from the cache
        for point in breakpoints:
            for end in range(point, max(point - LOOKBACK_BLOCKS, 0) - 1, -1):
                if (model, digests[end]) in self.cache:
                    read = max(read, end + 1)
                    break
        created = {"5m": 0, "1h": 0}
        start = read
        for point in breakpoints:
            if point + 1 > start:
                created[str(prompt[point].ttl)] += totals[point] - (totals[start - 1] if start else 0)
                start = point + 1
            self.cache.add((model, digests[point]))
        read_tokens = totals[read - 1] if read else 0
        total = totals[-1] if totals else 0
        uncached = total - read_tokens - created["5m"] - created["1h"]
        return CacheUsage(read=read_tokens, created_5m=created["5m"], created_1h=created["1h"], uncached=uncached)


def image_block_tokens(block: dict[str, Any]) -> int:
    """Anthropic's estimate, (width x height) / 750, for a base64 image whose size can be read; the most
    an image costs otherwise."""
    source = block.get("source")
    data = source.get("data") if isinstance(source, dict) and source.get("type") == "base64" else None
    try:
        size = image_size(base64.b64decode(str(data)[:350_000])) if data else None
    except (binascii.Error, ValueError):
        size = None
    if size is None:
        return IMAGE_TOKENS_MAX
    width, height = size
    scale = min(1.0, 1568 / max(width, height, 1), math.sqrt(1_150_000 / max(width * height, 1)))
    return min(IMAGE_TOKENS_MAX, math.ceil(width * scale * height * scale / 750))


def conversation_problem(
    conversation: list[tuple[int, str, list[Any]]], *, thinking: bool, system_messages: bool
) -> str | None:
    """Why the API would refuse these turns: roles, tool pairing, thinking signatures (None: valid)."""
    for index, role, _ in conversation:
        if role not in ("user", "assistant") and not (role == "system" and system_messages and index > 0):
            return (
                f'messages.{index}.role: Unexpected role "{role}". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.'
            )
    conversation = [turn for turn in conversation if turn[1] != "system"]  # instructions between the turns
    if conversation and conversation[0][1] != "user":
        return 'messages: first message must use the "user" role'
    calls: list[str] = []
    for position, (index, role, blocks) in enumerate(conversation):
        if role == "user":
            problem = results_problem(index, blocks, calls)
            calls = []
        else:
            following = conversation[position + 1][2] if position + 1 < len(conversation) else None
            problem = thinking_problem(index, blocks) or calls_problem(index, blocks, following)
            calls = [str(b.get("id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        if problem is not None:
            return problem
    if thinking and len(conversation) >= 2:
        return final_thinking_problem(conversation[-2], conversation[-1])
    return None


def calls_problem(index: int, blocks: list[Any], following: list[Any] | None) -> str | None:
    """Each call of an assistant turn must be answered at the head of the next turn (if there is one)."""
    if following is None:
        return None
    answered = leading_results(following)
    calls = [str(b.get("id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
    missing = [call for call in calls if call not in answered]
    if not missing:
        return None
    return (
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
        "in the next message."
    )


def results_problem(index: int, blocks: list[Any], calls: list[str]) -> str | None:
    """Each result of a user turn must answer a call of the assistant turn before it."""
    for n, block in enumerate(blocks):
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and str(block.get("tool_use_id")) not in calls
        ):
            return (
                f"messages.{index}.content.{n}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` block "
                "in the previous message."
            )
    return None


def leading_results(blocks: list[Any]) -> set[str]:
    """The ids answered by the `tool_result` blocks a user turn opens with (results must come first)."""
    ids: set[str] = set()
    for block in blocks:
        if not (isinstance(block, dict) and block.get("type") == "tool_result"):
            break
        ids.add(str(block.get("tool_use_id")))
    return ids


def thinking_problem(index: int, blocks: list[Any]) -> str | None:
    for n, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "thinking" and not signed_thinking(block):
            return f"messages.{index}.content.{n}: Invalid `signature` in `thinking` block"
        if kind == "redacted_thinking" and not verified(block.get("data")):
            return f"messages.{index}.content.{n}: Invalid `data` in `redacted_thinking` block"
    return None


def final_thinking_problem(assistant: tuple[int, str, list[Any]], user: tuple[int, str, list[Any]]) -> str | None:
    """With thinking on, the assistant turn whose calls the last user turn answers must open with thinking."""
    index, role, blocks = assistant
    answers = any(isinstance(b, dict) and b.get("type") == "tool_result" for b in user[2])
    if role != "assistant" or user[1] != "user" or not answers or not blocks:
        return None
    first = blocks[0].get("type") if isinstance(blocks[0], dict) else None
    if first in ("thinking", "redacted_thinking"):
        return None
    return (
        f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. "
        "When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
        "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
        "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
        f"{EXTENDED_THINKING_DOCS}"
    )


def message_object(message_id: str, model: str, content: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
    calls = any(block["type"] == "tool_use" for block in content)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def message_stream(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a message, block by block, as Anthropic streams it."""
    usage = message["usage"]
    opening = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    opening.pop("context_management", None)
    events: list[dict[str, Any]] = [{"type": "message_start", "message": opening}]
    for index, block in enumerate(message["content"]):
        events += block_events(index, block)
        if index == 0:  # Anthropic pings once the first block has started
            events.insert(2, {"type": "ping"})
    totals = {key: usage[key] for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")}
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {**totals, "output_tokens": usage["output_tokens"]},
    }
    if "context_management" in message:
        delta["context_management"] = message["context_management"]
    return [*events, delta, {"type": "message_stop"}]


def block_events(index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    """`content_block_start`, the deltas that build the block, `content_block_stop`."""
    kind = block["type"]
    deltas: list[dict[str, Any]]
    start: dict[str, Any]
    if kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in pieces(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in pieces(block["text"])]
    elif kind == "tool_use":
        start = {**block, "input": {}}
        arguments = orjson.dumps(block["input"]).decode()
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in ["", *pieces(arguments, 64)]]
    else:
        start, deltas = block, []
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]

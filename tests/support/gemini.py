"""The fake upstream's Gemini API (`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`,
`:countTokens`), faithful where Gemini CLI and inflight look.

- Answers as a JSON `GenerateContentResponse`, or as server-sent `data:` events of chunks (CRLF-ended, as
  Google sends them), each with `usageMetadata` (`promptTokenCount`, `cachedContentTokenCount` when the
  implicit cache served some, `candidatesTokenCount`, `thoughtsTokenCount`, `totalTokenCount`).
- Counts the request its own way (o200k_base over the system instruction, the tools' JSON and each part's
  JSON, thought signatures left out) and, past the model's window, refuses as Gemini does: a 400
  `INVALID_ARGUMENT` "The input token count (N) exceeds the maximum number of tokens allowed (M)."
- Validates as the API does and refuses with its words: a function call turn comes after a user turn or a
  function response turn, and a function response turn answers as many calls as the call turn made; every
  `thoughtSignature` is one it issued, on the same part it issued it for, unedited (Gemini CLI's own
  `skip_thought_signature_validator` is let through, as Gemini does).
- Issues a thought part and a signed `thoughtSignature` on each function call, when the request asks for
  thoughts (`thinkingConfig.includeThoughts`).
- Simulates Gemini's implicit cache: per model, the longest run of whole leading contents (after the system
  instruction and tools) that an earlier request began with is read from the cache, if at least
  `min_cache_tokens`; nothing is billed for writing. Each answered request is a line of `bill`.
- Plays an agent (`GeminiTaskAgent`): the task of the Responses fake's `TaskAgent`, each step a command
  through `run_shell_command`, reading its progress from the latest function response (or from a
  `<state_snapshot>` after Gemini CLI compressed its history). It answers Gemini CLI's compression request and
  its verification with a snapshot that quotes the task, and its side requests (a JSON schema: the next-speaker
  and loop checks) with JSON that says to go on.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.support.billing import Bill
from tests.support.prompt_tokens import RememberedTokens
from tests.support.responses import PROGRESS, STEP_DONE, TASK_MARKER, sign, verified

OUTPUT_TOKENS = 20  # what every answer is said to cost
THOUGHT_TOKENS = 12
SKIP_SIGNATURE = "skip_thought_signature_validator"  # Gemini CLI's stand-in, which Gemini accepts
# How Gemini CLI asks for its compression (its system instruction), and how the snapshot it installs opens
COMPRESSION_PROMPT = "distilling chat history into a structured XML <state_snapshot>"
SNAPSHOT = "<state_snapshot>"


def refusal_body(tokens: int, window: int) -> dict[str, Any]:
    message = f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({window})."
    return error_body(message)


def error_body(message: str, code: int = 400, status: str = "INVALID_ARGUMENT") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def signed_digest(part: dict[str, Any]) -> str:
    """What a signature covers: the part's text or its call's name and args (the `id` Gemini CLI adds to a call
    is the client's, not the model's)."""
    call = part.get("functionCall")
    covered = {"name": call.get("name"), "args": call.get("args")} if isinstance(call, dict) else part.get("text")
    return hashlib.sha256(orjson.dumps(covered, option=orjson.OPT_SORT_KEYS)).hexdigest()


def part_signature(part: dict[str, Any], serial: int) -> str:
    """A signature over a part: `verified` by this fake, and only for that part's call or text."""
    return sign({"serial": serial, "part": signed_digest(part)})


def signed_part(part: dict[str, Any]) -> bool:
    signature = part.get("thoughtSignature")
    if signature == SKIP_SIGNATURE:
        return True
    if not verified(signature):
        return False
    payload = orjson.loads(base64.b64decode(str(signature).rsplit(".", 1)[0]))
    return isinstance(payload, dict) and payload.get("part") == signed_digest(part)


def without_signature(part: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in part.items() if key != "thoughtSignature"}


def text_of(content: Any) -> str:
    """The text parts of a content (or a string) joined by newlines."""
    if isinstance(content, str):
        return content
    parts = content.get("parts") if isinstance(content, dict) else None
    return "\n".join(str(p["text"]) for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str))


def response_output(part: dict[str, Any]) -> str:
    response = part["functionResponse"].get("response")
    if isinstance(response, dict) and isinstance(response.get("output"), str):
        return str(response["output"])
    return orjson.dumps(response).decode()


def latest_response(contents: list[Any]) -> str:
    """The output of the conversation's last function response ("" if none)."""
    for content in reversed(contents):
        for part in reversed(content.get("parts") or []):
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                return response_output(part)
    return ""


def shell_tool(tools: list[Any]) -> str | None:
    """The function that runs a shell command: `run_shell_command`, else the first with a `command` property."""
    names: list[str] = []
    for tool in tools:
        for declaration in (tool.get("functionDeclarations") or []) if isinstance(tool, dict) else []:
            schema = declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
            if "command" in (schema.get("properties") or {}):
                names.append(str(declaration.get("name")))
    return "run_shell_command" if "run_shell_command" in names else (names[0] if names else None)


def json_for(schema: Any) -> Any:
    """A value that fits a JSON schema, saying "go on": the next speaker is the user, no loop is seen."""
    if not isinstance(schema, dict):
        return None
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: json_for(sub) for name, sub in properties.items()}
    if kind == "string":
        options = schema.get("enum") or []
        return "user" if "user" in options else (options[0] if options else "")
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    return None


@dataclass
class GeminiTaskAgent:
    """A scripted agent: `steps` shell commands (those of the Responses fake's `TaskAgent`), each printing
    `output_lines` lines (or each step its own of `step_lines`), then a final answer; it fails loudly (a message
    saying so) if the task is gone."""

    steps: int = 30
    output_lines: int = 200
    step_lines: tuple[int, ...] = ()  # the lines of each step in turn; empty: `output_lines` for all

    def lines(self, step: int) -> int:
        """The lines step `step` (from 1) prints."""
        return self.step_lines[step - 1] if 0 < step <= len(self.step_lines) else self.output_lines

    def next_parts(self, payload: dict[str, Any], *, thoughts: bool) -> list[dict[str, Any]]:
        """The parts of the next model content (before signing)."""
        contents = list(payload.get("contents") or [])
        config = payload.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if schema is not None or config.get("responseMimeType") == "application/json":
            return [{"text": orjson.dumps(json_for(schema or {})).decode()}]
        text = orjson.dumps(contents).decode()
        if COMPRESSION_PROMPT in text_of(payload.get("systemInstruction")):
            return [{"text": self.snapshot(contents, step=self.step(contents))}]
        shell = shell_tool(list(payload.get("tools") or []))
        if shell is None:
            return [{"text": "OK."}]
        if TASK_MARKER not in text:
            return [{"text": f"I no longer know my task ({TASK_MARKER} is gone)."}]
        step = self.step(contents)
        parts: list[dict[str, Any]] = []
        if thoughts:
            parts.append({"text": f"Step {step - 1} is done, so step {step} comes next.", "thought": True})
        if step > self.steps:
            return [*parts, {"text": f"All {self.steps} steps are done. FINISHED"}]
        command = self.command(step)
        args = {"command": command, "description": f"Run step {step} of the task"}
        return [*parts, {"functionCall": {"name": shell, "args": args}}]

    def command(self, step: int) -> str:
        """The step's command, without `$(...)`: Gemini CLI refuses command substitution in a shell command."""
        line = f"step {step} log line %g: checked the modules of step {step} and found nothing to change"
        return f"seq -f '{line}' 1 {self.lines(step)}; echo 'STEP {step} DONE'"

    def output(self, step: int) -> str:
        """What the step's command prints (its last newline left out; `%g` writes these numbers as integers)."""
        line = f"checked the modules of step {step} and found nothing to change"
        return "\n".join(
            [*(f"step {step} log line {i}: {line}" for i in range(1, self.lines(step) + 1)), f"STEP {step} DONE"]
        )

    def step(self, contents: list[Any]) -> int:
        """The next step: after the latest function response's, or after what a snapshot says is done (its
        progress, and the `STEP n DONE` of the turns it quotes)."""
        done = [int(n) for n in STEP_DONE.findall(latest_response(contents))]
        if done:
            return max(done) + 1
        texts = [text_of(c) for c in contents]
        summarized = [int(n) for text in texts for n in (*PROGRESS.findall(text), *STEP_DONE.findall(text))]
        return (max(summarized) if summarized else 0) + 1

    def snapshot(self, contents: list[Any], *, step: int) -> str:
        """What a model answers Gemini CLI's compression: the task, quoted, and where it stands."""
        asked = next(
            (
                line
                for content in contents
                if content.get("role") == "user"
                for line in text_of(content).split("\n")
                if TASK_MARKER in line and SNAPSHOT not in line and not PROGRESS.search(line)
            ),
            f"The {TASK_MARKER}, run step by step.",
        )
        return (
            f"{SNAPSHOT}\n<overall_goal>{asked.strip()}</overall_goal>\n"
            f"<task_state>Progress: steps 1 to {step - 1} are done; step {step} is next.</task_state>\n"
            "</state_snapshot>"
        )


@dataclass
class FakeGemini:
    """The Gemini API of the fake upstream; `windows` by model or glob, as the other routes enforce them."""

    agent: GeminiTaskAgent | None = None
    windows: dict[str, int] = field(default_factory=dict)
    min_cache_tokens: int = 1_024  # a shorter prefix is not cached (Gemini 2.5 Flash's minimum)
    reply_text: str = "Hello from the Gemini API."
    serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    cache: set[tuple[str, bytes]] = field(default_factory=set)  # (model, digest of a cached prefix)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    refused: int = 0
    compressions: int = 0  # Gemini CLI's own compression requests answered (its verifying ones included)
    bill: Bill = field(default_factory=Bill)
    rejected: list[str] = field(default_factory=list)  # why a request was refused as malformed
    signatures_seen: int = 0  # signed parts that came back and were verified
    tokens: RememberedTokens = field(default_factory=RememberedTokens)  # each piece counted once

    def blocks(self, payload: dict[str, Any]) -> list[tuple[bytes, int]]:
        """The prompt as the cache sees it: the system instruction and tools as one block, then each content."""
        head = {"systemInstruction": payload.get("systemInstruction"), "tools": payload.get("tools")}
        tokens = self.tokens(text_of(payload.get("systemInstruction"))) + self.tokens(payload.get("tools") or [])
        blocks = [(orjson.dumps(head), tokens)]
        for content in payload.get("contents") or []:
            parts = [without_signature(p) if isinstance(p, dict) else p for p in content.get("parts") or []]
            blocks.append((orjson.dumps(content), 4 + sum(self.part_tokens(p) for p in parts)))
        return blocks

    def part_tokens(self, part: Any) -> int:
        if isinstance(part, dict) and isinstance(part.get("text"), str) and len(part) <= 2:
            return self.tokens(part["text"])
        return self.tokens(part)

    def count(self, payload: dict[str, Any]) -> int:
        return sum(tokens for _, tokens in self.blocks(payload))

    def problem(self, payload: dict[str, Any]) -> str | None:
        """Why the API would refuse this request as malformed (None: it accepts it)."""
        contents = payload.get("contents")
        if not isinstance(contents, list) or not contents:
            return "* GenerateContentRequest.contents: contents is not specified"
        calls = 0
        previous = None
        for index, content in enumerate(contents):
            parts = content.get("parts") if isinstance(content, dict) else None
            if not isinstance(parts, list) or not parts:
                return f"* GenerateContentRequest.contents[{index}].parts: contents.parts must not be empty."
            role = content.get("role")
            responses = sum(1 for p in parts if isinstance(p, dict) and "functionResponse" in p)
            if role == "model":
                has_calls = any(isinstance(p, dict) and "functionCall" in p for p in parts)
                if has_calls and previous not in ("user", "response"):
                    return (
                        "Please ensure that function call turn comes immediately after a user turn or after a "
                        "function response turn."
                    )
                for part in parts:
                    if isinstance(part, dict) and "thoughtSignature" in part:
                        if not signed_part(part):
                            return f"Thought signature is not valid (contents[{index}])."
                        self.signatures_seen += part["thoughtSignature"] != SKIP_SIGNATURE
                calls = sum(1 for p in parts if isinstance(p, dict) and "functionCall" in p)
                previous = "model"
            else:
                if responses and responses != calls:
                    return (
                        "Please ensure that the number of function response parts is equal to the number of "
                        "function call parts of the function call turn."
                    )
                calls = 0
                previous = "response" if responses else "user"
        return None

    def answer(
        self, model: str, payload: dict[str, Any], *, stream: bool
    ) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]] | None]:
        """(status, a JSON body, or the chunks of a stream) for one request to `model`."""
        problem = self.problem(payload)
        if problem is not None:
            self.rejected.append(problem)
            return 400, error_body(problem), None
        blocks = self.blocks(payload)
        tokens = sum(t for _, t in blocks)
        window = next((w for pattern, w in self.windows.items() if fnmatch.fnmatchcase(model, pattern)), None)
        if window is not None and tokens > window:
            self.refused += 1
            self.bill.refuse()
            return 400, refusal_body(tokens, window), None
        cached = self.read_cache(model, blocks)
        self.prompt_tokens += tokens
        self.cached_tokens += cached
        own = COMPRESSION_PROMPT in text_of(payload.get("systemInstruction"))
        self.compressions += own
        serial = next(self.serial)
        config = payload.get("generationConfig") or {}
        thinking = config.get("thinkingConfig") or {}
        thoughts = bool(thinking.get("includeThoughts"))
        agent = self.agent
        parts = agent.next_parts(payload, thoughts=thoughts) if agent is not None else [{"text": self.reply_text}]
        first_call = next((p for p in parts if "functionCall" in p), None)
        if first_call is not None and thoughts:
            first_call["thoughtSignature"] = part_signature(first_call, serial)
        thought_tokens = THOUGHT_TOKENS if any(p.get("thought") for p in parts) else 0
        usage: dict[str, Any] = {"promptTokenCount": tokens, "candidatesTokenCount": OUTPUT_TOKENS}
        if cached:
            usage["cachedContentTokenCount"] = cached
        if thought_tokens:
            usage["thoughtsTokenCount"] = thought_tokens
        usage["totalTokenCount"] = tokens + OUTPUT_TOKENS + thought_tokens
        self.bill.add(
            "own compaction" if own else "agent",
            uncached=tokens - cached,
            cache_read=cached,
            output=OUTPUT_TOKENS + thought_tokens,
        )
        reply = {
            "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": f"gemini-{serial:06d}",
        }
        if stream:
            return 200, None, chunks_of(reply)
        return 200, reply, None

    def count_tokens(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """`:countTokens`: the same count, of `contents` or of a `generateContentRequest`, with no window."""
        request = payload.get("generateContentRequest")
        counted = request if isinstance(request, dict) else payload
        if not isinstance(counted.get("contents"), list):
            return 400, error_body("* CountTokensRequest.contents: contents is not specified")
        return 200, {"totalTokens": self.count(counted)}

    def read_cache(self, model: str, blocks: list[tuple[bytes, int]]) -> int:
        """The tokens of the longest prefix of whole blocks an earlier request began with; this prefix's every
        run of blocks is remembered for later ones (implicit caching bills no write)."""
        running = hashlib.sha256()
        read, total = 0, 0
        for key, tokens in blocks:
            running.update(hashlib.sha256(key).digest())
            total += tokens
            digest = running.copy().digest()
            if (model, digest) in self.cache and total >= self.min_cache_tokens:
                read = total
            self.cache.add((model, digest))
        return read


def chunks_of(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """A reply as a stream: a chunk per part, the finish reason on the last one, usage on every one."""
    candidate = reply["candidates"][0]
    parts = candidate["content"]["parts"]
    chunks = []
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        piece: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if last:
            piece["finishReason"] = candidate["finishReason"]
        chunks.append({**reply, "candidates": [piece]})
    return chunks


def sse_chunk(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"


def model_of(path: str) -> tuple[str, str] | None:
    """(model, method) from `/v1beta/models/{model}:{method}` (None: not such a path)."""
    prefix = "/v1beta/models/"
    if not path.startswith(prefix) or ":" not in path[len(prefix) :]:
        return None
    model, method = path[len(prefix) :].rsplit(":", 1)
    return model, method


def summary_reply(text: str, finish_reason: str) -> dict[str, Any]:
    """A summarizer's reply as Gemini gives it (cut short: `MAX_TOKENS`)."""
    reason = "MAX_TOKENS" if finish_reason == "length" else "STOP"
    return {
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": reason, "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 50, "totalTokenCount": 150},
    }

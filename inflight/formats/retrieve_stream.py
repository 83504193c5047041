"""One client stream made of several upstream answers: the `inflight_retrieve` calls taken out, and each
continuation stitched in after what was already sent.

A stitch reads the upstream's events one at a time and returns what the client gets now: the events of the
client's own output as they come, with their indices (choice tool calls, content blocks, output items)
renumbered so the tool's calls leave no gap; the tool's events are kept back, as is the end of the answer
(the finish, the usage, `[DONE]`, `message_stop`, `response.completed`). When the stream ends, `calls` says
whether the model called the tool, and `answer` is what it said, for the continuation's body. After the last
round, `finish` sends the end once, with the rounds' usage summed. No I/O here.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from inflight.codecs.sse import event_data
from inflight.compaction.retrieval import TOOL_NAME
from inflight.formats.retrieve_tool import (
    Call,
    Document,
    GeminiShape,
    gemini_calls,
    gemini_ours,
    gemini_parts,
    summed_usage,
)

Event = bytes


class Stitch(Protocol):
    def event(self, event: Event) -> list[bytes]:
        """What the client gets now for one upstream event (each ends with its blank line)."""
        ...

    def calls(self) -> tuple[list[Call], bool]:
        """This round's calls to the tool, and whether it called the client's tools too."""
        ...

    def answer(self) -> Document:
        """This round's output, as the format's JSON answer (for `ToolShape.continued`)."""
        ...

    def next_round(self) -> None:
        """A continuation begins: its events follow what was sent."""
        ...

    def finish(self) -> list[bytes]:
        """The end of the client's stream, kept back until now."""
        ...


def data_of(event: Event) -> Any:
    data = event_data(event)
    try:
        return orjson.loads(data) if data and data != b"[DONE]" else None
    except orjson.JSONDecodeError:
        return None


def sse(document: Document, name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + orjson.dumps(document) + b"\n\n"


class ChatStitch:
    """Chat Completions chunks: the tool's calls are entries of `delta.tool_calls`, by their `index`."""

    def __init__(self) -> None:
        self.usages: list[Document] = []  # each round's usage chunk
        self.usage_event = b""  # the last one as it came
        self.client_calls = 0  # the client's tool calls sent so far, over every round: the next one's index
        self.done: bytes | None = None
        self._round()

    def _round(self) -> None:
        self.text: list[str] = []
        self.entries: dict[int, Document] = {}  # every call of this round by the upstream's index
        self.ours: set[int] = set()
        self.renumbered: dict[int, int] = {}
        self.finish_chunk: Document | None = None

    def event(self, event: Event) -> list[bytes]:
        if event_data(event).strip() == b"[DONE]":
            self.done = event + b"\n\n"
            return []
        chunk = data_of(event)
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list):
            return [event + b"\n\n"]
        if not chunk["choices"]:
            if isinstance(chunk.get("usage"), dict):
                self.usages.append(chunk)
                self.usage_event = event + b"\n\n"
                return []
            return [event + b"\n\n"]
        choice = chunk["choices"][0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            return [event + b"\n\n"]
        if isinstance(delta.get("content"), str):
            self.text.append(delta["content"])
        calls = delta.get("tool_calls")
        if isinstance(calls, list) and calls:
            kept = [entry for entry in (self._call(call) for call in calls) if entry is not None]
            delta = {**delta, "tool_calls": kept} if kept else {k: v for k, v in delta.items() if k != "tool_calls"}
            choice = {**choice, "delta": delta}
            if not kept and not delta and choice.get("finish_reason") is None:
                return []
        if choice.get("finish_reason") is not None and self.ours:
            self.finish_chunk = {**chunk, "choices": [choice]}
            return []
        return [sse({**chunk, "choices": [choice, *chunk["choices"][1:]]})]

    def _call(self, call: Any) -> Document | None:
        """One entry of `delta.tool_calls`: None if it is the tool's, else renumbered."""
        if not isinstance(call, dict) or not isinstance(call.get("index"), int):
            return call if isinstance(call, dict) else None
        index = call["index"]
        function: Document = call["function"] if isinstance(call.get("function"), dict) else {}
        entry = self.entries.setdefault(index, {"id": "", "name": "", "arguments": ""})
        entry["id"] = call.get("id") or entry["id"]
        entry["name"] = function.get("name") or entry["name"]
        entry["arguments"] += function.get("arguments") or ""
        if entry["name"] == TOOL_NAME:
            self.ours.add(index)
        if index in self.ours:
            return None
        if index not in self.renumbered:
            self.renumbered[index] = self.client_calls
            self.client_calls += 1
        return {**call, "index": self.renumbered[index]}

    def calls(self) -> tuple[list[Call], bool]:
        ours = [Call(str(self.entries[i]["id"]), str(self.entries[i]["arguments"])) for i in sorted(self.ours)]
        return ours, bool(set(self.entries) - self.ours)

    def answer(self) -> Document:
        calls = [
            {"id": e["id"], "type": "function", "function": {"name": e["name"], "arguments": e["arguments"]}}
            for _, e in sorted(self.entries.items())
        ]
        message = {"role": "assistant", "content": "".join(self.text) or None, "tool_calls": calls}
        return {"choices": [{"index": 0, "message": message}]}

    def next_round(self) -> None:
        self._round()

    def finish(self) -> list[bytes]:
        out: list[bytes] = []
        if self.finish_chunk is not None:  # the last round still called the tool: the answer ends here
            choice = self.finish_chunk["choices"][0]
            reason = "tool_calls" if set(self.entries) - self.ours else "stop"
            out.append(sse({**self.finish_chunk, "choices": [{**choice, "finish_reason": reason}]}))
        if len(self.usages) == 1:
            out.append(self.usage_event)
        elif self.usages:
            last = orjson.loads(orjson.dumps(self.usages[-1]))
            summed_usage(last, self.usages[:-1], ("prompt_tokens", "completion_tokens", "total_tokens"))
            out.append(sse(last))
        if self.done is not None:
            out.append(self.done)
        return out


class MessagesStitch:
    """Anthropic Messages events: the tool's calls are `tool_use` content blocks, by their `index`."""

    def __init__(self) -> None:
        self.blocks_sent = 0  # the client's content blocks so far, over every round: the next one's index
        self.first = True
        self.usage: Document = {}  # summed over the rounds
        self.delta: Document | None = None
        self.stop: bytes | None = None
        self._round()

    def _round(self) -> None:
        self.blocks: dict[int, Document] = {}  # every block of this round by the upstream's index
        self.partial: dict[int, str] = {}  # a tool_use block's input JSON as it comes
        self.ours: set[int] = set()
        self.renumbered: dict[int, int] = {}

    def event(self, event: Event) -> list[bytes]:
        document = data_of(event)
        kind = document.get("type") if isinstance(document, dict) else None
        if not isinstance(document, dict) or kind is None:
            return [event + b"\n\n"]
        if kind == "message_start":
            self._add_usage((document.get("message") or {}).get("usage"), only=PROMPT_USAGE)
            if not self.first:
                return []
            self.first = False
            return [event + b"\n\n"]
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            return self._block(kind, document)
        if kind == "message_delta":
            self._add_usage(document.get("usage"), only=("output_tokens",))
            self.delta = document
            return []
        if kind == "message_stop":
            self.stop = event + b"\n\n"
            return []
        return [event + b"\n\n"]

    def _add_usage(self, usage: Any, *, only: tuple[str, ...]) -> None:
        for key in only:
            if isinstance(usage, dict) and isinstance(usage.get(key), int):
                self.usage[key] = self.usage.get(key, 0) + usage[key]

    def _block(self, kind: str, document: Document) -> list[bytes]:
        index = document.get("index")
        if not isinstance(index, int):
            return [sse(document, kind)]
        if kind == "content_block_start":
            block: Document = document["content_block"] if isinstance(document.get("content_block"), dict) else {}
            self.blocks[index] = dict(block)
            if block.get("type") == "tool_use" and block.get("name") == TOOL_NAME:
                self.ours.add(index)
        elif kind == "content_block_delta":
            self._grow(index, document.get("delta"))
        if index in self.ours:
            return []
        if index not in self.renumbered:
            self.renumbered[index] = self.blocks_sent
            self.blocks_sent += 1
        return [sse({**document, "index": self.renumbered[index]}, kind)]

    def _grow(self, index: int, delta: Any) -> None:
        block = self.blocks.setdefault(index, {})
        if not isinstance(delta, dict):
            return
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text") or "")
        elif kind == "input_json_delta":
            self.partial[index] = self.partial.get(index, "") + str(delta.get("partial_json") or "")
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = str(delta.get("signature") or "")

    def _input(self, index: int) -> Any:
        try:
            return orjson.loads(self.partial[index]) if self.partial.get(index) else self.blocks[index].get("input", {})
        except orjson.JSONDecodeError:
            return {}

    def calls(self) -> tuple[list[Call], bool]:
        ours = [Call(str(self.blocks[i].get("id")), orjson.dumps(self._input(i)).decode()) for i in sorted(self.ours)]
        others = any(b.get("type") == "tool_use" for i, b in self.blocks.items() if i not in self.ours)
        return ours, others

    def answer(self) -> Document:
        blocks = []
        for index, block in sorted(self.blocks.items()):
            blocks.append({**block, "input": self._input(index)} if block.get("type") == "tool_use" else block)
        return {"content": blocks}

    def next_round(self) -> None:
        self._round()

    def finish(self) -> list[bytes]:
        out: list[bytes] = []
        if self.delta is not None:
            delta = dict(self.delta.get("delta") or {})
            others = any(b.get("type") == "tool_use" for i, b in self.blocks.items() if i not in self.ours)
            if self.ours and delta.get("stop_reason") == "tool_use" and not others:
                delta["stop_reason"] = "end_turn"
            usage = {**(self.delta.get("usage") or {}), **self.usage}
            out.append(sse({**self.delta, "delta": delta, "usage": usage}, "message_delta"))
        if self.stop is not None:
            out.append(self.stop)
        return out


PROMPT_USAGE = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
ENDS = ("response.completed", "response.incomplete", "response.failed")


class ResponsesStitch:
    """Responses API events: the tool's calls are `function_call` output items, by their `output_index`."""

    def __init__(self) -> None:
        self.items_sent = 0  # the client's output items so far, over every round: the next one's index
        self.sequence = 0  # events sent, renumbered so `sequence_number` still counts up
        self.first = True
        self.ends: list[Document] = []  # each round's final event
        self.kept: list[Document] = []  # the client's output items of every round
        self._round()

    def _round(self) -> None:
        self.items: dict[int, Document] = {}  # every output item of this round by the upstream's index
        self.ours: set[int] = set()
        self.renumbered: dict[int, int] = {}
        self.end: Document | None = None

    def _send(self, document: Document) -> bytes:
        document = {**document, "sequence_number": self.sequence} if "sequence_number" in document else document
        self.sequence += 1
        return sse(document, str(document.get("type")))

    def event(self, event: Event) -> list[bytes]:
        document = data_of(event)
        kind = document.get("type") if isinstance(document, dict) else None
        if not isinstance(document, dict) or not isinstance(kind, str):
            return [event + b"\n\n"]
        if kind in ("response.created", "response.in_progress", "response.queued"):
            if not self.first:
                return []
            return [self._send(document)]
        if kind in ENDS:
            self.first = False
            self.end = document
            self.ends.append(document)
            return []
        index = document.get("output_index")
        if not isinstance(index, int):
            return [self._send(document)]
        item = document.get("item")
        if isinstance(item, dict):
            self.items[index] = item
            if item.get("type") == "function_call" and item.get("name") == TOOL_NAME:
                self.ours.add(index)
        if index in self.ours:
            return []
        if index not in self.renumbered:
            self.renumbered[index] = self.items_sent
            self.items_sent += 1
        return [self._send({**document, "output_index": self.renumbered[index]})]

    def _output(self) -> list[Document]:
        """This round's items: the final event's, else those the stream announced."""
        response = (self.end or {}).get("response")
        output = response.get("output") if isinstance(response, dict) else None
        if isinstance(output, list):
            return [item for item in output if isinstance(item, dict)]
        return [item for _, item in sorted(self.items.items())]

    def calls(self) -> tuple[list[Call], bool]:
        ours, others = [], False
        for item in self._output():
            if item.get("type") == "function_call" and item.get("name") == TOOL_NAME:
                ours.append(Call(str(item.get("call_id")), str(item.get("arguments") or "")))
            elif item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                others = True
        return ours, others

    def answer(self) -> Document:
        return {"output": self._output()}

    def next_round(self) -> None:
        self.kept += [item for item in self._output() if not is_ours(item)]
        self._round()

    def finish(self) -> list[bytes]:
        if self.end is None:
            return []
        response = dict(self.end.get("response") or {})
        response["output"] = [*self.kept, *(item for item in self._output() if not is_ours(item))]
        summed_usage(response, [end.get("response") or {} for end in self.ends[:-1]], RESPONSES_USAGE)
        return [self._send({**self.end, "response": response})]


RESPONSES_USAGE = ("input_tokens", "output_tokens", "total_tokens")


def is_ours(item: Document) -> bool:
    return item.get("type") == "function_call" and item.get("name") == TOOL_NAME


class GeminiStitch:
    """Gemini's stream (`alt=sse`): each event a whole `GenerateContentResponse` whose candidate holds a few parts,
    the tool's calls whole `functionCall` parts among them; the event with the `finishReason` is the end."""

    usage_keys = GeminiShape.usage_keys

    def __init__(self) -> None:
        self.usages: list[Document] = []  # each earlier round's usage, as its last event gave it
        self.end: Document | None = None  # the end of a round that called the tool, kept back
        self.rounds = 0
        self._round()

    def _round(self) -> None:
        self.parts: list[Document] = []
        self.usage: Document | None = None

    def event(self, event: Event) -> list[bytes]:
        chunk = data_of(event)
        candidates = chunk.get("candidates") if isinstance(chunk, dict) else None
        if not isinstance(chunk, dict) or not isinstance(candidates, list) or not candidates:
            return [event + b"\n\n"]
        candidate = candidates[0] if isinstance(candidates[0], dict) else {}
        parts = gemini_parts(chunk)
        self.parts += parts
        if isinstance(chunk.get("usageMetadata"), dict):
            self.usage = chunk["usageMetadata"]
        ours = any(gemini_ours(part) for part in parts)
        called = any(gemini_ours(part) for part in self.parts)
        finished = candidate.get("finishReason") is not None
        if not ours and not (finished and (called or self.rounds)):
            return [event + b"\n\n"]  # as it came
        if finished and not called:  # the last round's end: its counts are every round's
            return [sse(self.summed(chunk))]
        kept = [part for part in parts if not gemini_ours(part)]
        if finished:
            self.end = chunk
        if not kept:
            return []
        found = candidate.get("content")
        content: Document = found if isinstance(found, dict) else {"role": "model"}
        passing = {key: value for key, value in candidate.items() if key != "finishReason"}
        passing["content"] = {**content, "parts": kept}
        return [sse({**chunk, "candidates": [passing, *candidates[1:]]})]

    def summed(self, chunk: Document) -> Document:
        """`chunk` with its usage summed with every earlier round's."""
        out: Document = orjson.loads(orjson.dumps(chunk))
        earlier = [{"usageMetadata": usage} for usage in self.usages]
        summed_usage(out, earlier, self.usage_keys, field="usageMetadata")
        return out

    def calls(self) -> tuple[list[Call], bool]:
        return gemini_calls(self.parts)

    def answer(self) -> Document:
        return {"candidates": [{"content": {"role": "model", "parts": self.parts}}]}

    def next_round(self) -> None:
        self.usages.append(self.usage or {})
        self.rounds += 1
        self.end = None
        self._round()

    def finish(self) -> list[bytes]:
        if self.end is None:
            return []
        # The last round still called the tool (the rounds ran out, or it called the client's tools too): its end,
        # with an empty text where the tool's calls were.
        end, self.end = self.end, None
        candidates = end["candidates"]
        found = candidates[0].get("content")
        content: Document = found if isinstance(found, dict) else {}
        ended = {**candidates[0], "content": {"role": "model", **content, "parts": [{"text": ""}]}}
        return [sse(self.summed({**end, "candidates": [ended, *candidates[1:]]}))]


def stitch_for(name: str) -> Stitch | None:
    """A new stitch for one stream of the format `name` (None: the format does not offer the tool)."""
    if name == "chat_completions":
        return ChatStitch()
    if name == "messages":
        return MessagesStitch()
    if name == "responses":
        return ResponsesStitch()
    if name == "gemini":
        return GeminiStitch()
    return None

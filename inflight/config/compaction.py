"""The `compaction:` section of the YAML: thresholds, the stages' settings, the summarizer, the record cache.

It lives apart from `inflight.config.settings` because it is the largest section and grows with each stage;
the rules are the same: frozen models that refuse unknown keys.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from inflight.config.section import Section


class Truncate(Section):
    max_lines: int = Field(2000, ge=4)
    max_bytes: int = Field(51200, ge=256)


# Markers of a text-action agent's observation (SWE-agent's prompt lines, OpenHands, ReAct, <output>).
OBSERVATION_PATTERN = (
    r"\(Open file: |\(Current directory: |^bash-\$\s*$|^(?:Observation|OBSERVATION|EXECUTION RESULT)\b"
    r"|^(?:Command output|Tool output|Output):|^<output>|^Exit code: \d+"
)


class Mask(Section):
    keep_tool_results: int = Field(5, ge=0)
    keep_tool_results_min: int = Field(2, ge=0)
    # A user message matching this (re.MULTILINE) is an observation, truncated and masked like a tool
    # result, except in the head or as the latest user message. null: only `role: tool` results are masked.
    observation_pattern: str | None = OBSERVATION_PATTERN

    @field_validator("observation_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value, re.MULTILINE)
            except re.error as exc:
                raise ValueError(f"observation_pattern is not a regular expression: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _ordered(self) -> Mask:
        if self.keep_tool_results_min > self.keep_tool_results:
            raise ValueError("keep_tool_results_min must not exceed keep_tool_results")
        return self


class Summarize(Section):
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(60, gt=0)
    max_summary_tokens: int = Field(2000, ge=64)
    keep_recent_tokens: int = Field(8000, ge=0)
    fallback_models: tuple[str, ...] = ()
    clip_tool_output_chars: int = Field(1800, ge=100)
    prompt_file: str | None = None  # the summarizer's instructions; None: inflight/compaction/prompts/summary.md
    # Background summaries (`inflight.compaction.background.scheduler`): a job starts when a request passes this
    # fraction of the budget, so the turn that passes summarize_at finds its summary ready.
    # null: the summary is made on that turn, while the client waits.
    background_at: float | None = Field(0.6, gt=0, le=1)
    wait_s: float = Field(2, ge=0)  # how long that turn waits for a running job before using a ledger digest
    max_concurrent_jobs: int = Field(4, ge=1)  # background summaries at once (only the global block's value counts)
    # A streaming request that waits longer than this for its compaction gets SSE comment lines meanwhile.
    # null (default): never. The first comment commits the 200 status, so a later error is sent as an SSE event.
    keepalive_after_s: float | None = Field(None, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL such as http://127.0.0.1:8080/v1, got {value!r}")
        return value.rstrip("/") if value is not None else None

    @field_validator("prompt_file")
    @classmethod
    def _readable_prompt(cls, value: str | None) -> str | None:
        try:
            text = Path(value).read_text(encoding="utf-8") if value else "## none"
        except OSError as exc:
            raise ValueError(f"cannot read the summarizer prompt {value!r}: {exc.strerror}") from exc
        if "\n## " not in f"\n{text}":
            raise ValueError(f"{value!r} names no sections: a reply is checked for the prompt's `## ` headings")
        return value


class Cache(Section):
    """Limits on compaction records kept in memory: by conversations, by bytes and by age.

    Records hold the masked and truncated messages, so a few big conversations can weigh more than many small ones."""

    max_entries: int = Field(10000, ge=1)
    max_bytes: int = Field(128 * 1024 * 1024, ge=1024 * 1024)
    ttl_s: float = Field(86400, gt=0)


class Retrieval(Section):
    """`compaction.retrieval`: whether the model may read back what compaction took out (`inflight_retrieve`).

    `tool`: once a conversation is compacted, and if its request offers tools, inflight adds the tool and answers
    its calls itself; `off`: placeholders name no handle and no tool is added; `auto` (default): as `tool`, in
    every format with the tool's shape. It is added with the first compaction, which rewrites the prefix anyway;
    where cache writes bear a premium (Anthropic's Messages API) that costs one more write of the tools and system
    prompt, once. A bare mode (YAML's `off` is false) stands for the mode alone."""

    mode: Literal["auto", "tool", "off"] = "auto"
    max_rounds: int = Field(3, ge=1, le=10)  # calls answered in one turn before the answer goes to the client
    # The calls of one round that are read back; the rest are answered "unavailable: too many calls" unread.
    max_calls: int = Field(16, ge=1, le=1000)
    max_chars: int = Field(40_000, ge=1000)  # the most of an original one call returns (a note says when clipped)
    ttl_s: float = Field(86400, gt=0)  # how long an original is kept
    max_bytes: int = Field(64 * 1024 * 1024, ge=1024 * 1024)  # all originals kept in this process, as stored (UTF-8)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        if isinstance(value, bool):  # YAML reads a bare `off` as false
            return {"mode": "tool" if value else "off"}
        return {"mode": value} if isinstance(value, str) else value


class Compaction(Section):
    enabled: bool = True
    # "shadow": the client's bytes go upstream unchanged and the answer comes back unchanged; what compaction
    # would have sent is planned and recorded (log line, metrics, archive), to measure it on real traffic first.
    mode: Literal["active", "shadow"] = "active"
    # In shadow mode, whether the planned summaries are requested from the summarizer (background jobs, never
    # waited for); false: none is made, and the plan uses a ledger digest instead (no summarizer call, no cost).
    shadow_summaries: bool = False
    reserve_tokens: int = Field(16384, ge=0)
    prune_at: float = Field(0.70, gt=0, le=1)
    summarize_at: float = Field(0.85, gt=0, le=1)
    target: float = Field(0.50, gt=0, le=1)
    # A compaction goes deep enough that the conversation, growing as its recent turns did, reaches
    # summarize_at again no sooner than this many turns later (each compaction invalidates the prompt cache).
    min_turns_between: int = Field(4, ge=0)
    # "cost": after prune_at (the first) or summarize_at (later ones), compact when and as deep as costs least per
    # turn at the upstream's prices (`pricing:`). "thresholds": compact at prune_at and summarize_at, deep enough
    # for min_turns_between turns.
    schedule: Literal["cost", "thresholds"] = "cost"
    # "cost": compact whenever that lowers the expected bill, at any size; prune_at and summarize_at are then the
    # latest a compaction may come (a safety net). "fit": nothing changes before prune_at (the window needs it).
    # Either way the agent's recent work (`summarize.keep_recent_tokens`, `mask.keep_tool_results`) goes verbatim.
    goal: Literal["cost", "fit"] = "cost"
    truncate: Truncate = Truncate()
    mask: Mask = Mask()
    summarize: Summarize = Summarize()
    cache: Cache = Cache()
    retrieval: Retrieval = Retrieval()

    @model_validator(mode="after")
    def _ordered(self) -> Compaction:
        if not self.target <= self.prune_at <= self.summarize_at:
            raise ValueError(
                f"expected target <= prune_at <= summarize_at, got {self.target}, {self.prune_at}, {self.summarize_at}"
            )
        background_at = self.summarize.background_at
        if background_at is not None and background_at > self.summarize_at:
            raise ValueError(
                f"summarize.background_at ({background_at}) must not exceed summarize_at ({self.summarize_at}): "
                "the summary is made ahead of the turn that needs it"
            )
        return self

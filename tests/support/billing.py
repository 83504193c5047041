"""What the fake upstream would bill: one line per request it answered, priced in uncached input tokens.

The fakes append a line for each answered request (the agent's own, the agent's own compaction, the
proxy's summaries); a refused request costs nothing and is only counted. It is priced with inflight's own
`Prices` (per token, in units of one uncached input token). OpenAI's Responses API has no write premium, so
its fake bills no writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from inflight.config import Prices

Kind = Literal["agent", "own compaction", "summary"]


@dataclass(frozen=True)
class Line:
    """One answered request: its prompt split by how the cache served it, and its output."""

    kind: Kind
    uncached: int
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    @property
    def prompt(self) -> int:
        return self.uncached + self.cache_read + self.cache_write


@dataclass
class Bill:
    """The lines of every answered request, and how many requests were refused for the context's length."""

    lines: list[Line] = field(default_factory=list)
    refusals: int = 0

    def add(self, kind: Kind, *, uncached: int, cache_read: int = 0, cache_write: int = 0, output: int = 0) -> None:
        self.lines.append(Line(kind, uncached, cache_read, cache_write, output))

    def refuse(self) -> None:
        self.refusals += 1

    def requests(self, kind: Kind | None = None) -> int:
        """The answered requests (of one kind, when named)."""
        return sum(1 for line in self.lines if kind is None or line.kind == kind)

    def split(self, prices: Prices) -> dict[str, float]:
        """The cost by part: cache reads, cache writes, uncached input and output of the agent's requests
        (its own compaction included), and the proxy's summaries whole."""
        parts = {"reads": 0.0, "writes": 0.0, "uncached": 0.0, "output": 0.0, "summaries": 0.0}
        for line in self.lines:
            costs = {
                "reads": line.cache_read * prices.cache_read,
                "writes": line.cache_write * prices.cache_write,
                "uncached": line.uncached * prices.input,
                "output": line.output * prices.output,
            }
            if line.kind == "summary":
                parts["summaries"] += sum(costs.values())
            else:
                for name, value in costs.items():
                    parts[name] += value
        return parts

    def cost(self, prices: Prices) -> float:
        """The whole bill, in uncached input tokens."""
        return sum(self.split(prices).values())

    @property
    def cached_share(self) -> float:
        """Cache-read tokens over every prompt token billed (summaries included)."""
        prompt = sum(line.prompt for line in self.lines)
        return sum(line.cache_read for line in self.lines) / prompt if prompt else 0.0

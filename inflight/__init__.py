"""inflight: a transparent OpenAI-compatible proxy that keeps agent conversations inside the context window.

Nothing here imports the web stack: the app lives in `inflight.app`, the pure core in `inflight.tokens`,
`inflight.compaction` and `inflight.policy`.
"""

from __future__ import annotations

__version__ = "0.1.0"

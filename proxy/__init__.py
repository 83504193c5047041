"""inflight: a transparent OpenAI-compatible proxy that keeps agent conversations inside the context window."""

from __future__ import annotations

__version__ = "0.1.0"

from proxy.app import create_app  # noqa: E402
from proxy.config import load_settings  # noqa: E402

__all__ = ["__version__", "create_app", "load_settings"]

"""The base of every YAML section: frozen, and refusing keys it does not know (a typo is an error, not ignored)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

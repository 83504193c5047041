"""The settings: one YAML file read into frozen, typed sections (`load_settings`), every value checked.

`settings` holds the top-level sections and `Settings` itself, `compaction` the `compaction:`
sections (which `models:` entries may override per model), `loading` reads the file (with
`${VAR:-default}` from the environment) and names the key and the file in every error.
"""

from inflight.config.compaction import OBSERVATION_PATTERN, Cache, Compaction, Mask, Retrieval, Summarize, Truncate
from inflight.config.loading import interpolate_env, load_settings
from inflight.config.pricing import Prices, Pricing
from inflight.config.section import Section
from inflight.config.settings import (
    Access,
    Archive,
    ConfigError,
    Limits,
    Listen,
    ModelEntry,
    ModelSettings,
    Responses,
    Settings,
    State,
    Telemetry,
    Upstream,
    deep_merge,
    describe,
)

__all__ = [
    "OBSERVATION_PATTERN",
    "Access",
    "Archive",
    "Cache",
    "Compaction",
    "ConfigError",
    "Limits",
    "Listen",
    "Mask",
    "ModelEntry",
    "ModelSettings",
    "Prices",
    "Pricing",
    "Responses",
    "Retrieval",
    "Section",
    "Settings",
    "State",
    "Summarize",
    "Telemetry",
    "Truncate",
    "Upstream",
    "deep_merge",
    "describe",
    "interpolate_env",
    "load_settings",
]

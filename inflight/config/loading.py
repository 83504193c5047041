"""Read the YAML file: expand `${VAR}` from the environment, then validate it into `Settings`.

`load_settings` is the only loader; its errors name the key and the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from inflight.config.settings import DATA_DIR, ConfigError, Settings, deep_merge, describe

DATA_DIR_VARIABLE = "INFLIGHT_DATA_DIR"
ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate_lines(text: str, expand: Callable[[str], str] | None = None) -> str:
    """Expand `${VAR}` before parsing (so `{port: ${PORT}}` works), except on comment lines, so that a
    commented-out `# api_key: ${OPENAI_API_KEY}` does not require the variable."""
    expand = expand or interpolate_env
    return "".join(line if line.lstrip().startswith("#") else expand(line) for line in text.splitlines(keepends=True))


def placeholders(line: str) -> str:
    """Each `${VAR}` as one plain word: the document's shape as written, whatever the variables hold."""
    return ENV_PATTERN.sub(lambda match: f"inflight-variable-{match.group(1)}", line)


def same_shape(written: Any, expanded: Any, key: str = "") -> None:
    """Refuse a document whose lists and maps a variable's value changed (`keys: [${K}]` with `K="a, b"` gives
    two keys, not one): each is named, since a secret split in two or merged into a map would pass validation."""
    where = key or "the top level"
    if isinstance(written, dict) != isinstance(expanded, dict) or isinstance(written, list) != isinstance(
        expanded, list
    ):
        raise ConfigError(f"{where}: an environment variable's value changed its shape (quote the ${{...}})")
    if isinstance(written, dict) and isinstance(expanded, dict):  # a variable may name a key: compared in order
        if len(written) != len(expanded):
            raise ConfigError(f"{where}: an environment variable's value changed its keys (quote the ${{...}})")
        for one, (name, other) in zip(written.values(), expanded.items(), strict=True):
            same_shape(one, other, f"{key}.{name}" if key else str(name))
    elif isinstance(written, list) and isinstance(expanded, list):
        if len(written) != len(expanded):
            raise ConfigError(f"{where}: an environment variable's value changed its length (quote the ${{...}})")
        for index, (one, other) in enumerate(zip(written, expanded, strict=True)):
            same_shape(one, other, f"{key}[{index}]")


def interpolate_env(text: str, environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """Expand `${VAR}` and `${VAR:-default}`; an unset `${VAR}` without default is an error."""

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = environ.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise ConfigError(f"environment variable {name} is not set and has no default (use ${{{name}:-}})")
            return default
        return value

    return ENV_PATTERN.sub(replace, text)


def load_settings(path: str | Path | None = None, *, overrides: dict[str, Any] | None = None) -> Settings:
    """Read, interpolate and validate the YAML file (or the built-in defaults when `path` is None).

    `overrides` are nested dicts applied over the file, as the CLI's `--host/--port/--upstream` do.
    A relative path in the settings (a `sqlite:///` state URL, and so the archive beside it) resolves
    under `INFLIGHT_DATA_DIR` when it is set, else stays relative to the working directory.
    """
    raw: dict[str, Any] = {}
    source = "built-in defaults"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {source}: {exc.strerror}") from exc
        loaded = parse_yaml(text, source)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: expected a mapping at the top level, got {type(loaded).__name__}")
        raw = loaded
    if overrides:
        raw = deep_merge(raw, overrides)
    try:
        return Settings.model_validate(raw, context={DATA_DIR: os.environ.get(DATA_DIR_VARIABLE) or None})
    except ValidationError as exc:
        problems = "; ".join(describe(error) for error in exc.errors())
        if overrides and any(overridden(overrides, error["loc"]) for error in exc.errors()):
            source = "the command line" if path is None else f"the command line over {source}"
        raise ConfigError(f"{problems} ({source})") from exc


def parse_yaml(text: str, source: str) -> Any:
    """The YAML document in `text`, `${VAR}` expanded; its errors name `source`, the file it came from."""
    try:
        expanded = yaml.safe_load(interpolate_lines(text))
        if ENV_PATTERN.search(text):
            same_shape(yaml.safe_load(interpolate_lines(text, placeholders)), expanded)
        return expanded
    except yaml.YAMLError as exc:
        for mark in (getattr(exc, "context_mark", None), getattr(exc, "problem_mark", None)):
            if mark is not None:  # a string was parsed: name the file, not `<unicode string>`
                mark.name = source
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"{exc} ({source})") from exc


def overridden(overrides: dict[str, Any], location: tuple[int | str, ...]) -> bool:
    """Whether the value at `location` (a validation error's) is one the command line gave (`--upstream`)."""
    value: Any = overrides
    for part in location:
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True

"""Settings: the sections of the one YAML file, validated once at start-up (`inflight.config.loading` reads it).

Every section is a frozen pydantic model that forbids unknown keys, so a typo in the YAML is an
error naming the key instead of a setting silently ignored. `inflight.config.loading.load_settings` is the only loader.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from inflight.config.compaction import Compaction
from inflight.config.pricing import FormatName, Pricing
from inflight.config.section import Section
from inflight.frozen import frozen


class ConfigError(ValueError):
    """A configuration problem, worded for the person who edits the YAML."""


OPENAI_HOST = "api.openai.com"
ANTHROPIC_API = "https://api.anthropic.com/v1"  # where Messages requests go when the default upstream is OpenAI's
GOOGLE_API = "https://generativelanguage.googleapis.com"  # and Gemini's (its paths carry their version: `/v1beta`)
# The wire formats OpenAI's API lacks, with where they go instead, their name and whose keys they take.
PROVIDER_APIS = {
    "messages": (ANTHROPIC_API, "the Messages API", "Anthropic's"),
    "gemini": (GOOGLE_API, "the Gemini API", "Google's"),
}


def origin_of(base_url: str) -> str:
    """Where a Gemini request goes on the same server: the base URL without its query and its trailing API version
    (`/v1`, or Google's own `/v1beta/openai`), since Gemini's paths carry theirs (`/v1beta/...`): `http://host:8080/v1`
    would make `/v1/v1beta/...`. A gateway's prefix stays (`https://host/llm/v1` gives `https://host/llm`)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    for version in ("/v1beta/openai", "/v1"):
        if path.endswith(version):
            path = path.removesuffix(version)
            break
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class Listen(Section):
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)


class Upstream(Section):
    base_url: str = "https://api.openai.com/v1"
    api_key: str = ""
    connect_timeout_s: float = Field(10, gt=0)
    read_timeout_s: float = Field(600, gt=0)
    max_connections: int = Field(512, ge=1)
    # How `api_key` goes out: `Authorization: Bearer` (OpenAI and most servers) or `x-api-key` (Anthropic).
    # Unset: `x-api-key` for Anthropic Messages requests, Bearer for the rest.
    auth: Literal["bearer", "x-api-key"] | None = None

    # `user:pass@` taken out of base_url, base64-encoded: sent as `Authorization: Basic`, never as part
    # of the URL (which reaches the Host header, error messages and the log).
    basic_auth: str = Field("", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _credentials_out_of_url(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("base_url"), str) or "@" not in data["base_url"]:
            return data
        parts = urlsplit(data["base_url"])
        if parts.username is None and parts.password is None:
            return data
        userinfo = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
        clean = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        return {**data, "base_url": clean, "basic_auth": base64.b64encode(userinfo).decode("ascii")}

    @model_validator(mode="after")
    def _one_authorization(self) -> Upstream:
        if self.basic_auth and self.api_key:
            raise ValueError(
                "upstream.base_url carries user:password and upstream.api_key is set; both would be the "
                "Authorization header: keep one"
            )
        return self

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL such as http://127.0.0.1:8080/v1, got {value!r}")
        return value.rstrip("/")

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key(cls, value: object) -> object:
        # `api_key: ${OPENAI_API_KEY:-}` interpolates to an empty YAML value, which YAML reads as null.
        return "" if value is None else value


class SummarizerBudget(Section):
    """Limits on the summarizer calls clients may cause (the operator pays for them when the proxy holds the key).

    The limits apply per client (identified by its `access.keys` key, else its `Authorization`/`x-api-key`,
    else its address) and to the whole proxy. Over budget, a turn compacts with a ledger digest instead
    (`x-inflight-actions: summary-budget`) and never fails. 0 means no limit."""

    calls_per_minute: int = Field(30, ge=0)
    tokens_per_hour: int = Field(2_000_000, ge=0)  # the summarizer's input tokens, as inflight counts them
    global_calls_per_minute: int = Field(300, ge=0)
    global_tokens_per_hour: int = Field(20_000_000, ge=0)


class Limits(Section):
    """How much one client (or upstream) can make the proxy hold: bodies, headers, events, keys, time, summaries.

    The timeouts limit how long a client that sends slowly or not at all (a slow loris) can keep a
    connection: for its headers, its body, and between requests on a kept-alive connection. They also
    limit how long a client that stops reading its answer keeps the connection and the upstream stream
    behind it (`client_send_timeout_s`). The wait for the upstream's answer is `upstream.read_timeout_s`.
    The byte limits stop a hostile peer, never a real agent.
    """

    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    client_header_timeout_s: float = Field(30, gt=0)  # from a request's first byte to the end of its headers
    client_body_timeout_s: float = Field(300, gt=0)  # from the end of the headers to the last byte of the body
    client_idle_timeout_s: int = Field(30, ge=1)  # a connection with no request in progress (uvicorn's own)
    # How long the answer may wait on a client that reads none of it (its connection's buffers full); then the
    # connection is reset and the upstream stream closed. A client that reads slowly is never cut off.
    client_send_timeout_s: float = Field(60, gt=0)
    max_header_bytes: int = Field(64 * 1024, ge=1024)  # a request's headers: 431 above it, before any key check
    max_upstream_header_bytes: int = Field(64 * 1024, ge=1024)  # an upstream answer's headers: 502 above it
    # The largest first event held back (for a retry) and SSE line kept by a reader (refusal, usage); beyond it,
    # the event is passed on and the line is not read.
    max_event_bytes: int = Field(1024 * 1024, ge=1024)
    # How much of an encoded answer the proxy decompresses to read it (usage, a refusal); beyond it, it stops reading.
    max_inflate_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # A client-sent string used as a map key or written to a log or store (model, session, label) is clipped
    # (logs) or hashed (keys) beyond this length.
    max_key_chars: int = Field(256, ge=16)
    summarizer: SummarizerBudget = SummarizerBudget()


class Access(Section):
    """Who may use the proxy: client keys for `/v1`, admin keys for `/inflight/*` (`/healthz` stays open)."""

    keys: tuple[str, ...] = ()
    # Keys for `/inflight/*` and `/metrics`, never the client keys: a tenant's key must not read every tenant's
    # archive. None: with `keys`, those paths are closed to all; without, open (the archive to localhost only).
    admin_keys: tuple[str, ...] | None = None
    allow_anonymous: bool = False  # inject `upstream.api_key` for anyone who can reach a public address
    # Browser origins allowed to call the proxy while it holds a key and has no `keys` (else 403).
    cors_origins: tuple[str, ...] = ()

    @field_validator("keys", "admin_keys", mode="before")
    @classmethod
    def _drop_empty(cls, value: object) -> object:
        # `- ${INFLIGHT_KEY:-}` interpolates to an empty entry when the variable is unset: not a key.
        if isinstance(value, list | tuple):
            return tuple(key for key in value if key not in (None, ""))
        return value

    @property
    def admin(self) -> tuple[str, ...]:
        return self.admin_keys or ()


DATA_DIR = "data_dir"  # the validation context's key for the directory relative paths resolve under


# A query parameter whose name says it may hold a credential (`?password=`, `?api-key=`, `?sig=`, `?token=`).
CREDENTIAL_NAME = re.compile(r"key|token|secret|pass|sig|auth|cred", re.IGNORECASE)


def redacted_url(url: str) -> str:
    """`url` safe for a log line: a password (`redis://:secret@host`) and any query value that may be a credential
    are replaced with `***`."""
    parts = urlsplit(url)
    if parts.password is None and not parts.query:
        return url
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:***@{host}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, "***" if CREDENTIAL_NAME.search(k) else v) for k, v in pairs], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


class State(Section):
    """Where compaction records and background summaries are kept (`inflight.records`).

    `memory://`: this process only, lost on restart. `sqlite:///inflight.db` (relative) or
    `sqlite:////var/lib/inflight/inflight.db` (absolute): a file, kept across restarts and shared by
    workers on one machine. `redis://host:6379/0`: shared by every worker and replica.

    A relative SQLite path resolves under the data directory (`INFLIGHT_DATA_DIR`, which the image sets
    to its volume `/var/lib/inflight`) when `load_settings` is given one, else under the working
    directory: a config mounted into a container must not put its database in the image's `/app`,
    which its user cannot write."""

    url: str = "memory://"

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str, info: ValidationInfo) -> str:
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in ("memory", "sqlite", "redis", "rediss"):
            raise ValueError(f"expected memory://, sqlite:///PATH or redis://HOST:PORT/DB, got {value!r}")
        if scheme == "sqlite" and (not value.startswith("sqlite:///") or not value.removeprefix("sqlite:///")):
            raise ValueError(f"expected sqlite:///relative/path.db or sqlite:////absolute/path.db, got {value!r}")
        data_dir = (info.context or {}).get(DATA_DIR)
        path = value.removeprefix("sqlite:///")
        if scheme == "sqlite" and data_dir and not PurePath(path).is_absolute():
            return f"sqlite:///{PurePath(data_dir, path)}"
        return value

    @property
    def redacted_url(self) -> str:
        """The URL safe for a log line (`redacted_url`)."""
        if self.scheme not in ("redis", "rediss"):
            return self.url  # memory:// and a file path hold no credentials
        return redacted_url(self.url)

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0]

    @property
    def sqlite_path(self) -> str:
        """The database file of a `sqlite:///PATH` URL (relative to the working directory unless absolute)."""
        return self.url.removeprefix("sqlite:///")

    @property
    def shared(self) -> bool:
        """Whether other processes see these records (so `--workers` may be more than one)."""
        return self.scheme != "memory"


class Archive(Section):
    """Keeps what each compaction dropped, and every turn's token figures, for `/inflight/ui` (`inflight.archive`).

    Off by default, since it stores what clients sent. It is stored where `state.url` points (memory, the
    SQLite file, Redis), with its own retention."""

    enabled: bool = False
    retention_s: float = Field(7 * 24 * 3600, gt=0)
    max_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024)  # memory and SQLite; Redis: its own maxmemory
    max_turns: int = Field(10_000, ge=10)  # per conversation; older turns go first


class Responses(Section):
    """The Responses API's server-side compaction for upstreams that lack it (`POST /v1/responses/compact`).

    `compact_fallback`: answer it when the upstream does not (404, 405, 501). `item_key`: the secret
    that encrypts and authenticates the `compaction` items inflight hands out; every proxy of a deployment
    needs the same one. Empty: derived from `upstream.api_key`, else random at each start (then items do not survive
    a restart or work on another worker). When inflight takes over a request's `context_management`
    compaction, it removes it before forwarding and summarizes at its `compact_threshold`."""

    compact_fallback: bool = True
    item_key: str = Field("", repr=False)
    # A request's `context_management: [{type: "compaction", compact_threshold}]`: "auto" forwards it, and handles
    # it in inflight for a model whose upstream refuses the field; "inflight" always handles it in inflight.
    context_management: Literal["auto", "inflight"] = "auto"

    @field_validator("item_key", mode="before")
    @classmethod
    def _empty_key(cls, value: object) -> object:
        return "" if value is None else value


class Messages(Section):
    """Anthropic Messages: context editing for upstreams that lack it, and the upstream's exact count.

    `context_management` (a request's `context_management.edits`): "auto" forwards them, and does them
    itself for a model whose upstream refuses the field; "inflight" always does them itself (for an
    upstream that ignores the field). `count_tokens`: "near" asks the upstream's
    `POST /v1/messages/count_tokens` on a turn whose estimate is within `count_tokens_band` (a share
    of the budget) of a threshold (`prune_at`, `summarize_at`, `background_at`, the budget), and
    decides on its count; "off" decides on the calibrated estimate."""

    context_management: Literal["auto", "inflight"] = "auto"
    count_tokens: Literal["off", "near"] = "off"
    count_tokens_band: float = Field(0.05, gt=0, le=1)


class Gemini(Section):
    """The Gemini API: its upstream's exact count. `count_tokens`: "near" asks the upstream's
    `POST /v1beta/models/{model}:countTokens` on a turn whose estimate is within `count_tokens_band` of a
    threshold, as `messages.count_tokens` does; "off" decides on the calibrated estimate (Gemini's tokenizer is
    not public, so the estimate is o200k_base corrected by `usageMetadata`)."""

    count_tokens: Literal["off", "near"] = "off"
    count_tokens_band: float = Field(0.05, gt=0, le=1)


Encoding = Literal["o200k_base", "cl100k_base"]


class ModelEntry(Section):
    context_window: int | None = Field(None, ge=256)
    max_output_tokens: int | None = Field(None, ge=1)
    encoding: Encoding | None = None
    # A partial `compaction:` block; merged over the global one by `Settings.compaction_for`.
    compaction: dict[str, Any] | None = None


@frozen
class ModelSettings:
    compaction: Compaction
    encoding: str | None  # the `models:` entry's encoding override


class Otlp(Section):
    """Where traces go over OTLP/HTTP; unset, the standard `OTEL_EXPORTER_OTLP_*` variables say."""

    endpoint: str | None = None  # the collector's base URL (`/v1/traces` is appended), as OTEL_EXPORTER_OTLP_ENDPOINT
    headers: dict[str, str] = Field(default_factory=dict)  # sent with each export, e.g. a collector's key
    service_name: str = "inflight"  # `service.name` (OTEL_SERVICE_NAME wins)
    schedule_delay_ms: int = Field(5000, ge=1, le=600_000)  # the longest a finished span waits to be exported

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL such as http://127.0.0.1:4318, got {value!r}")
        return value


OTEL_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class Telemetry(Section):
    """OpenTelemetry traces (off unless an endpoint is given here or in the standard variables)."""

    otlp: Otlp = Otlp()

    def exports(self, environ: Mapping[str, str]) -> bool:
        """Whether to export traces: an endpoint here or in the variables, and the SDK not disabled by them."""
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            return False
        return bool(self.otlp.endpoint) or any(environ.get(name) for name in OTEL_ENDPOINTS)


class Log(Section):
    """How the log's lines are written (their level is `log_level`): `text`, a line of words and `key=value`
    fields; `json`, one JSON object per line (`time`, `level`, `logger`, `message`, and a request line's
    fields as keys of their own), for a log collector."""

    format: Literal["text", "json"] = "text"


class MetricsSettings(Section):
    """`GET /metrics` and `GET /inflight/usage`: how many clients get a label of their own."""

    top_clients: int = Field(10, ge=0, le=1000)  # the clients sending the most tokens; the rest are `other`


class Settings(Section):
    listen: Listen = Listen()
    upstream: Upstream = Upstream()
    access: Access = Access()
    limits: Limits = Limits()
    default_context_window: int = Field(128000, ge=256)
    discover_context_window: bool = True
    models: dict[str, ModelEntry] = Field(default_factory=dict)
    compaction: Compaction = Compaction()
    pricing: Pricing = Pricing()  # what the upstream bills; used for cost figures and to decide when to compact
    state: State = State()
    archive: Archive = Archive()
    responses: Responses = Responses()
    messages: Messages = Messages()
    gemini: Gemini = Gemini()
    # A separate upstream per wire format (else `upstream`), so one proxy can send Claude Code to an
    # Anthropic-compatible server and OpenAI-format agents to another.
    upstreams: dict[FormatName, Upstream] = Field(default_factory=dict)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log: Log = Log()
    metrics: MetricsSettings = MetricsSettings()
    telemetry: Telemetry = Telemetry()
    # Each `models.<glob>.compaction` merged over the global block once, here, not on every request.
    _compactions: dict[str, Compaction] = PrivateAttr(default_factory=dict)
    # Each wire format's own upstream: `upstreams`, plus Anthropic's API for the Messages API and Google's for the
    # Gemini API when the default upstream is OpenAI's (which has neither), else the Gemini API at the upstream's
    # origin; set once, here.
    _format_upstreams: dict[str, Upstream] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _keys_need_an_upstream_key(self) -> Settings:
        if not self.access.keys:
            return self
        for name, upstream in (
            ("upstream", self.upstream),
            *((f"upstreams.{k}", u) for k, u in self.upstreams.items()),
        ):
            if not upstream.api_key and not upstream.basic_auth:
                raise ValueError(
                    "access.keys is set, so clients send the proxy's keys, not the upstream's: "
                    f"set {name}.api_key to the key the proxy uses upstream"
                )
        return self

    @model_validator(mode="after")
    def _messages_go_to_anthropic(self) -> Settings:
        """With no `upstreams.messages` and the default upstream OpenAI's, which has no Messages API, `/v1/messages`
        goes to Anthropic's, with the client's own key; with `access.keys` the proxy has no Anthropic key to send,
        so it goes nowhere (`unserved` says why). The Gemini API likewise goes to Google's.

        With any other upstream (a local server, a gateway: any host but api.openai.com) the Messages API goes to it
        as the others do, and the Gemini API to its origin, with its key: Gemini's paths carry their version
        (`/v1beta/...`), which `http://host:8080/v1` would turn into `/v1/v1beta/...`."""
        for name, own in self.upstreams.items():
            self._format_upstreams[name] = own
        if urlsplit(self.upstream.base_url).hostname != OPENAI_HOST:
            if "gemini" not in self.upstreams:
                origin = origin_of(self.upstream.base_url)
                self._format_upstreams["gemini"] = self.upstream.model_copy(update={"base_url": origin})
            return self
        if self.access.keys:
            return self
        for wire, (base_url, _, _) in PROVIDER_APIS.items():
            if wire not in self.upstreams:
                self._format_upstreams[wire] = self.upstream.model_copy(
                    update={"base_url": base_url, "api_key": "", "auth": None, "basic_auth": ""}
                )
        return self

    @property
    def format_upstreams(self) -> dict[str, Upstream]:
        """The wire formats that have an upstream of their own (`upstreams`, or Anthropic's API for Messages and
        Google's for Gemini, or the upstream's origin for Gemini)."""
        return self._format_upstreams

    def unserved(self, wire: str) -> str | None:
        """Why the proxy cannot forward a wire format's requests anywhere (None: it can)."""
        openai = urlsplit(self.upstream.base_url).hostname == OPENAI_HOST
        if wire not in PROVIDER_APIS or wire in self._format_upstreams or not openai:
            return None
        base_url, api, whose = PROVIDER_APIS[wire]
        return (
            f"{api} has no upstream: upstream.base_url is OpenAI's ({self.upstream.base_url}), which has "
            f"none, and access.keys is set, so clients' keys are not {whose}; set upstreams.{wire}.base_url "
            f"({base_url}) and upstreams.{wire}.api_key"
        )

    def upstream_for(self, wire: str) -> Upstream:
        """The upstream of a wire format (`format_upstreams`, else `upstream`)."""
        return self._format_upstreams.get(wire, self.upstream)

    def destination(self, wire: str) -> str:
        """Where a wire format's requests go, for a log line: its upstream's URL (`redacted_url`), or
        `none (set upstreams.<wire>)` when it has none (`unserved`)."""
        if self.unserved(wire) is not None:
            return f"none (set upstreams.{wire})"
        return redacted_url(self.upstream_for(wire).base_url)

    def exact_counts(self, wire: str) -> Messages | Gemini:
        """The section that says when to ask a wire format's upstream for an exact count."""
        return self.gemini if wire == "gemini" else self.messages

    def manages_context(self, wire: str) -> bool:
        """Inflight always does what a request of `wire` asks of the upstream's context management."""
        section = self.messages if wire == "messages" else self.responses
        return section.context_management == "inflight"

    @functools.cached_property
    def held_keys(self) -> tuple[str, ...]:
        """The keys the proxy holds and sends on its own, by where the config sets them: an upstream's `api_key`
        or `user:password`, and a summarizer's (`compaction.summarize`, `models.<glob>.compaction.summarize`).
        Anyone who reaches the proxy spends them."""
        held: list[str] = []
        for name, upstream in (
            ("upstream", self.upstream),
            *((f"upstreams.{k}", u) for k, u in self.upstreams.items()),
        ):
            held += [f"{name}.api_key"] if upstream.api_key else []
            held += [f"{name}.base_url's user:password"] if upstream.basic_auth else []
        summarizers = (
            ("compaction", self.compaction),
            *((f"models.{k}.compaction", c) for k, c in self._compactions.items()),
        )
        for name, compaction in summarizers:
            summarize = compaction.summarize
            held += [f"{name}.summarize.api_key"] if summarize.api_key else []
            if summarize.base_url is not None and "@" in urlsplit(summarize.base_url).netloc:
                held.append(f"{name}.summarize.base_url's user:password")
        return tuple(held)

    @property
    def holds_key(self) -> bool:
        """Whether the proxy sends a key of its own anywhere (then anyone who reaches it spends it)."""
        return bool(self.held_keys)

    @model_validator(mode="after")
    def _model_overrides_valid(self) -> Settings:
        for pattern, entry in self.models.items():
            if entry.compaction is not None:
                try:
                    self._compactions[pattern] = _merge_compaction(self.compaction, entry.compaction)
                except ValidationError as exc:
                    raise ValueError(f"models.{pattern}.compaction: {_first_error(exc)}") from exc
        return self

    def model_entry(self, model: str) -> ModelEntry | None:
        pattern = self._pattern_for(model)
        return None if pattern is None else self.models[pattern]

    def encoding_override(self, model: str) -> str | None:
        entry = self.model_entry(model)
        return entry.encoding if entry else None

    def compaction_for(self, model: str) -> Compaction:
        pattern = self._pattern_for(model)
        return self.compaction if pattern is None else self._compactions.get(pattern, self.compaction)

    def _pattern_for(self, model: str) -> str | None:
        """The `models:` key for this model: an exact name wins over any glob, else the first glob that matches."""
        if model in self.models:
            return model
        return next((pattern for pattern in self.models if fnmatch.fnmatchcase(model, pattern)), None)

    def for_model(self, model: str) -> ModelSettings:
        """Everything configured for one model, resolved at once (callers cache it: it walks the globs)."""
        return ModelSettings(self.compaction_for(model), self.encoding_override(model))


def _merge_compaction(base: Compaction, override: dict[str, Any]) -> Compaction:
    return Compaction.model_validate(deep_merge(base.model_dump(), override))


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return describe(error)


def describe(error: Any) -> str:
    location = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key (check the spelling; every key is in docs/configuration.md)"
    elif (
        "input" in error
        and error["type"] != "missing"
        and not isinstance(error["input"], dict)
        and (
            "got " not in message  # our own validators say what they got
        )
    ):
        message = f"{message}, got {error['input']!r}"
    return f"{location}: {message}" if location else message

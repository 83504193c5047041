"""The LLM call that turns a span of conversation into a summary: the summarizer model, then fallbacks."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import httpx

from proxy.compaction import Summarize, SummaryJob
from proxy.compaction.validation import headings, rejection
from proxy.config import Compaction, Settings
from proxy.metrics.observer import NO_OBSERVER, Observer
from proxy.policy.windows import ContextRegistry

log = logging.getLogger("inflight")


def summarizer_client() -> httpx.AsyncClient:
    """The HTTP client for summarizer calls: a fresh connection per call, none kept idle.

    httpx notices a kept-alive connection the server closed only when it next uses the pool, so
    after the last summary its connections would sit in CLOSE-WAIT, holding descriptors, for as
    long as no summary is asked. A summary takes seconds to generate; a new connection per call
    costs a handshake, far less.
    """
    return httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))


class SummarizerError(RuntimeError):
    def __init__(self, message: str, *, rejected: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.rejected = rejected  # why the last reply was refused (`proxy.compaction.validation`), if it was
        self.status = status  # the last error status a summarizer answered with, if it did


class Summarizer:
    """Posts a non-streaming chat completion to the summarizer's endpoint, trying each model in turn."""

    def __init__(
        self, client: httpx.AsyncClient, *, base_url: str, timeout_s: float, observer: Observer = NO_OBSERVER
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.observer = observer  # told each model's call: its outcome and how long it took

    async def __call__(self, job: SummaryJob, *, models: Sequence[str], authorization: str | None) -> str:
        errors: list[str] = []
        rejected = None
        status = None
        if job.in_place is not None:  # only its own model holds the conversation in its prompt cache
            models = [model for model in models if model == job.in_place.model][:1]
        for model in models:
            started = time.perf_counter()
            try:
                text, finish_reason = await self.complete(job, model=model, authorization=authorization)
            except (httpx.HTTPError, SummarizerError, ValueError) as exc:
                self.observer.summarizer_called(outcome="error", seconds=time.perf_counter() - started)
                status = getattr(exc, "status", None) or status
                errors.append(f"{model}: {type(exc).__name__}: {exc}")
                log.info("[compaction] summarizer %s failed: %s", model, exc)
                continue
            seconds = time.perf_counter() - started
            sections = headings(job.prompt)
            rejected = rejection(
                text,
                finish_reason=finish_reason,
                transcript=job.transcript,
                sections=sections,
            )
            self.observer.summarizer_called(outcome="ok" if rejected is None else "rejected", seconds=seconds)
            if rejected is None:
                return text
            errors.append(f"{model}: reply rejected ({rejected})")
            log.warning("[compaction] summary from %s rejected (%s); not installed", model, rejected)
        raise SummarizerError("; ".join(errors) or "no summarizer model", rejected=rejected, status=status)

    async def complete(self, job: SummaryJob, *, model: str, authorization: str | None) -> tuple[str, object]:
        """The reply's text and its `finish_reason`."""
        headers = {"authorization": authorization} if authorization else {}
        body = {
            "model": model,
            "messages": job.messages(),
            "max_tokens": job.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        if job.in_place is not None and job.in_place.tools:  # the prefix as cached, tools included; none called
            body |= {"tools": job.in_place.tools, "tool_choice": "none"}
        response = await self.client.post(
            f"{self.base_url}/chat/completions", json=body, headers=headers, timeout=self.timeout_s
        )
        if response.status_code != 200:
            raise SummarizerError(f"status {response.status_code}: {response.text[:200]}", status=response.status_code)
        choices = response.json().get("choices") or []
        content = choices[0].get("message", {}).get("content") if choices else None
        if not isinstance(content, str) or not content.strip():
            raise SummarizerError("no summary text in the response")
        return content, choices[0].get("finish_reason")


class Summarizers:
    """The summarizer for one request: which endpoint, which models, whose key.

    The key is `compaction.summarize.api_key`, else the upstream's own key when summaries go to the
    upstream, else the client's `Authorization` (the summary is the client's spending) unless the
    proxy has keys of its own.
    """

    def __init__(self, settings: Settings, client: httpx.AsyncClient, *, observer: Observer = NO_OBSERVER) -> None:
        self.settings = settings
        self.client = client
        self.observer = observer
        self._registries: dict[str, ContextRegistry] = {}  # one per summarizer endpoint, discovered once

    async def window(self, options: Compaction, model: str) -> int | None:
        """The model's window at `summarize.base_url`: the config's entry, else its `GET /models`, else None."""
        base_url = options.summarize.base_url
        if base_url is None:
            return None
        registry = self._registries.setdefault(base_url, ContextRegistry(self.settings))
        headers = {"authorization": f"Bearer {options.summarize.api_key}"} if options.summarize.api_key else {}

        async def fetch_models() -> bytes:
            response = await self.client.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=10)
            if response.status_code != 200:
                raise SummarizerError(f"GET /models answered {response.status_code}")
            return response.content

        limits = await registry.resolve_async(model, fetch_models)
        return limits.context_window if limits.source in ("config", "discovered", "learned") else None

    def __call__(self, options: Compaction, *, model: str, client_authorization: str | None) -> Summarize:
        summarize = options.summarize
        base_url = summarize.base_url or self.settings.upstream.base_url
        summarizer = Summarizer(self.client, base_url=base_url, timeout_s=summarize.timeout_s, observer=self.observer)
        models = [summarize.model or model, *summarize.fallback_models]
        # With access.keys the client's Authorization is one of the proxy's own keys: never send it on.
        authorization = None if self.settings.access.keys else client_authorization
        if summarize.api_key:
            authorization = f"Bearer {summarize.api_key}"
        elif summarize.base_url is None and self.settings.upstream.api_key:
            authorization = f"Bearer {self.settings.upstream.api_key}"
        elif summarize.base_url is None and self.settings.upstream.basic_auth:
            authorization = f"Basic {self.settings.upstream.basic_auth}"

        async def run(job: SummaryJob) -> str:
            return await summarizer(job, models=models, authorization=authorization)

        return run

"""Small helpers the provider embedders share: settings lookup and safe descriptions."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from kbcli.config.lookup import Config, EmbeddingConfig, defaults

if TYPE_CHECKING:
    from kbcli.providers.retry import RetryPolicy


class RequestSettings(Protocol):
    """What :func:`apply_request_settings` sets on a provider embedder
    (:class:`~kbcli.embedders.api.APIEmbedder`)."""

    dimensions: int | None
    batch_size: int
    max_inputs_per_request: int
    timeout: float
    retry_budget: float
    retry_policy: RetryPolicy


def embedding_settings(provider: str, config: Config | None) -> EmbeddingConfig:
    """``rag.embedding`` of ``config`` (default: :func:`kbcli.config.lookup.defaults`).

    ``model`` and ``base_url`` are only meant for the provider the file names, so when the file
    explicitly chose another provider they are blanked out; numbers (batch size, retries,
    timeout) apply to every provider.
    """
    emb = (config if config is not None else defaults()).rag.embedding
    if emb.provider_set and emb.provider not in (provider, "auto"):
        from dataclasses import replace

        return replace(emb, model=None, base_url=None, dimensions=None)
    return emb


def find_api_key(api_key: str | None, env_names: tuple[str, ...]) -> tuple[str | None, str]:
    """The key and its origin: the argument, else the first set variable of ``env_names``."""
    if api_key:
        return api_key, "the api_key argument"
    key, name = first_env(*env_names)
    return key, name or ""


def apply_request_settings(
    embedder: RequestSettings,
    settings: EmbeddingConfig,
    *,
    dimensions: int | None,
    batch_size: int | None,
    max_retries: int | None,
    timeout: float | None,
    retry_budget: float | None = None,
) -> None:
    """Set ``dimensions``, ``batch_size`` (capped by the provider), ``retry_policy``,
    ``timeout`` (total seconds per attempt) and ``retry_budget`` (total seconds per request,
    retries included) on a provider embedder: the argument wins, else ``rag.embedding``."""
    # lazy: retry (logging, queue, socket, email: ~20 ms) for remote embedders only
    from kbcli.providers.retry import RetryPolicy

    embedder.dimensions = dimensions if dimensions is not None else settings.dimensions
    if embedder.dimensions is not None and embedder.dimensions < 1:
        raise ValueError(f"dimensions must be at least 1, got {embedder.dimensions}")
    size = batch_size or settings.batch_size
    embedder.batch_size = max(1, min(size, embedder.max_inputs_per_request))
    retries = max_retries if max_retries is not None else settings.max_retries
    embedder.timeout = float(timeout if timeout is not None else settings.timeout)
    budget = retry_budget if retry_budget is not None else settings.retry_budget
    embedder.retry_budget = float(budget)
    if embedder.timeout <= 0 or embedder.retry_budget <= 0:
        raise ValueError("timeout and retry_budget must be positive numbers of seconds")
    embedder.retry_policy = RetryPolicy(
        max_retries=max(0, retries), timeout=embedder.timeout, budget=embedder.retry_budget
    )


def first_env(*names: str) -> tuple[str | None, str | None]:
    """The first non-empty environment variable among ``names``: ``(value, name)``."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value, name
    return None, None


def host_of(url: str | None) -> str:
    """The host (and port) of ``url`` for messages; never the path, query or credentials."""
    if not url:
        return "?"
    parts = urlsplit(str(url))
    host = parts.hostname or str(url)
    return f"{host}:{parts.port}" if parts.port else host


def redact(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` replaced, for server messages quoted in our errors."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "***")
    return text


def short(text: object, limit: int = 200) -> str:
    """One line of at most ``limit`` characters."""
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def plan_batches(
    texts: list[str],
    *,
    max_items: int,
    max_tokens: int | None = None,
    estimate: Callable[[str], int] | None = None,
) -> list[list[str]]:
    """Split ``texts`` in order into batches of at most ``max_items`` and ``max_tokens``.

    A single text larger than ``max_tokens`` gets a batch of its own.
    """
    batches: list[list[str]] = []
    current: list[str] = []
    budget = 0
    for text in texts:
        cost = estimate(text) if (estimate is not None and max_tokens is not None) else 0
        full = len(current) >= max_items
        over = max_tokens is not None and current and budget + cost > max_tokens
        if full or over:
            batches.append(current)
            current, budget = [], 0
        current.append(text)
        budget += cost
    if current:
        batches.append(current)
    return batches


def transport_errors() -> tuple[type[BaseException], ...]:
    """Timeout and connection exception classes of the HTTP clients the SDKs may use."""
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for name in ("httpx", "httpx2"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        for attr in ("TimeoutException", "TransportError"):
            cls = getattr(module, attr, None)
            if isinstance(cls, type):
                found.append(cls)
    return tuple(found)

"""OpenAI embeddings, and any OpenAI-compatible server (Ollama, vLLM, LM Studio, SiliconFlow).

Requests are batched within the API's limits, retried by :mod:`kbcli.providers.retry` (the
SDK's own retries are off), and the vectors are put back in input order by their ``index``.

Limits, chosen conservatively (class attributes, so a subclass may change them):

* at most ``max_inputs_per_request`` (2048) inputs per request, the API's limit, and at most
  ``batch_size`` (``rag.embedding.batch_size``, 64);
* at most ``max_tokens_per_request`` (100,000) *estimated* tokens per request, the API allowing
  300,000; tokens are estimated as UTF-8 bytes / 2, which over-counts English (about 4
  characters a token) and roughly matches CJK text, so the real total stays under the limit;
* an input longer than ``max_input_bytes`` (12,000 UTF-8 bytes, under the 8,192-token limit
  per input for any script) is truncated to that length, with a warning in the log;
* an empty or blank input, which the API rejects, is sent as a single space.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from kbcli.embedders.api import APIEmbedder
from kbcli.embedders.provider_settings import plan_batches, redact, short
from kbcli.errors import EmbedderError, require
from kbcli.providers.retry import (
    Failure,
    connection_refused,
    is_retryable_status,
    parse_retry_after,
)

logger = logging.getLogger("kbcli.embedders")


def classify_error(
    openai: ModuleType, exc: BaseException, *, api_key: str | None, timeout: float
) -> Failure | None:
    """What an exception of the ``openai`` SDK means to the retry policy (None: not the
    SDK's). Shared by every client of the SDK (embeddings, chat); the server's message is
    redacted of ``api_key``."""
    if isinstance(exc, openai.APITimeoutError):
        return Failure(True, None, f"timed out after {timeout:g} s")
    if isinstance(exc, openai.APIConnectionError):
        return Failure(True, None, "connection error", refused=connection_refused(exc))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        error = error if isinstance(error, dict) else {"message": str(error)}
        detail = short(redact(str(error.get("message") or ""), api_key))
        # 429 for an exhausted quota will not clear by waiting.
        retryable = is_retryable_status(status) and error.get("code") != "insufficient_quota"
        retry_after = parse_retry_after(exc.response.headers)
        return Failure(retryable, status, f"status {status}", retry_after, detail)
    if isinstance(exc, openai.APIError):
        detail = short(redact(str(exc), api_key))
        status = getattr(exc, "status_code", None)
        return Failure(False, status, "invalid response", None, detail)
    return None


def estimate_tokens(text: str) -> int:
    """A deliberately high token estimate: UTF-8 bytes / 2, at least 1."""
    return max(1, (len(text.encode("utf-8")) + 1) // 2)


def _truncate_utf8(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")


class OpenAIEmbedder(APIEmbedder):
    """Embeds with the OpenAI embeddings API (or a compatible server at ``base_url``).

    Each setting comes from the argument, else ``rag.embedding`` in the config, else the
    environment: key ``OPENAI_API_KEY`` / ``API_KEY``; base URL ``OPENAI_BASE_URL`` /
    ``OPENAI_API_BASE`` / ``BASE_URL``; model ``OPENAI_EMBED_MODEL`` / ``EMBEDDING_MODEL`` /
    ``text-embedding-3-small``. ``dimensions`` is passed to the API (text-embedding-3 models).
    """

    provider = "openai"
    key_env = ("OPENAI_API_KEY", "API_KEY")
    base_url_env = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "BASE_URL")
    model_env = ("OPENAI_EMBED_MODEL", "EMBEDDING_MODEL")
    default_model = "text-embedding-3-small"
    default_base_url = "https://api.openai.com/v1"
    missing_key = (
        "OpenAI API key not found (OPENAI_API_KEY/API_KEY): set one, or choose another "
        "provider in rag.embedding (gemini, local, simple)"
    )
    max_inputs_per_request = 2048
    max_tokens_per_request = 100_000
    max_input_bytes = 12_000

    def _base_url(self, given: str | None) -> str:
        return (given or self.default_base_url).rstrip("/")

    def _make_client(self) -> Any:
        openai = require("openai", feature="The openai embedder")
        self._openai = openai
        # max_retries=0: retries are ours (kbcli.providers.retry), bounded and testable.
        return openai.OpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout,
        )

    def _prepare(self, text: str) -> str:
        if not text.strip():
            return " "
        cut = _truncate_utf8(text, self.max_input_bytes)
        if cut != text:
            logger.warning(
                "openai: input of %d characters truncated to %d (per-input limit)",
                len(text),
                len(cut),
            )
        return cut

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` in order, in as few requests as the limits allow."""
        prepared = [self._prepare(t) for t in texts]
        out: list[list[float]] = []
        for batch in plan_batches(
            prepared,
            max_items=self.batch_size,
            max_tokens=self.max_tokens_per_request,
            estimate=estimate_tokens,
        ):
            out.extend(self._embed_batch(batch))
        return out

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        return self._with_retries(lambda: self._request(texts))

    def _request(self, texts: list[str]) -> list[list[float]]:
        kwargs: dict[str, Any] = {"input": texts, "model": self.model}
        if self.dimensions is not None:
            kwargs["dimensions"] = self.dimensions
        response = self._client.embeddings.create(**kwargs)
        data = sorted(response.data, key=lambda item: item.index)
        if [item.index for item in data] != list(range(len(texts))):
            raise EmbedderError(
                f"OpenAI-compatible server at {self.host} returned {len(data)} embeddings for "
                f"{len(texts)} inputs (model {self.model})"
            )
        vectors = [list(map(float, item.embedding)) for item in data]
        self._check_dimension(vectors)
        return vectors

    def _check_dimension(self, vectors: list[list[float]]) -> None:
        size = len(vectors[0])
        if any(len(v) != size for v in vectors):
            raise EmbedderError(f"{self.host} returned vectors of different sizes for {self.model}")
        if self.dimensions is not None and size != self.dimensions:
            raise EmbedderError(
                f"Asked {self.host} for {self.dimensions} dimensions but model {self.model} "
                f"returned {size}: the server may not support 'dimensions'; unset "
                "rag.embedding.dimensions"
            )
        self.dimension = size

    def _classify(self, exc: BaseException) -> Failure | None:
        return classify_error(self._openai, exc, api_key=self._api_key, timeout=self.timeout)

    def _refusal(self, failure: Failure, where: str, detail: str) -> str | None:
        status = failure.status
        if status == 401:
            return (
                f"openai rejected the API key (status 401 at {self.host}): check "
                f"{self.key_source or 'OPENAI_API_KEY'}"
            )
        if status == 403:
            return (
                f"openai refused access (status 403) to {where}: the key from "
                f"{self.key_source or 'OPENAI_API_KEY'} may not be allowed this model{detail}"
            )
        if status == 404:
            return (
                f"openai embedding model {self.model} not found at {self.host} (status 404): "
                f"check rag.embedding.model and base_url{detail}"
            )
        if status == 429:
            return f"openai quota exhausted (status 429) for {where}{detail}: check billing"
        return None

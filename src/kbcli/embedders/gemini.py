"""Gemini embeddings through the google-genai SDK (imported only when the embedder is built).

Documents are embedded with task type ``RETRIEVAL_DOCUMENT`` and queries with
``RETRIEVAL_QUERY``, in requests of at most 100 texts (the ``batchEmbedContents`` limit) and at
most ``batch_size``. Retries follow :mod:`kbcli.providers.retry`; the SDK's own are off. The
API answers in input order (no index), so vectors are returned in that order. Empty or blank
texts are sent as a single space, as for OpenAI.
"""

from __future__ import annotations

from functools import partial
from types import ModuleType
from typing import Any

from kbcli.embedders.api import APIEmbedder
from kbcli.embedders.provider_settings import plan_batches, redact, short, transport_errors
from kbcli.errors import EmbedderError, require
from kbcli.providers.retry import (
    Failure,
    connection_refused,
    is_retryable_status,
    parse_retry_after,
)


def classify_error(
    errors: ModuleType, exc: BaseException, *, api_key: str | None, timeout: float
) -> Failure | None:
    """What an exception of the google-genai SDK (``errors`` is ``google.genai.errors``) means
    to the retry policy (None: not the SDK's). Shared by every client of the SDK (embeddings,
    chat); the server's message is redacted of ``api_key``."""
    if isinstance(exc, errors.APIError):
        status = int(exc.code) if exc.code else None
        detail = short(redact(str(exc.message or exc.status or ""), api_key))
        headers = getattr(getattr(exc, "response", None), "headers", None)
        try:
            retry_after = parse_retry_after(headers)
        except (AttributeError, TypeError):
            retry_after = None
        retryable = is_retryable_status(status)
        return Failure(retryable, status, f"status {status}", retry_after, detail)
    if isinstance(exc, transport_errors()):
        timed_out = "timeout" in type(exc).__name__.lower()
        reason = f"timed out after {timeout:g} s" if timed_out else "connection error"
        return Failure(True, None, reason, refused=connection_refused(exc))
    return None


class GeminiEmbedder(APIEmbedder):
    """Embeds with the Gemini API.

    Each setting comes from the argument, else ``rag.embedding``, else the environment: key
    ``GOOGLE_API_KEY`` / ``GEMINI_API_KEY``; base URL ``EMBEDDING_BASE_URL`` / ``BASE_URL``;
    model ``GEMINI_EMBED_MODEL`` / ``EMBEDDING_MODEL`` / ``text-embedding-004``.
    ``dimensions`` becomes ``output_dimensionality``.
    """

    provider = "gemini"
    key_env = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
    base_url_env = ("EMBEDDING_BASE_URL", "BASE_URL")
    model_env = ("GEMINI_EMBED_MODEL", "EMBEDDING_MODEL")
    default_model = "text-embedding-004"
    default_base_url = "https://generativelanguage.googleapis.com"
    missing_key = (
        "Gemini API key not found (GOOGLE_API_KEY/GEMINI_API_KEY): set one, or choose "
        "another provider in rag.embedding (openai, local, simple)"
    )
    max_inputs_per_request = 100

    def _model_name(self, given: str) -> str:
        return given.removeprefix("models/")

    def _make_client(self) -> Any:
        genai = require("google.genai", feature="The gemini embedder", package="google-genai")
        errors = require("google.genai.errors", package="google-genai")
        types = require("google.genai.types", package="google-genai")
        self._types = types
        self._errors = errors
        options = types.HttpOptions(
            base_url=self.base_url,
            timeout=max(1, int(self.timeout * 1000)),  # milliseconds
            # attempts=1: the SDK never retries; kbcli.providers.retry does.
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return genai.Client(api_key=self._api_key, vertexai=False, http_options=options)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages (task type RETRIEVAL_DOCUMENT) in order."""
        return self._embed(texts, "RETRIEVAL_DOCUMENT")

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (task type RETRIEVAL_QUERY)."""
        return self._embed([text], "RETRIEVAL_QUERY")[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several queries (task type RETRIEVAL_QUERY) in batched requests."""
        return self._embed(list(texts), "RETRIEVAL_QUERY")

    def _embed(self, texts: list[str], task_type: str) -> list[list[float]]:
        prepared = [t if t.strip() else " " for t in texts]
        out: list[list[float]] = []
        for batch in plan_batches(prepared, max_items=self.batch_size):
            out.extend(self._with_retries(partial(self._request, batch, task_type)))
        return out

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts, "RETRIEVAL_DOCUMENT")

    def _request(self, texts: list[str], task_type: str) -> list[list[float]]:
        config = self._types.EmbedContentConfig(
            task_type=task_type, output_dimensionality=self.dimensions
        )
        response = self._client.models.embed_content(
            model=self.model, contents=list(texts), config=config
        )
        embeddings = response.embeddings or []
        if len(embeddings) != len(texts):
            raise EmbedderError(
                f"Gemini at {self.host} returned {len(embeddings)} embeddings for {len(texts)} "
                f"inputs (model {self.model})"
            )
        vectors = [list(map(float, e.values or [])) for e in embeddings]
        size = len(vectors[0])
        if size == 0 or any(len(v) != size for v in vectors):
            raise EmbedderError(f"Gemini at {self.host} returned malformed vectors ({self.model})")
        self.dimension = size
        return vectors

    def _classify(self, exc: BaseException) -> Failure | None:
        return classify_error(self._errors, exc, api_key=self._api_key, timeout=self.timeout)

    def _refusal(self, failure: Failure, where: str, detail: str) -> str | None:
        status = failure.status
        key_from = self.key_source or "GOOGLE_API_KEY"
        if status == 401 or (status == 400 and "api key" in failure.detail.lower()):
            return f"gemini rejected the API key (status {status} at {self.host}): check {key_from}"
        if status == 403:
            return (
                f"gemini refused access (status 403) to {where}: check that the key from "
                f"{key_from} may use the Generative Language API{detail}"
            )
        if status == 404:
            return (
                f"gemini embedding model {self.model} not found at {self.host} (status 404): "
                f"check rag.embedding.model{detail}"
            )
        return None

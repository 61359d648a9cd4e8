"""Gemini embeddings through the google-genai SDK (imported only when the embedder is built).

Documents are embedded with task type ``RETRIEVAL_DOCUMENT`` and queries with
``RETRIEVAL_QUERY``, in requests of at most 100 texts (the ``batchEmbedContents`` limit) and at
most ``batch_size``. Retries follow :mod:`kbcli.embedders.retry`; the SDK's own are off. The
API answers in input order (no index), so vectors are returned in that order. Empty or blank
texts are sent as a single space, as for OpenAI.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..errors import EmbedderError, require
from ._settings import (
    apply_request_settings,
    embedding_settings,
    find_api_key,
    first_env,
    host_of,
    plan_batches,
    redact,
    short,
    transport_errors,
)
from .base import BaseEmbedder
from .retry import Failure, call_with_retries, give_up_hint, is_retryable_status, parse_retry_after

DEFAULT_MODEL = "text-embedding-004"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
KEY_ENV = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
BASE_URL_ENV = ("EMBEDDING_BASE_URL", "BASE_URL")
MODEL_ENV = ("GEMINI_EMBED_MODEL", "EMBEDDING_MODEL")


def classify_error(
    errors: Any, exc: BaseException, *, api_key: str | None, timeout: float
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
        return Failure(True, None, reason)
    return None


class GeminiEmbedder(BaseEmbedder):
    """Embeds with the Gemini API.

    Each setting comes from the argument, else ``rag.embedding``, else the environment: key
    ``GOOGLE_API_KEY`` / ``GEMINI_API_KEY``; base URL ``EMBEDDING_BASE_URL`` / ``BASE_URL``;
    model ``GEMINI_EMBED_MODEL`` / ``EMBEDDING_MODEL`` / ``text-embedding-004``.
    ``dimensions`` becomes ``output_dimensionality``.
    """

    provider = "gemini"
    max_inputs_per_request = 100

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        *,
        dimensions: int | None = None,
        batch_size: int | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        retry_budget: float | None = None,
        config: Config | None = None,
    ) -> None:
        settings = embedding_settings(self.provider, config)
        key, source = find_api_key(api_key, KEY_ENV)
        if not key:
            raise EmbedderError(
                "Gemini API key not found (GOOGLE_API_KEY/GEMINI_API_KEY): set one, or choose "
                "another provider in rag.embedding (openai, local, simple)"
            )
        self.key_source = source
        self.base_url = base_url or settings.base_url or first_env(*BASE_URL_ENV)[0]
        model_name = model or settings.model or first_env(*MODEL_ENV)[0] or DEFAULT_MODEL
        self.model = model_name.removeprefix("models/")
        apply_request_settings(
            self,
            settings,
            dimensions=dimensions,
            batch_size=batch_size,
            max_retries=max_retries,
            timeout=timeout,
            retry_budget=retry_budget,
        )
        # Only a requested or a returned size is this embedder's identity, never a guess from the
        # model's name: a compatible server may serve another size under the same name.
        self.dimension = self.dimensions
        self._api_key = key
        self._client = self._make_client()

    def _make_client(self) -> Any:
        genai = require("google.genai", feature="The gemini embedder", package="google-genai")
        errors = require("google.genai.errors", package="google-genai")
        types = require("google.genai.types", package="google-genai")
        self._types = types
        self._errors = errors
        options = types.HttpOptions(
            base_url=self.base_url,
            timeout=max(1, int(self.timeout * 1000)),  # milliseconds
            # attempts=1: the SDK never retries; kbcli.embedders.retry does.
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return genai.Client(api_key=self._api_key, vertexai=False, http_options=options)

    @property
    def host(self) -> str:
        """Host (and port) of the server in use, for messages."""
        return host_of(self.base_url or DEFAULT_BASE_URL)

    def __repr__(self) -> str:
        return f"GeminiEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages (task type RETRIEVAL_DOCUMENT) in order."""
        return self._embed(texts, "RETRIEVAL_DOCUMENT")

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (task type RETRIEVAL_QUERY)."""
        return self._embed([text], "RETRIEVAL_QUERY")[0]

    def _embed(self, texts: list[str], task_type: str) -> list[list[float]]:
        prepared = [t if t.strip() else " " for t in texts]
        out: list[list[float]] = []
        for batch in plan_batches(prepared, max_items=self.batch_size):
            out.extend(
                call_with_retries(
                    lambda b=batch: self._request(b, task_type),
                    policy=self.retry_policy,
                    classify=self._classify,
                    describe=self._describe,
                    on_abandon=self._abandon_client,
                )
            )
        return out

    def _abandon_client(self) -> None:
        """Replace the client after an attempt ran past its deadline, closing its sockets."""
        old, self._client = self._client, self._make_client()
        old.close()

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

    def _describe(self, failure: Failure, attempts: int) -> str:
        where = f"model {self.model} at {self.host}"
        detail = f": {failure.detail}" if failure.detail else ""
        status = failure.status
        if failure.retryable:
            what = f"status {status}" if status is not None else failure.reason
            return (
                f"gemini embedding request failed after {attempts} attempts ({what}) for "
                f"{where}{detail}; {give_up_hint(failure)}"
            )
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
        return f"gemini embedding request failed (status {status}) for {where}{detail}"

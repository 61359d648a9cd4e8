"""A reranker behind the common rerank REST protocol.

``POST {base_url}/rerank`` with ``{"model", "query", "documents": [str, ...], "top_n"}``
answering ``{"results": [{"index", "relevance_score"}, ...]}``: the protocol of Cohere, Jina,
SiliconFlow, Infinity and vLLM. Text Embeddings Inference's own ``/rerank`` takes the texts
as ``texts`` (``documents_field="texts"``) and answers a bare list of ``{index, score}``,
which is read too. ``base_url`` may end with ``/rerank`` already (Cohere's is
``https://api.cohere.com/v2/rerank``).

Requests follow the embedders' policy (:mod:`kbcli.providers.http`): timeout, retries with backoff
on
408/429/5xx and connection errors, ``Retry-After`` honoured, other 4xx fail at once with one
line, the key never shown. The candidates go in one request (providers price per request),
and only beyond ``max_documents`` (``rag.rerank.max_documents``, 1000: Cohere's and Voyage's
limit) in further ones; the scores of a pointwise reranker do not depend on the other documents
of a request.
"""

from __future__ import annotations

import math
import time
from typing import Any

from kbcli.config.schema import RerankConfig
from kbcli.embedders.provider_settings import find_api_key, first_env
from kbcli.errors import RerankerError
from kbcli.providers.http import JSONEndpoint, endpoint
from kbcli.types import SearchResult

MAX_DOCUMENTS = 1000  # per request (rag.rerank.max_documents)
KEY_ENV = ("RERANK_API_KEY",)
BASE_URL_ENV = ("RERANK_BASE_URL",)
MODEL_ENV = ("RERANK_MODEL",)


class APIReranker:
    """Rescores candidates with a rerank server (see the module docstring).

    ``base_url`` and ``model`` come from the argument, else ``RERANK_BASE_URL`` /
    ``RERANK_MODEL``; the key from the argument, else ``RERANK_API_KEY`` (a local server may
    need none). ``top_n`` asks the server for only the best ``top_n`` (None: all); documents
    longer than ``max_chars`` characters are cut (servers truncate to the model's limit anyway).
    ``documents_field`` names the request's list of texts (``texts`` for TEI). A request
    carries at most ``max_documents`` documents (``batch_size`` is its older name).
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        top_n: int | None = None,
        batch_size: int | None = None,
        max_chars: int = 8000,
        timeout: float = 30.0,
        max_retries: int = 3,
        documents_field: str = "documents",
        max_documents: int | None = None,
        deadline: float = 120.0,
    ) -> None:
        url = base_url or first_env(*BASE_URL_ENV)[0]
        if not url:
            raise RerankerError(
                "The rerank API needs a server: set rag.rerank.base_url (for example "
                "https://api.jina.ai/v1) or RERANK_BASE_URL"
            )
        self.base_url = url.rstrip("/")
        self.model = model or first_env(*MODEL_ENV)[0]
        self.top_n = top_n
        given = max_documents if max_documents is not None else batch_size
        self.max_documents = max(1, int(given if given is not None else MAX_DOCUMENTS))
        self.max_chars = max(1, int(max_chars))
        self.documents_field = documents_field
        key, source = find_api_key(api_key, KEY_ENV)
        label = f"rerank API (model {self.model})" if self.model else "rerank API"
        self._endpoint = JSONEndpoint(
            endpoint(self.base_url, "rerank"),
            api_key=key,
            key_source=source,
            key_env=KEY_ENV,
            label=label,
            setting="rag.rerank",
            timeout=timeout,
            max_retries=max_retries,
            deadline=deadline,
        )

    @classmethod
    def from_config(cls, settings: RerankConfig) -> APIReranker:
        """Build from ``rag.rerank`` (``base_url``, ``model``, ``max_documents``, timeout,
        retries, deadline)."""
        return cls(
            settings.base_url,
            settings.model,
            max_documents=settings.max_documents,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
            deadline=settings.deadline,
        )

    def __repr__(self) -> str:
        return f"APIReranker(model={self.model!r}, host={self._endpoint.host!r})"

    def score(self, query: str, texts: list[str]) -> dict[int, float]:
        """Scores by position in ``texts``; with ``top_n`` only the positions returned. Every
        request of the call ends within ``deadline`` seconds of its start."""
        scores: dict[int, float] = {}
        until = time.monotonic() + self._endpoint.deadline if self._endpoint.deadline else None
        for start in range(0, len(texts), self.max_documents):
            batch = [t[: self.max_chars] for t in texts[start : start + self.max_documents]]
            top_n = len(batch) if self.top_n is None else min(self.top_n, len(batch))
            payload: dict[str, Any] = {"query": query, self.documents_field: batch, "top_n": top_n}
            if self.model:
                payload["model"] = self.model
            answer = self._endpoint.post(payload, until=until)
            for index, value in self._parse(answer, len(batch)):
                scores[start + index] = value
        return scores

    def rerank(self, query: str, results: list[SearchResult]) -> list[SearchResult]:
        """``results`` rescored by the server, best first (at most ``top_n`` of them)."""
        if not results:
            return []
        scores = self.score(query, [r.document.text for r in results])
        order = sorted(scores, key=lambda i: (-scores[i], i))
        if self.top_n is not None:
            order = order[: self.top_n]
        return [SearchResult(results[i].document, scores[i], results[i].explain) for i in order]

    def _parse(self, data: Any, count: int) -> list[tuple[int, float]]:
        items = data.get("results", data.get("data")) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise self._invalid("no 'results' list")
        out = []
        for item in items:
            if not isinstance(item, dict):
                raise self._invalid("a result is not an object")
            index = item.get("index")
            value = item.get("relevance_score", item.get("score"))
            if (
                isinstance(index, bool)
                or not isinstance(index, int)
                or not 0 <= index < count
                or isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise self._invalid(f"bad result {str(item)[:80]}")
            out.append((index, float(value)))
        return out

    def _invalid(self, what: str) -> RerankerError:
        return RerankerError(
            f"{self._endpoint.label} at {self._endpoint.host} gave an invalid answer ({what}): "
            "does the server speak the rerank protocol (POST /rerank -> results[index, "
            "relevance_score])?"
        )

"""A reranker that asks a chat model (any OpenAI-compatible endpoint) which passages help.

Meant for small candidate sets (a chat call costs far more than a cross-encoder pass). Two
methods, both with temperature 0:

**pointwise** (default): one request per candidate, run ``workers`` at a time::

    system: You judge whether a passage helps answer a search query. Answer with one word:
            yes or no.
    user:   Query: {query}

            Passage:
            {passage}

            Does the passage help answer the query? Answer yes or no.

The score is P(yes) / (P(yes) + P(no)) from the first token's ``top_logprobs`` when the server
returns them, else 1.0 for an answer starting with "yes" and 0.0 otherwise.

**listwise**: one request holding every candidate, numbered (RankGPT style)::

    system: You rank passages by how well they answer a search query.
    user:   Query: {query}

            Passages:
            [1] {passage 1}
            [2] {passage 2}
            ...

            List the numbers of the passages that help answer the query, most relevant
            first, like: [3] > [1] > [2]. Leave out passages that do not help. If none
            helps, answer: none

A passage listed at position i of m scores ``1 - 0.5 * i / m`` (the first 1.0, all above
0.5); passages left out score 0.0 and keep their recall order. So ``min_relevance: 0.5``
keeps exactly what the model listed. Passages are cut to ``max_chars`` characters.
"""

from __future__ import annotations

import math
import re
import time
from concurrent.futures import ThreadPoolExecutor

from kbcli.config.schema import RerankConfig
from kbcli.errors import InvalidOptionError
from kbcli.providers.chat import search_chat
from kbcli.search.rerank.base import rescored
from kbcli.types import SearchResult

METHODS = ("pointwise", "listwise")

POINTWISE_SYSTEM = (
    "You judge whether a passage helps answer a search query. Answer with one word: yes or no."
)
POINTWISE_USER = (
    "Query: {query}\n\nPassage:\n{passage}\n\n"
    "Does the passage help answer the query? Answer yes or no."
)
LISTWISE_SYSTEM = "You rank passages by how well they answer a search query."
LISTWISE_USER = (
    "Query: {query}\n\nPassages:\n{passages}\n\n"
    "List the numbers of the passages that help answer the query, most relevant first, like: "
    "[3] > [1] > [2]. Leave out passages that do not help. If none helps, answer: none"
)


def yes_probability(reply_text: str, top_logprobs: dict[str, float] | None) -> float:
    """P(yes) / (P(yes) + P(no)) from the first token's alternatives, else 1.0 / 0.0 from
    the text."""
    if top_logprobs:
        yes = no = 0.0
        for token, logprob in top_logprobs.items():
            word = token.strip().lower()
            if word == "yes":
                yes += math.exp(logprob)
            elif word == "no":
                no += math.exp(logprob)
        if yes + no > 0:
            return yes / (yes + no)
    return 1.0 if reply_text.strip().lower().startswith("yes") else 0.0


def listwise_scores(reply_text: str, count: int) -> list[float]:
    """Scores for ``count`` passages from an answer like ``[3] > [1]`` (see module docstring)."""
    listed: list[int] = []
    for number in re.findall(r"\d+", reply_text):
        index = int(number) - 1
        if 0 <= index < count and index not in listed:
            listed.append(index)
    scores = [0.0] * count
    for position, index in enumerate(listed):
        scores[index] = 1.0 - 0.5 * position / len(listed)
    return scores


class LLMReranker:
    """Rescores candidates with a chat model (see the module docstring for the prompts).

    ``model``, ``base_url`` and ``api_key`` are resolved as
    :func:`~kbcli.providers.chat.search_chat` does (``LLM_*`` / ``OPENAI_*`` variables): the
    one chat client, with this reranker's retries and ``deadline``. ``logprobs=False`` for
    servers that reject the ``logprobs`` field (pointwise then scores 1.0 or 0.0).
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        method: str = "pointwise",
        workers: int = 4,
        max_chars: int = 1500,
        logprobs: bool = True,
        timeout: float = 60.0,
        max_retries: int = 3,
        deadline: float = 120.0,
    ) -> None:
        if method not in METHODS:
            raise InvalidOptionError(
                f"Unknown LLM rerank method {method!r}: choose one of {', '.join(METHODS)}"
            )
        self.method = method
        self.workers = max(1, int(workers))
        self.max_chars = max(1, int(max_chars))
        self.logprobs = logprobs
        self.client = search_chat(
            model,
            base_url,
            api_key,
            label="LLM reranker",
            setting="rag.rerank",
            timeout=timeout,
            max_retries=max_retries,
            deadline=deadline,
        )
        self.deadline = deadline

    @classmethod
    def from_config(cls, settings: RerankConfig) -> LLMReranker:
        """Build from ``rag.rerank`` (``model``, ``base_url``, ``method``, timeout, retries,
        deadline)."""
        return cls(
            settings.model,
            settings.base_url,
            method=settings.method,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
            deadline=settings.deadline,
        )

    def __repr__(self) -> str:
        return f"LLMReranker(model={self.client.model!r}, method={self.method!r})"

    def score(self, query: str, texts: list[str]) -> list[float]:
        """Relevance of each text to ``query`` in [0, 1], in the order given; every request
        of the call (all candidates, retries and waits) ends within ``deadline`` seconds."""
        if not texts:
            return []
        until = time.monotonic() + self.deadline
        if self.method == "listwise":
            return self._listwise(query, texts, until)
        if self.workers == 1 or len(texts) == 1:
            return [self._pointwise(query, t, until) for t in texts]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(texts))) as pool:
            return list(pool.map(lambda t: self._pointwise(query, t, until), texts))

    def rerank(self, query: str, results: list[SearchResult]) -> list[SearchResult]:
        """``results`` rescored by the chat model, best first."""
        if not results:
            return []
        return rescored(results, self.score(query, [r.document.text for r in results]))

    def _pointwise(self, query: str, text: str, until: float | None = None) -> float:
        messages = [
            {"role": "system", "content": POINTWISE_SYSTEM},
            {
                "role": "user",
                "content": POINTWISE_USER.format(query=query, passage=text[: self.max_chars]),
            },
        ]
        reply = self.client.complete(
            messages, max_tokens=1, logprobs=self.logprobs, until=until, empty_ok=True
        )
        return yes_probability(reply.text, reply.top_logprobs)

    def _listwise(self, query: str, texts: list[str], until: float | None = None) -> list[float]:
        passages = "\n".join(
            f"[{i}] {' '.join(t[: self.max_chars].split())}" for i, t in enumerate(texts, 1)
        )
        messages = [
            {"role": "system", "content": LISTWISE_SYSTEM},
            {"role": "user", "content": LISTWISE_USER.format(query=query, passages=passages)},
        ]
        reply = self.client.complete(
            messages, max_tokens=8 * len(texts) + 16, until=until, empty_ok=True
        )
        return listwise_scores(reply.text, len(texts))

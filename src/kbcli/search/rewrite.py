"""Optional query rewriting before recall, over an OpenAI-compatible chat endpoint.

Off by default (``rag.rewrite.mode: none``). The rewriter adds *routes*; the original query is
always recalled too, and :class:`~kbcli.pipeline.RAGPipeline` fuses the routes with reciprocal
rank fusion before any reranking (which still judges against the original query).

* ``hyde`` (Gao et al. 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels"): the
  chat model writes a short hypothetical answer, which is embedded and searched on the dense
  route (keyword route in ``--mode keyword``). Prompt::

      system: You write short factual passages.
      user:   Write a passage of two to four sentences that answers the question below, as
              a document in a knowledge base would. Do not mention the question.

              Question: {query}

* ``expand``: the model writes ``expansions`` (3) alternative phrasings, each recalled in the
  search's own mode. Prompt::

      system: You rewrite search queries.
      user:   Write {n} different search queries that look for the same information as
              the query below, using other words and synonyms. One per line, no numbering,
              no other text.

              Query: {query}

* ``both``: the two together.
"""

from __future__ import annotations

import re
import time

from kbcli.config.schema import Config, RewriteConfig
from kbcli.config.vocabulary import REWRITE_MODES
from kbcli.errors import InvalidOptionError
from kbcli.providers.chat import search_chat

HYDE_SYSTEM = "You write short factual passages."
HYDE_USER = (
    "Write a passage of two to four sentences that answers the question below, as a document "
    "in a knowledge base would. Do not mention the question.\n\nQuestion: {query}"
)
EXPAND_SYSTEM = "You rewrite search queries."
EXPAND_USER = (
    "Write {n} different search queries that look for the same information as the query "
    "below, using other words and synonyms. One per line, no numbering, no other text.\n\n"
    "Query: {query}"
)


class QueryRewriter:
    """Turns a query into extra recall routes: ``(label, text, mode)`` triples.

    ``mode`` is ``hyde``, ``expand`` or ``both``; ``model`` / ``base_url`` / ``api_key`` are
    resolved as :func:`~kbcli.providers.chat.search_chat` does (the one chat client, with the
    rewriter's retries and ``deadline``).
    """

    def __init__(
        self,
        mode: str = "hyde",
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        expansions: int = 3,
        timeout: float = 60.0,
        max_retries: int = 3,
        deadline: float = 60.0,
    ) -> None:
        if mode not in REWRITE_MODES or mode == "none":
            raise InvalidOptionError(
                f"Unknown rewrite mode {mode!r}: choose one of hyde, expand, both"
            )
        self.mode = mode
        self.expansions = max(1, int(expansions))
        self.client = search_chat(
            model,
            base_url,
            api_key,
            label="query rewriter",
            setting="rag.rewrite",
            timeout=timeout,
            max_retries=max_retries,
            deadline=deadline,
        )
        self.deadline = deadline

    def __repr__(self) -> str:
        return f"QueryRewriter(mode={self.mode!r}, model={self.client.model!r})"

    def with_mode(self, mode: str) -> QueryRewriter:
        """The same rewriter (same client and settings) in another mode."""
        import copy

        if mode not in ("hyde", "expand", "both"):
            raise InvalidOptionError(
                f"Unknown rewrite mode {mode!r}: choose one of hyde, expand, both"
            )
        if mode == self.mode:
            return self
        other = copy.copy(self)
        other.mode = mode
        return other

    def hyde(self, query: str, until: float | None = None) -> str:
        """A hypothetical passage answering ``query`` (``until``: the call's end, else
        ``deadline`` from now)."""
        messages = [
            {"role": "system", "content": HYDE_SYSTEM},
            {"role": "user", "content": HYDE_USER.format(query=query)},
        ]
        reply = self.client.complete(messages, max_tokens=200, until=until, empty_ok=True)
        return reply.text.strip()

    def expand(self, query: str, until: float | None = None) -> list[str]:
        """Up to ``expansions`` other phrasings of ``query`` (never the query itself)."""
        messages = [
            {"role": "system", "content": EXPAND_SYSTEM},
            {"role": "user", "content": EXPAND_USER.format(n=self.expansions, query=query)},
        ]
        reply = self.client.complete(
            messages, max_tokens=60 * self.expansions, until=until, empty_ok=True
        )
        text = reply.text
        seen = {query.strip().lower()}
        out = []
        for line in text.splitlines():
            line = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip().strip('"').strip()
            if line and line.lower() not in seen:
                seen.add(line.lower())
                out.append(line)
        return out[: self.expansions]

    def routes(self, query: str, search_mode: str) -> list[tuple[str, str, str]]:
        """Extra ``(label, text, mode)`` routes for ``query`` searched in ``search_mode``; the
        requests together end within ``deadline`` seconds."""
        until = time.monotonic() + self.deadline
        routes: list[tuple[str, str, str]] = []
        if self.mode in ("hyde", "both"):
            passage = self.hyde(query, until)
            if passage:
                dense = "keyword" if search_mode == "keyword" else "semantic"
                routes.append(("hyde", passage, dense))
        if self.mode in ("expand", "both"):
            for n, text in enumerate(self.expand(query, until), start=1):
                routes.append((f"expand{n}", text, search_mode))
        return routes


def build_rewriter(config: Config, mode: str | None = None) -> QueryRewriter | None:
    """The rewriter ``config``'s ``rag.rewrite`` describes (``mode`` overrides
    ``rag.rewrite.mode``), or None when the mode is ``none``. No request is made until a
    search rewrites."""
    return rewriter_from(config.rag.rewrite, mode)


def rewriter_from(settings: RewriteConfig, mode: str | None = None) -> QueryRewriter | None:
    """:func:`build_rewriter` from the ``rag.rewrite`` settings themselves."""
    chosen = mode or settings.mode
    if chosen == "none":
        return None
    return QueryRewriter(chosen, settings.model, settings.base_url, deadline=settings.deadline)

"""The knowledge base as a tool for LLM agents."""

from __future__ import annotations

from typing import Any

from .types import MODES, SearchOptions

NO_RESULTS = "No relevant knowledge found."
NO_QUERY = "Error: No query provided"


class KnowledgeSearchTool:
    """``knowledge_search``: searches a knowledge base and answers with a numbered list.

    ``pipeline`` is anything with ``search``: a :class:`~kbcli.pipeline.KnowledgeBase`
    (``search(query, k=, mode=)``) or a :class:`~kbcli.pipeline.RAGPipeline`
    (``search(query, options)``). ``access_filter`` restricts every search to documents that
    pass it; a caller can only narrow it (a caller's ``filter`` argument is ANDed with it),
    never widen it.
    """

    name = "knowledge_search"
    description = (
        "Search the local knowledge base for passages relevant to a question. Returns a "
        "numbered list of the best matching passages, each with its source file when known."
    )

    def __init__(
        self,
        pipeline: Any,
        *,
        default_k: int = 3,
        default_mode: str = "hybrid",
        access_filter: dict[str, Any] | None = None,
    ):
        from .filters import validate_filter

        self.pipeline = pipeline
        self.access_filter = validate_filter(access_filter)
        self.default_k = default_k
        self.default_mode = default_mode

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the tool's arguments."""
        return {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for."},
                "k": {
                    "type": "integer",
                    "description": "How many passages to return.",
                    "default": self.default_k,
                    "minimum": 1,
                    "maximum": 50,
                },
                "filter": {
                    "type": "object",
                    "description": 'Optional metadata filter, e.g. {"source": "/docs/a.md"}.',
                },
                "mode": {
                    "type": "string",
                    "enum": list(MODES),
                    "description": "keyword (BM25), semantic (vectors) or hybrid (both).",
                    "default": self.default_mode,
                },
            },
            "required": ["query"],
        }

    @property
    def parameters(self) -> dict[str, Any]:
        """Alias of :attr:`input_schema` (the name some agent frameworks use)."""
        return self.input_schema

    def run_sync(
        self, query: str | None = None, k: int = 3, mode: str | None = None, **kwargs: Any
    ) -> str:
        """Blocking version of :meth:`run`."""
        if not query:
            query = kwargs.get("input")
        if not isinstance(query, str) or not query.strip():
            return NO_QUERY
        filters = [f for f in (self.access_filter, kwargs.get("filter")) if f]
        combined = filters[0] if len(filters) == 1 else ({"$and": filters} if filters else None)
        options = SearchOptions(
            k=int(k or self.default_k), mode=mode or self.default_mode, filter=combined
        )
        if hasattr(self.pipeline, "search_with"):
            results = self.pipeline.search_with(query, options)
        else:
            results = self.pipeline.search(query, options)
        if not results:
            return NO_RESULTS
        lines = []
        for rank, hit in enumerate(results, start=1):
            text = " ".join(hit.document.text.split())
            source = hit.document.metadata.get("source")
            lines.append(f"{rank}. {text}" + (f" (source: {source})" if source else ""))
        return "\n".join(lines)

    async def run(
        self, query: str | None = None, k: int = 3, mode: str | None = None, **kwargs: Any
    ) -> str:
        """Search and format the hits as ``1. <text> (source: <path>)`` lines.

        An empty query (also looked up in ``kwargs["input"]``) gives ``Error: No query provided``;
        no hits give ``No relevant knowledge found.``
        """
        import asyncio

        return await asyncio.to_thread(self.run_sync, query, k, mode, **kwargs)

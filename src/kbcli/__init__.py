"""kbcli: a knowledge base over SQLite with keyword, semantic and hybrid search.

Users import from here only; submodules are implementation detail. Importing kbcli is cheap:
numpy, SDKs and parsers load when first used.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing (kb --help imports little else of kbcli)
TYPE_CHECKING = False

from kbcli.system.exports import lazy_exports  # noqa: E402

# name -> submodule. Importing kbcli stays near-free (the `kb` command starts fast); each name
# loads its module on first access (PEP 562).
_EXPORTS = {
    "Analyzer": "text.analysis",
    "Answer": "agent.answer",
    "Evidence": "agent.answer",
    "Config": "config.lookup",
    "load_config": "config.lookup",
    "BaseEmbedder": "embedders",
    "EmbedderInfo": "embedders",
    "SimpleEmbedder": "embedders",
    "cosine_similarity": "embedders",
    "simple_embedding": "embedders",
    "OpenAIEmbedder": "embedders",
    "GeminiEmbedder": "embedders",
    "LocalEmbedder": "embedders",
    "resolve_embedder": "embedders",
    "choose_embedder": "embedders",
    "AnswerError": "errors",
    "ConfigError": "errors",
    "DatabaseLockedError": "errors",
    "EmbedderError": "errors",
    "FilterError": "errors",
    "IndexMismatchError": "errors",
    "InvalidOptionError": "errors",
    "KBError": "errors",
    "LoaderError": "errors",
    "MissingDependencyError": "errors",
    "NotAKnowledgeBaseError": "errors",
    "NotFoundError": "errors",
    "ReadOnlyIndexError": "errors",
    "RerankerError": "errors",
    "StoreError": "errors",
    "UnsafePruneError": "errors",
    "UnsupportedFormatError": "errors",
    "DefaultDocumentLoader": "ingest",
    "SimpleTextChunker": "ingest",
    "StructureAwareChunker": "ingest",
    "StructurePreservingNormalizer": "ingest",
    "WhitespaceNormalizer": "ingest",
    "register_loader": "ingest",
    "IngestPipeline": "pipeline",
    "KnowledgeBase": "pipeline",
    "RAGPipeline": "pipeline",
    "DocumentLoaderProtocol": "protocols",
    "EmbedderProtocol": "protocols",
    "RerankerProtocol": "protocols",
    "RetrieverProtocol": "protocols",
    "TextChunkerProtocol": "protocols",
    "TextNormalizerProtocol": "protocols",
    "VectorStoreProtocol": "protocols",
    "PassthroughReranker": "search.rerank",
    "APIReranker": "search.rerank",
    "CrossEncoderReranker": "search.rerank",
    "LLMReranker": "search.rerank",
    "build_reranker": "search.rerank",
    "QueryRewriter": "search.rewrite",
    "build_rewriter": "search.rewrite",
    "BM25Retriever": "search.retrievers",
    "DenseRetriever": "search.retrievers",
    "HybridRetriever": "search.retrievers",
    "InMemoryStore": "stores",
    "SQLiteStore": "stores",
    "ScopedKnowledgeBase": "knowledge_base",
    "Citation": "agent.tools.read",
    "KnowledgeGetTool": "agent.tools.read",
    "KnowledgeSearchTool": "agent.tools.read",
    "KnowledgeAddTool": "agent.tools.write",
    "KnowledgeDeleteTool": "agent.tools.write",
    "KnowledgeStatsTool": "agent.tools.read",
    "ToolResult": "agent.tools.read",
    "knowledge_tools": "agent.tools.read",
    "Document": "types",
    "SearchOptions": "types",
    "SearchResult": "types",
    "SearchResults": "types",
    "Section": "types",
}


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from kbcli.pipeline import IngestPipeline, KnowledgeBase, RAGPipeline  # noqa: F401
    from kbcli.search.rerank import (  # noqa: F401
        APIReranker,
        CrossEncoderReranker,
        LLMReranker,
        PassthroughReranker,
        build_reranker,
    )
    from kbcli.search.retrievers import BM25Retriever, DenseRetriever, HybridRetriever  # noqa: F401
    from kbcli.search.rewrite import QueryRewriter, build_rewriter  # noqa: F401
    from kbcli.stores import InMemoryStore, SQLiteStore  # noqa: F401
    from kbcli.text.analysis import Analyzer  # noqa: F401
    from kbcli.types import Document, SearchOptions, SearchResult, SearchResults, Section  # noqa: F401

__version__ = "0.1.0"

__all__ = sorted(_EXPORTS)

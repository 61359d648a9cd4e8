"""kbcli: a knowledge base over SQLite with keyword, semantic and hybrid search.

Users import from here only; submodules are implementation detail. Importing kbcli is cheap:
numpy, SDKs and parsers load when first used.
"""

from __future__ import annotations

from .analysis import Analyzer
from .config import Config, load_config
from .embedders import (
    BaseEmbedder,
    EmbedderInfo,
    SimpleEmbedder,
    cosine_similarity,
    simple_embedding,
)
from .errors import (
    ConfigError,
    DatabaseLockedError,
    EmbedderError,
    FilterError,
    IndexMismatchError,
    InvalidOptionError,
    KBError,
    LoaderError,
    MissingDependencyError,
    NotAKnowledgeBaseError,
    NotFoundError,
    StoreError,
    UnsupportedFormatError,
)
from .pipeline import IngestPipeline, KnowledgeBase, RAGPipeline
from .protocols import (
    DocumentLoaderProtocol,
    EmbedderProtocol,
    RerankerProtocol,
    RetrieverProtocol,
    TextChunkerProtocol,
    TextNormalizerProtocol,
    VectorStoreProtocol,
)
from .rerankers import PassthroughReranker
from .retrievers import BM25Retriever, DenseRetriever, HybridRetriever
from .stores import InMemoryStore, SQLiteStore
from .tools import KnowledgeSearchTool
from .types import Document, SearchOptions, SearchResult, Section

__version__ = "0.1.0"

__all__ = [
    "Analyzer",
    "BM25Retriever",
    "BaseEmbedder",
    "Config",
    "ConfigError",
    "DatabaseLockedError",
    "DenseRetriever",
    "Document",
    "DocumentLoaderProtocol",
    "EmbedderError",
    "EmbedderInfo",
    "EmbedderProtocol",
    "FilterError",
    "HybridRetriever",
    "InMemoryStore",
    "IndexMismatchError",
    "IngestPipeline",
    "InvalidOptionError",
    "KBError",
    "KnowledgeBase",
    "KnowledgeSearchTool",
    "LoaderError",
    "MissingDependencyError",
    "NotAKnowledgeBaseError",
    "NotFoundError",
    "PassthroughReranker",
    "RAGPipeline",
    "RerankerProtocol",
    "RetrieverProtocol",
    "SQLiteStore",
    "SearchOptions",
    "SearchResult",
    "Section",
    "SimpleEmbedder",
    "StoreError",
    "TextChunkerProtocol",
    "TextNormalizerProtocol",
    "UnsupportedFormatError",
    "VectorStoreProtocol",
    "cosine_similarity",
    "load_config",
    "simple_embedding",
]

"""The ingest pipeline (load -> normalise -> chunk -> embed -> store), the search pipeline
(recall -> fuse -> rerank -> threshold) and the KnowledgeBase facade over both.

Each lives in its own module (:mod:`kbcli.ingest_pipeline`, :mod:`kbcli.rag_pipeline`,
:mod:`kbcli.knowledge_base`, :mod:`kbcli.lazy_embedder`); this one keeps the names users import
from it.
"""

from .ingest_pipeline import IngestPipeline
from .knowledge_base import KnowledgeBase
from .lazy_embedder import DEFAULT_BATCH, LazyEmbedder
from .rag_pipeline import RAGPipeline

__all__ = ["DEFAULT_BATCH", "IngestPipeline", "KnowledgeBase", "LazyEmbedder", "RAGPipeline"]

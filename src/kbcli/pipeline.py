"""The ingest pipeline (load -> normalise -> chunk -> embed -> store), the search pipeline
(recall -> fuse -> rerank -> threshold) and the KnowledgeBase over both.

Each lives in its own module (:mod:`kbcli.ingest.pipeline`, :mod:`kbcli.search.pipeline`,
:mod:`kbcli.knowledge_base`, :mod:`kbcli.embedders.lazy`); this one keeps the names users import
from it.
"""

from kbcli.embedders.lazy import DEFAULT_BATCH, LazyEmbedder
from kbcli.ingest.pipeline import IngestPipeline
from kbcli.knowledge_base import KnowledgeBase
from kbcli.search.pipeline import RAGPipeline

__all__ = ["DEFAULT_BATCH", "IngestPipeline", "KnowledgeBase", "LazyEmbedder", "RAGPipeline"]

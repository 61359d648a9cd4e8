"""The configuration's shape: ``jianmu.yaml``'s sections as frozen dataclasses with their
defaults, the names each setting accepts, and where kbcli keeps its files when nothing says.

Reading and validating a file is :mod:`kbcli.config.parse`; finding it, the environment and the
process's cached configuration are :mod:`kbcli.config.lookup`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbcli.config.registry import CHUNKERS as CHUNKER_REGISTRY
from kbcli.config.registry import EMBEDDERS, STORE_ENTRIES, STORES
from kbcli.text.bm25 import SOURCE_WEIGHT

CONFIG_FILENAME = "jianmu.yaml"
EMBEDDING_PROVIDERS = ("auto", *EMBEDDERS)
CHUNKERS = tuple(CHUNKER_REGISTRY)
STORE_BACKENDS = tuple(STORES)
ANALYZER_LANGUAGES = ("auto", "en", "zh", "none")
LLM_RERANK_METHODS = ("pointwise", "listwise")
# The scripts the built-in OCR models (PP-OCRv4, in rapidocr-onnxruntime) read.
OCR_LANGUAGES = ("zh", "en")
# The settings each registered store accepts under ``store:`` (a user's class takes any): a
# type, or a tuple of the allowed names; from the backend's one registration (STORE_ENTRIES).
STORE_SETTINGS: dict[str, dict[str, Any]] = {
    name: dict(entry.settings) for name, entry in STORE_ENTRIES.items()
}
MAX_SECONDS = 86_400.0  # a day: bigger values are typos (and overflow some timers)
MAX_THREADS = 1024  # rag.embedding.threads: more is a typo (each is a thread of the model)


def user_config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kbcli"


def user_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kbcli"


def default_db_path() -> Path:
    """Where the knowledge database lives when nothing else says: the user data dir."""
    return user_data_dir() / "knowledge.db"


@dataclass(frozen=True)
class EmbeddingConfig:
    """``rag.embedding``: which embedder to use.

    ``provider`` defaults to ``"openai"``; when no file sets it (``provider_set`` is False),
    :func:`kbcli.embedders.resolve_embedder` picks by the API keys present and falls back to the
    built-in simple embedder.
    """

    provider: str = "openai"
    model: str | None = None
    base_url: str | None = None
    dimensions: int | None = None
    batch_size: int = 64
    max_retries: int = 5
    timeout: float = 30.0  # seconds per request, from sending it to the answer's last byte
    retry_budget: float = 45.0  # seconds per request, every retry and wait included
    device: str = "cpu"
    # CPU threads of a local model (local, e5); None: the CPUs this process may use, less
    # those the load average says other processes keep busy (docs/embedders.md, "Speed")
    threads: int | None = None
    provider_set: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class RerankConfig:
    """``rag.rerank``: the second search stage (see :mod:`kbcli.search.rerank`).

    ``provider`` is ``none`` (off), a name in :data:`kbcli.config.registry.RERANKERS` or a
    ``"package.module:Class"`` path. Searches recall ``candidates`` hits (never fewer than 2×k),
    the reranker rescores them, hits scoring below ``min_relevance`` are dropped (so a search can
    answer "No relevant knowledge found"), and the best k are returned. ``model`` is a folder or
    model name (cross-encoder) or the server's model name (api, llm); ``base_url`` the server;
    ``batch_size`` pairs per model call (cross-encoder); ``max_documents`` the most documents
    one request to a rerank API carries (the pool goes in one request up to it: providers
    price per request; Text Embeddings Inference accepts 32 unless started with
    ``--max-client-batch-size``); ``method`` is the LLM reranker's prompt (``pointwise``
    yes/no or ``listwise``).
    """

    provider: str = "none"
    model: str | None = None
    base_url: str | None = None
    candidates: int = 50
    min_relevance: float | None = None
    batch_size: int = 32
    max_documents: int = 1000
    method: str = "pointwise"
    timeout: float = 30.0
    max_retries: int = 3
    deadline: float = 120.0  # seconds for one search's rerank: every request, retry and wait


@dataclass(frozen=True)
class RewriteConfig:
    """``rag.rewrite``: optional query rewriting before recall over an OpenAI-compatible chat
    endpoint (see :mod:`kbcli.search.rewrite`). ``mode``: ``none``, ``hyde`` (a hypothetical answer
    searched alongside the query), ``expand`` (alternative phrasings) or ``both``;
    ``deadline``: seconds for one query's rewriting, every request, retry and wait included."""

    mode: str = "none"
    model: str | None = None
    base_url: str | None = None
    deadline: float = 60.0


@dataclass(frozen=True)
class AnswerConfig:
    """``rag.answer``: the chat model that writes ``kb ask`` answers (see
    :mod:`kbcli.agent.answer`).

    ``provider`` is ``openai`` (any OpenAI-compatible chat endpoint), ``gemini`` or a
    ``"package.module:Class"`` path; ``model`` / ``base_url`` default to the provider's (for
    openai, ``OPENAI_BASE_URL`` as the SDK reads it); ``api_key_env`` names the environment
    variable holding the key (default ``OPENAI_API_KEY``, or ``GOOGLE_API_KEY`` /
    ``GEMINI_API_KEY``). ``max_evidence`` caps the evidence in the prompt, in
    ``evidence_unit`` (``chars``, or ``tokens`` when the file says ``"1500 tokens"``).
    ``min_coverage`` is the evidence floor used without a reranker's ``min_relevance``.
    ``deadline`` bounds the whole answer in seconds (every attempt, wait and streamed piece),
    ``max_answer_mb`` its size, enforced while the reply is read.
    """

    provider: str = "openai"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    max_evidence: int = 6000
    evidence_unit: str = "chars"
    max_tokens: int = 800
    temperature: float = 0.0
    timeout: float = 60.0  # seconds per attempt; streamed: to the first token and between tokens
    max_retries: int = 2
    min_coverage: float = 0.3
    deadline: float = 300.0  # seconds for the whole answer, retries and streaming included
    max_answer_mb: float = 1.0  # the most answer text read (MB, 2**20 bytes of UTF-8)


@dataclass(frozen=True)
class RAGConfig:
    """``rag``: embedding settings, the chunker choice, reranking, query rewriting and the
    answer model of ``kb ask``."""

    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    chunker: str = "structure"
    rerank: RerankConfig = field(default_factory=RerankConfig)
    rewrite: RewriteConfig = field(default_factory=RewriteConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)


@dataclass(frozen=True)
class LimitsConfig:
    """``limits``: chunking sizes, ranking weights and per-file safety limits."""

    chunk_size: int = 500
    chunk_overlap: int = 50
    rerank_alpha: float = 0.6
    source_weight: float = SOURCE_WEIGHT
    max_file_mb: float = 200.0
    file_timeout: float = 120.0


@dataclass(frozen=True)
class PathsConfig:
    """``paths``: where the knowledge database lives."""

    knowledge_db: Path = field(default_factory=default_db_path)


@dataclass(frozen=True)
class AnalysisConfig:
    """``analysis``: how text is split into keyword-search terms (index and query alike)."""

    language: str = "auto"
    stem: bool = True
    stopwords: bool = True


@dataclass(frozen=True)
class OcrConfig:
    """``ocr``: reading scanned PDF pages and image files (the ``ocr`` extra; docs/loaders.md).

    With ``enabled``, a PDF page with fewer than ``min_text_per_page`` extracted characters is
    rendered at ``dpi`` and recognised, and image files are read. ``languages`` are the scripts
    kept (of :data:`OCR_LANGUAGES`); without ``zh``, full-width forms become ASCII and CJK
    characters are dropped as misreadings. A page is rendered at most ``max_megapixels`` big
    (a larger page at a lower resolution) and an image declaring more is refused;
    ``page_timeout`` bounds one page's rendering and recognition in seconds (the whole file's
    reading, every page included, stays within ``limits.file_timeout``); at most ``max_pages``
    pages (or image frames) of one file are recognised, the rest skipped with a warning;
    recognised lines scoring under ``min_confidence`` (0..1) are dropped.
    """

    enabled: bool = True
    languages: tuple[str, ...] = OCR_LANGUAGES
    min_text_per_page: int = 20
    dpi: int = 200
    max_megapixels: float = 40.0
    page_timeout: float = 60.0
    max_pages: int = 100
    min_confidence: float = 0.5


@dataclass(frozen=True)
class StoreConfig:
    """``store``: which store backend holds the index, and its settings.

    ``backend`` is a registered name (:data:`kbcli.config.registry.STORES`) or a user class as
    ``"package.module:Class"``; ``settings`` are passed to it as keyword arguments. The SQLite
    store's file is ``paths.knowledge_db``.
    """

    backend: str = "sqlite"
    settings: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Config:
    """The whole configuration; ``source`` is the file it came from, if any."""

    rag: RAGConfig = field(default_factory=RAGConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    ocr: OcrConfig = field(default_factory=OcrConfig)
    source: Path | None = None

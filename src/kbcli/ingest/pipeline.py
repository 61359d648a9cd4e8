"""The ingest pipeline: load -> normalise -> chunk -> embed -> store."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli.config.lookup import Config, defaults
from kbcli.embedders import SimpleEmbedder
from kbcli.embedders.base import EmbedderInfo, embedder_info, is_cheap
from kbcli.protocols import (
    DocumentCatalog,
    DocumentLoaderProtocol,
    EmbedderProtocol,
    EmbeddingCache,
    SectionChunkerProtocol,
    SectionLoaderProtocol,
    TextChunkerProtocol,
    TextNormalizerProtocol,
    VectorStoreProtocol,
    supports,
)
from kbcli.stores import InMemoryStore
from kbcli.system.crashpoints import crash_point
from kbcli.system.paths import canonical_source, source_path
from kbcli.text import analysis
from kbcli.text.analysis import TITLE_KEY
from kbcli.types import Document, Section

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.ingest.files import FileContent
    from kbcli.ingest.loaders.registry import Loaded

#: What loads a file: text (the reference ``load``) or sections with metadata.
Loader = DocumentLoaderProtocol | SectionLoaderProtocol
#: What chunks text: plain strings (the reference ``chunk``) or sections with offsets.
Chunker = TextChunkerProtocol | SectionChunkerProtocol


def new_id() -> str:
    return uuid.uuid4().hex


def default_loader(config: Config) -> Loader:
    """The default document loader with ``config``'s settings: a
    :class:`~kbcli.ingest.DefaultDocumentLoader` with ``limits.max_file_mb``,
    ``limits.file_timeout`` and ``ocr``."""
    # lazy: the loaders (zipfile, html.parser, email) stay off a search's start
    from kbcli.ingest import DefaultDocumentLoader

    limits = config.limits
    return DefaultDocumentLoader(
        max_file_mb=limits.max_file_mb, timeout=limits.file_timeout, ocr=config.ocr
    )


def _add_lines(chunks: list[Section], sections: list[Section]) -> None:
    """Give each chunk with ``char_start``/``char_end`` its ``line``/``line_end`` (1-based) in
    the text its offsets point into: the sections joined by a blank line, as loaded."""
    # lazy: chunkers (markdown, normalizers: ~10 ms) stay off a search's start
    from kbcli.ingest.chunkers import SECTION_SEPARATOR

    text = SECTION_SEPARATOR.join(s.text for s in sections)
    at, line = 0, 1  # chunks come in order: count newlines once, incrementally
    for chunk in chunks:
        start, end = chunk.metadata.get("char_start"), chunk.metadata.get("char_end")
        if not isinstance(start, int) or not isinstance(end, int):
            continue
        if start < at:
            at, line = 0, 1
        line += text.count("\n", at, start)
        at = start
        chunk.metadata["line"] = line
        chunk.metadata["line_end"] = line + text.count("\n", start, max(start, end - 1))


class IngestPipeline:
    """Turns text and files into stored, embedded chunks.

    Defaults: :class:`~kbcli.embedders.SimpleEmbedder`, :class:`~kbcli.stores.InMemoryStore`,
    the default loader, and the configured chunker with ``limits.chunk_size`` /
    ``limits.chunk_overlap``. Structure-aware chunkers (with ``chunk_sections``) see the text as
    loaded and the normaliser cleans each chunk; plain chunkers get normalised text (reference).
    """

    def __init__(
        self,
        embedder: EmbedderProtocol | None = None,
        store: VectorStoreProtocol | None = None,
        loader: Loader | None = None,
        normalizer: TextNormalizerProtocol | None = None,
        chunker: Chunker | None = None,
        *,
        config: Config | None = None,
    ):
        self.config = config  # None: the configuration found by the default lookup
        if embedder is None:
            embedder = SimpleEmbedder()
        if store is None:
            store = InMemoryStore()
        self.embedder: EmbedderProtocol = embedder
        self.store: VectorStoreProtocol = store
        # Loader, normaliser and chunker defaults are built on first use: constructing a
        # pipeline (every KnowledgeBase does) must stay cheap and need no parser.
        self._loader = loader
        self._normalizer = normalizer
        self._chunker = chunker

    @property
    def loader(self) -> Loader:
        """The document loader (default: :class:`~kbcli.ingest.DefaultDocumentLoader`)."""
        if self._loader is None:
            self._loader = default_loader(self.settings)
        return self._loader

    @property
    def chunker(self) -> Chunker:
        """The chunker (default: ``rag.chunker`` with ``limits.chunk_size/chunk_overlap``)."""
        if self._chunker is None:
            # lazy: chunkers (markdown, normalizers: ~10 ms) off a search's start
            from kbcli.ingest import make_chunker

            config = self.settings
            self._chunker = make_chunker(
                config.rag.chunker, config.limits.chunk_size, config.limits.chunk_overlap
            )
        return self._chunker

    @property
    def settings(self) -> Config:
        """The configuration the defaults come from: the one given, else
        :func:`kbcli.config.lookup.defaults`."""
        return self.config if self.config is not None else defaults()

    @property
    def normalizer(self) -> TextNormalizerProtocol:
        """The normaliser applied to each chunk (default: whitespace collapsing)."""
        if self._normalizer is None:
            # lazy: normalizers stay off a search's start
            from kbcli.ingest import WhitespaceNormalizer

            self._normalizer = WhitespaceNormalizer()
        return self._normalizer

    # --- chunking ----------------------------------------------------------------------------

    def chunk_sections(self, sections: list[Section]) -> list[Section]:
        """Chunk loaded sections; each chunk keeps its section's metadata (page, heading...).

        A chunker that reads structure (``normalize_first`` False) sees the text as loaded and
        each chunk is normalised; otherwise each section is normalised, then chunked (the
        reference order)."""
        chunker = self.chunker
        if supports(chunker, SectionChunkerProtocol) and not chunker.normalize_first:
            chunks = chunker.chunk_sections(sections)
            _add_lines(chunks, sections)
            cleaned = [Section(self.normalizer.normalize(c.text), dict(c.metadata)) for c in chunks]
        else:
            normalize = self.normalizer.normalize
            normalized = [Section(normalize(s.text), dict(s.metadata)) for s in sections]
            if supports(chunker, SectionChunkerProtocol):
                cleaned = chunker.chunk_sections(normalized)
                _add_lines(cleaned, normalized)
            else:
                cleaned = [
                    Section(c, dict(section.metadata))
                    for section in normalized
                    for c in chunker.chunk(section.text)
                ]
        return [c for c in cleaned if c.text.strip()]

    def load_sections(self, path: str | os.PathLike[str]) -> list[Section]:
        """Load a file as sections (one section when the loader has no structure)."""
        given = path if isinstance(path, (str, Path)) else Path(path)  # the loaders' type
        loader = self.loader
        if supports(loader, SectionLoaderProtocol):
            return list(loader.load_sections(given))
        return [Section(loader.load(given), {})]

    def takes_bytes(self, path: str | os.PathLike[str]) -> bool:
        """True when :meth:`load_content` loads ``path`` from the bytes read (a text file with
        the default loader): a sync keeps them."""
        # lazy: the loaders (zipfile, html.parser, email) stay off a search's start
        from kbcli.ingest import DefaultDocumentLoader

        loader = self.loader
        return isinstance(loader, DefaultDocumentLoader) and loader.takes_bytes(Path(path))

    def load_content(self, path: str | os.PathLike[str], content: FileContent) -> Loaded:
        """Load a file from ``content``, the one read of it a sync made (hashed while read):
        the default loader takes its bytes or checks its hash
        (:meth:`~kbcli.ingest.DefaultDocumentLoader.load_content`); another loader reads the
        path again (``confirmed`` False: the sync hashes the file once more)."""
        # lazy: the loaders (zipfile, html.parser, email) stay off a search's start
        from kbcli.ingest import DefaultDocumentLoader
        from kbcli.ingest.loaders.registry import Loaded

        loader = self.loader
        if isinstance(loader, DefaultDocumentLoader):
            return loader.load_content(Path(path), content)
        return Loaded(self.load_sections(path))

    # --- embedding and storing ---------------------------------------------------------------

    def check_embedder(self) -> EmbedderInfo:
        """The embedder's identity, checked against the one the store's vectors were made
        with (raises :class:`~kbcli.errors.IndexMismatchError` when they differ)."""
        info = embedder_info(self.embedder)
        if supports(self.store, DocumentCatalog):
            self.store.check_embedder(info)
        return info

    def cached_vectors(self, texts: list[str]) -> dict[str, list[float]]:
        """Vectors of ``texts`` known without a costly embedding: those in the store's
        embedding cache (none without one), or, for a cheap embedder (``cheap``: the
        built-in one), every one of them, embedded now."""
        if not texts:
            return {}
        if is_cheap(self.embedder):
            texts = list(dict.fromkeys(texts))
            vectors = dict(zip(texts, self.embedder.embed_documents(texts)))
            crash_point("after-embed")
            return vectors
        if not supports(self.store, EmbeddingCache):
            return {}
        return self.store.cached_embeddings(embedder_info(self.embedder), texts)

    def embed(self, texts: list[str], *, remember: bool = False) -> list[list[float]]:
        """Vectors for ``texts``, reusing the store's embedding cache where it has one (not
        for a cheap embedder: it is faster to run again).

        New vectors are not cached: every caller stores them with their chunks, and the cache
        finds a stored chunk's vector as its own (``remember=True`` caches them besides, for
        vectors that will not be stored).
        """
        if not texts:
            return []
        if is_cheap(self.embedder) or not supports(self.store, EmbeddingCache):
            return self.embedder.embed_documents(texts)
        key = embedder_info(self.embedder)
        cached = self.store.cached_embeddings(key, texts)
        missing = [t for t in dict.fromkeys(texts) if t not in cached]
        if missing:
            fresh = self.embedder.embed_documents(missing)
            cached.update(zip(missing, fresh))
            if remember:
                self.store.cache_embeddings(embedder_info(self.embedder), dict(zip(missing, fresh)))
        return [cached[t] for t in texts]

    def build_documents(
        self, chunks: list[Section], metadata: dict[str, Any] | None
    ) -> list[Document]:
        """Documents for chunks: shared metadata + chunk metadata + ``chunk_index`` + the
        document's ``title`` (given in ``metadata``, else its first heading, else the file
        name of ``metadata["source"]``; see :func:`kbcli.text.analysis.document_title`)."""
        now = datetime.now(timezone.utc)
        shared = dict(metadata or {})
        if not shared.get(TITLE_KEY):
            source = shared.get("source")
            title = analysis.document_title(
                (c.metadata.get("heading") for c in chunks),
                source if isinstance(source, str) else None,
            )
            if title:
                shared[TITLE_KEY] = title
        docs = []
        for index, chunk in enumerate(chunks):
            meta = {**shared, **chunk.metadata, "chunk_index": index}
            docs.append(Document(id=new_id(), text=chunk.text, metadata=meta, created_at=now))
        return docs

    def store_documents(self, docs: list[Document], source: str | None = None) -> list[str]:
        """Embed and store ``docs`` (not chunked), in place of ``source``'s earlier chunks when
        given (a plain reference store only adds); returns their ids."""
        info = self.check_embedder()
        vectors = self.embed([d.text for d in docs])
        info = embedder_info(self.embedder) if info.dimension is None else info
        if supports(self.store, DocumentCatalog):
            if source is not None:
                return self.store.replace_source(source, docs, vectors, embedder=info)
            return self.store.add(docs, vectors, embedder=info) if docs else []
        # A plain reference store: add only (it cannot replace a file's earlier chunks).
        return self.store.add(docs, vectors) if docs else []

    # --- public API --------------------------------------------------------------------------

    def ingest_text(self, text: str, metadata: dict[str, Any] | None = None) -> list[str]:
        """Normalise, chunk (metadata gets ``chunk_index``), batch-embed and store ``text``."""
        chunks = self.chunk_sections([Section(text, {})])
        if not chunks:
            return []
        return self.store_documents(self.build_documents(chunks, metadata))

    def ingest_file(
        self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None
    ) -> list[str]:
        """Load, chunk, embed and store a file; metadata gets ``source`` (the absolute path).

        The file's previous chunks (same ``source``) are replaced in one step. These are the
        steps alone: :meth:`KnowledgeBase.ingest_file <kbcli.pipeline.KnowledgeBase.ingest_file>`
        goes through ``kb ingest``'s own path for one file on a store with a file ledger
        (:func:`kbcli.ingest.sync.ingest_one`: the file record, read once and hashed).
        """

        source = canonical_source(path)
        resolved = Path(source_path(source))
        chunks = self.chunk_sections(self.load_sections(resolved))
        docs = self.build_documents(chunks, {**(metadata or {}), "source": source})
        return self.store_documents(docs, source=source)

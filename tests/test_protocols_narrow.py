"""DocumentCatalog is split into the capabilities callers use; the old name is their union."""

from __future__ import annotations

from kbcli import protocols
from kbcli.protocols import (
    DocumentCatalog,
    DocumentReader,
    DocumentWriter,
    EmbedderRecord,
    IndexMetadata,
    protocol_methods,
)
from kbcli.types import Document

NARROW = (DocumentReader, DocumentWriter, IndexMetadata, EmbedderRecord)


def test_the_catalog_is_the_union_of_the_narrow_capabilities():
    union = set().union(*(protocol_methods(p) for p in NARROW))
    assert set(protocol_methods(DocumentCatalog)) == union | {"close"}
    # each method is declared once, in one capability
    assert sum(len(protocol_methods(p)) for p in NARROW) == len(union)


class ReadOnlyView:
    """A reader with nothing else: a scope-like view over a list."""

    def __init__(self, docs: list[Document]):
        self.docs = docs

    def get(self, ids, *, with_embeddings=False):
        return [d for d in self.docs if d.id in ids]

    def iter_documents(self, filter=None, *, source=None, limit=None, with_embeddings=False):
        yield from self.docs[:limit]

    def list_all(self):
        return list(self.docs)

    def count(self, filter=None):
        return len(self.docs)

    def sources(self):
        return []


def test_a_reader_needs_only_the_reads():
    view = ReadOnlyView([Document("a", "text")])
    assert isinstance(view, DocumentReader)
    assert not isinstance(view, DocumentWriter) and not isinstance(view, DocumentCatalog)
    assert protocols.missing_methods(ReadOnlyView, DocumentReader) == []

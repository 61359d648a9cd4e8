"""Turning files into chunks: loaders (by extension), normalizers and chunkers.

See docs/loaders.md for the formats, the metadata each chunk carries and how to add a loader.

Every name is re-exported here and its module loads on first use (PEP 562), so a command that
only reads a file's lines (``kb search`` placing a hit, through :mod:`.lines` and
:mod:`.text_encoding`) does not import the loaders, OCR and layout modules.
"""

from __future__ import annotations

from kbcli.system.exports import lazy_exports

_EXPORTS = {
    "SimpleTextChunker": "chunkers", "StructureAwareChunker": "chunkers",
    "make_chunker": "chunkers", "make_normalizer": "chunkers",
    **{name: "loaders.registry" for name in (
        "BuiltinLoader", "DefaultDocumentLoader", "DocxLoader", "HtmlLoader", "ImageLoader",
        "PdfLoader", "TextLoader", "loader_for", "register_loader", "supported_extensions",
    )},
    "StructurePreservingNormalizer": "normalizers", "WhitespaceNormalizer": "normalizers",
    "read_text": "loaders.text_encoding",
}  # fmt: skip

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

TYPE_CHECKING = False
if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from kbcli.ingest.chunkers import (
        SimpleTextChunker,
        StructureAwareChunker,
        make_chunker,
        make_normalizer,
    )
    from kbcli.ingest.loaders.registry import (
        BuiltinLoader,
        DefaultDocumentLoader,
        DocxLoader,
        HtmlLoader,
        ImageLoader,
        PdfLoader,
        TextLoader,
        loader_for,
        register_loader,
        supported_extensions,
    )
    from kbcli.ingest.loaders.text_encoding import read_text
    from kbcli.ingest.normalizers import StructurePreservingNormalizer, WhitespaceNormalizer

__all__ = [
    "BuiltinLoader",
    "DefaultDocumentLoader",
    "DocxLoader",
    "HtmlLoader",
    "ImageLoader",
    "PdfLoader",
    "SimpleTextChunker",
    "StructureAwareChunker",
    "StructurePreservingNormalizer",
    "TextLoader",
    "WhitespaceNormalizer",
    "loader_for",
    "make_chunker",
    "make_normalizer",
    "read_text",
    "register_loader",
    "supported_extensions",
]

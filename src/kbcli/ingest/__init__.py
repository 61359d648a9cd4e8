"""Turning files into chunks: loaders (by extension), normalizers and chunkers.

See docs/loaders.md for the formats, the metadata each chunk carries and how to add a loader.
"""

from __future__ import annotations

from .chunkers import SimpleTextChunker, StructureAwareChunker, make_chunker, make_normalizer
from .loaders import (
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
from .normalizers import StructurePreservingNormalizer, WhitespaceNormalizer
from .text_encoding import read_text

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

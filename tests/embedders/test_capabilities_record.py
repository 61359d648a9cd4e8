"""Embedder capabilities are one declared record (issue 38): every built-in embedder has it,
search reads only it, and an embedder that follows the protocol alone gets the defaults."""

from __future__ import annotations

import pytest

from kbcli.embedders import SimpleEmbedder
from kbcli.embedders.base import (
    BaseEmbedder,
    DeclaresCapabilities,
    EmbedderCapabilities,
    capabilities_of,
)
from kbcli.embedders.e5 import E5Embedder
from kbcli.embedders.gemini import GeminiEmbedder
from kbcli.embedders.lazy import LazyEmbedder
from kbcli.embedders.local import LocalEmbedder
from kbcli.embedders.openai import OpenAIEmbedder
from kbcli.embedders.static import StaticEmbedder
from kbcli.search.retrievers import HybridRetriever
from kbcli.stores import InMemoryStore
from kbcli.types import SearchOptions


class ProtocolOnly:
    def embed_documents(self, texts):
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text):
        return [1.0, 0.0]


class OwnRecord(ProtocolOnly):
    """A user's embedder that declares the record itself."""

    capabilities = EmbedderCapabilities(weak=True, alpha=0.2)


@pytest.mark.parametrize(
    "cls",
    [SimpleEmbedder, StaticEmbedder, E5Embedder, LocalEmbedder, OpenAIEmbedder, GeminiEmbedder],
)
def test_every_built_in_embedder_declares_the_record(cls):
    assert issubclass(cls, BaseEmbedder)
    assert isinstance(cls.capabilities, property)  # read from the class, nothing is loaded


def test_the_records_say_what_each_embedder_is():
    assert capabilities_of(SimpleEmbedder()) == EmbedderCapabilities(cheap=True, weak=True)
    static = StaticEmbedder.__new__(StaticEmbedder)  # the declaration, without the model
    assert capabilities_of(static) == EmbedderCapabilities(
        languages=frozenset({"en"}), alpha=0.3, keyword_sure_margin=0.35
    )
    e5 = E5Embedder.__new__(E5Embedder)
    assert capabilities_of(e5).languages == frozenset({"multilingual"})
    assert capabilities_of(e5).keyword_sure_margin == 0.35


def test_an_embedder_that_declares_nothing_gets_the_defaults():
    assert not isinstance(ProtocolOnly(), DeclaresCapabilities)
    assert capabilities_of(ProtocolOnly()) == EmbedderCapabilities()


def test_a_users_own_record_is_read_as_it_is():
    assert capabilities_of(OwnRecord()) == EmbedderCapabilities(weak=True, alpha=0.2)
    retriever = HybridRetriever(InMemoryStore(), OwnRecord())
    assert retriever.weak_embedder
    assert retriever.effective_alpha(SearchOptions(), "anything") == 0.001  # weak: keywords


def test_the_lazy_embedder_passes_on_the_resolved_ones_record():
    lazy = LazyEmbedder()
    lazy._embedder = SimpleEmbedder()  # as resolution would leave it, without a config file
    assert isinstance(lazy, DeclaresCapabilities)
    assert lazy.capabilities == SimpleEmbedder().capabilities

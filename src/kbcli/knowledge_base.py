"""The :class:`KnowledgeBase` users hold: the facade (:mod:`kbcli.facade`) with the ways into
the layers built on it: a scope (:meth:`KnowledgeBase.scoped`), an answer (``ask``) and an agent
tool (``as_tool``, both from :class:`~kbcli.scope.ViewEntryPoints`)."""

from __future__ import annotations

from typing import Any

from kbcli.facade import BaseKnowledgeBase
from kbcli.scope import ScopedKnowledgeBase, ViewEntryPoints


class KnowledgeBase(BaseKnowledgeBase, ViewEntryPoints):
    """One object to add, ingest and search knowledge.

    Defaults: an :class:`~kbcli.stores.InMemoryStore`, the :class:`~kbcli.embedders.SimpleEmbedder`
    and a :class:`~kbcli.search.retrievers.HybridRetriever` over them. Use :meth:`open` for the
    persistent SQLite knowledge base configured in ``jianmu.yaml``.
    """

    def scoped(self, filter: dict[str, Any]) -> ScopedKnowledgeBase:
        """A read-only :class:`~kbcli.scope.ScopedKnowledgeBase` that only sees documents
        passing ``filter``, on every search route, listing, count and lookup."""
        from kbcli.errors import FilterError
        from kbcli.filters.model import validate_filter

        if not validate_filter(filter):
            raise FilterError("A scope needs a non-empty filter, e.g. {'tenant': 'acme'}")
        return ScopedKnowledgeBase(self, filter)

"""Stores: every built-in store is :class:`Store` (:mod:`.composite`) over its backend's parts
(:mod:`.parts`); what a store can do is :mod:`.capabilities`. Each class loads its module on
first use (PEP 562): the FAISS and Chroma stores import their extras only when asked for, and
reading the capabilities imports no backend. A configured store is built by name
(:data:`kbcli.config.registry.STORE_ENTRIES`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kbcli.config.registry import STORE_ENTRIES, STORES, load_class
from kbcli.system.exports import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from kbcli.config.schema import Config
    from kbcli.stores.chroma.store import ChromaStore
    from kbcli.stores.composite import Store
    from kbcli.stores.faiss.store import FaissStore
    from kbcli.stores.memory.store import InMemoryStore
    from kbcli.stores.sqlite.store import SQLiteStore

__all__ = ["ChromaStore", "FaissStore", "InMemoryStore", "SQLiteStore", "Store", "build_store"]

_EXPORTS = {
    "Store": "composite",
    "InMemoryStore": "memory.store",
    "SQLiteStore": "sqlite.store",
    "FaissStore": "faiss.store",
    "ChromaStore": "chroma.store",
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


def build_store(
    config: Config,
    *,
    db: str | os.PathLike[str] | None = None,
    create: bool = True,
    busy_timeout: float | None = None,
) -> Any:  # a Store, or a user's class that follows VectorStoreProtocol
    """The store ``config.store`` names, with its settings and the configured analyzer.

    A registered backend (:data:`kbcli.config.registry.STORE_ENTRIES`) builds itself with its
    class's
    ``from_config`` (:meth:`~kbcli.stores.composite.Store.from_config`): the SQLite store (and
    FAISS and Chroma, which keep their catalog in SQLite beside the vector index:
    ``<db>.faiss``; the collection ``store.collection`` in ``store.path`` or ``<db>.chroma/``)
    opens ``db`` (default ``paths.knowledge_db``), the catalog of that one collection;
    ``create=False`` refuses to create a missing database and ``busy_timeout`` overrides
    ``store.busy_timeout``. The postgres store connects to ``$KB_PG_DSN`` or ``store.dsn``
    (``db`` does not apply). A user's class (``package.module:Class``) is called with the
    ``store`` settings as keyword arguments.
    """
    backend = config.store.backend
    settings = dict(config.store.settings)
    cls = load_class(backend, STORES, kind="store")
    if backend not in STORE_ENTRIES:
        return cls(**settings)
    return cls.from_config(config, settings, db=db, create=create, busy_timeout=busy_timeout)

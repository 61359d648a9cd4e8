"""Stores: in memory and SQLite here; other backends are loaded by name when used
(:data:`kbcli.registry.STORES`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .memory import InMemoryStore
from .sqlite import SQLiteStore

__all__ = ["ChromaStore", "FaissStore", "InMemoryStore", "SQLiteStore", "build_store"]

_OPTIONAL = {"FaissStore": ".faiss_store", "ChromaStore": ".chroma_store"}


def __getattr__(name: str) -> Any:
    # FaissStore and ChromaStore import their modules (and so their extras) only when asked for
    if name in _OPTIONAL:
        import importlib

        return getattr(importlib.import_module(_OPTIONAL[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_store(
    config: Any,
    *,
    db: str | os.PathLike[str] | None = None,
    create: bool = True,
    busy_timeout: float | None = None,
) -> Any:
    """The store ``config.store`` names, with its settings and the configured analyzer.

    The SQLite store (and FAISS and Chroma, which keep their catalog in SQLite beside the vector
    index: ``<db>.faiss``; the collection ``store.collection`` in ``store.path`` or
    ``<db>.chroma/``) opens ``db`` (default ``paths.knowledge_db``), the catalog of that one
    collection; ``create=False`` refuses to create a missing database and
    ``busy_timeout`` overrides ``store.busy_timeout``. The postgres store connects to
    ``$KB_PG_DSN`` or ``store.dsn`` (``db`` does not apply). A user's class
    (``package.module:Class``) is called with the ``store`` settings as keyword arguments.
    """
    from ..analysis import analyzer_from_config
    from ..registry import STORES, load_class

    backend = config.store.backend
    settings = dict(config.store.settings)
    if backend == "sqlite":
        if busy_timeout is not None:
            settings["busy_timeout"] = busy_timeout
        path = db if db is not None else config.paths.knowledge_db
        return SQLiteStore(path, analyzer=analyzer_from_config(config), create=create, **settings)
    if backend == "memory":
        return InMemoryStore(analyzer=analyzer_from_config(config), **settings)
    if backend in ("faiss", "chroma"):  # SQLite beside a vector index: opened like SQLite
        if busy_timeout is not None:
            settings["busy_timeout"] = busy_timeout
        path = Path(db if db is not None else config.paths.knowledge_db).expanduser()
        cls = load_class(backend, STORES, kind="store")
        common = {"analyzer": analyzer_from_config(config), "create": create}
        if backend == "faiss":
            return cls(path=path, **common, **settings)
        chroma = Path(settings.pop("path", None) or f"{path}.chroma").expanduser()
        return cls(chroma, db=path, **common, **settings)
    if backend == "postgres":
        from .postgres import PostgresStore

        if busy_timeout is not None:
            settings["busy_timeout"] = busy_timeout
        settings["dsn"] = os.environ.get("KB_PG_DSN") or settings.get("dsn")
        return PostgresStore(analyzer=analyzer_from_config(config), create=create, **settings)
    return load_class(backend, STORES, kind="store")(**settings)

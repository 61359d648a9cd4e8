"""Vector stores: in memory and SQLite here; other backends are loaded by name when used."""

from __future__ import annotations

from .memory import InMemoryStore
from .sqlite import SQLiteStore

__all__ = ["InMemoryStore", "SQLiteStore"]

"""The SQLite store, one module per concept; each is a part of
:class:`~kbcli.stores.composite.Store` (:mod:`kbcli.stores.parts`).

- :mod:`.connection`: the connection, pragmas, write transactions and read snapshots (the
  engine);
- :mod:`.schema`: the tables and numbered migrations;
- :mod:`.catalog`: chunk rows, sources, the ``meta`` table;
- :mod:`.keyword`: the BM25 index's tables (term and source statistics, the log; a chunk's
  postings are its forward index);
- :mod:`.packed`: the packed (inverted) postings beside the database, scored with numpy
  (:mod:`.packlog`: the parts writers need, without numpy);
- :mod:`.vectors`: vectors, the recorded embedder, the memory-mapped matrix cache, re-embedding
  (:class:`~.vectors.TableVectors`, the vector part; FAISS and Chroma derive theirs from it);
- :mod:`.ledger`: the file ledger and the embedding cache;
- :mod:`.integrity`: integrity checks;
- :mod:`.store`: :class:`SQLiteStore`, which assembles these parts.
"""

from __future__ import annotations

from kbcli.stores.sqlite.connection import DEFAULT_BUSY_TIMEOUT
from kbcli.stores.sqlite.schema import APP_ID, SCHEMA_VERSION
from kbcli.stores.sqlite.store import SQLiteStore

__all__ = ["APP_ID", "DEFAULT_BUSY_TIMEOUT", "SCHEMA_VERSION", "SQLiteStore"]

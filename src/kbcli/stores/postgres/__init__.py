"""The PostgreSQL store (psycopg 3 + pgvector; ``pip install 'kbcli[postgres]'``), one module
per concept:

- :mod:`.dsn`: the DSN from ``store.dsn`` or ``$KB_PG_DSN``, and its redaction;
- :mod:`.replica`: the read server, a hot standby of ``store.read_dsn`` that serves reads;
- :mod:`.connection`: the connection, write transactions, read snapshots, advisory locks;
- :mod:`.schema`: the tables and numbered migrations;
- :mod:`.filters`: metadata filters compiled to SQL over JSONB, every value bound;
- :mod:`.catalog`: chunk rows, sources, the meta table;
- :mod:`.keyword`: the BM25 inverted index (terms, postings, source statistics);
- :mod:`.vectors`: the pgvector column, its HNSW index, filtered dense search, re-embedding;
- :mod:`.ledger`: the file ledger and the embedding cache;
- :mod:`.store`: :class:`PostgresStore`, the composite store over these parts.

Importing this package imports psycopg; ``import kbcli`` never does.
"""

from __future__ import annotations

from kbcli.stores.postgres.schema import SCHEMA_VERSION
from kbcli.stores.postgres.store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

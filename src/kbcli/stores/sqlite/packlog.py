"""The keyword log and the pack file's header: what writers need of the packed index.

Kept apart from :mod:`.packed` so writes and small searches never import numpy. See
:mod:`.packed` for the design.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

MAGIC = b"KBPACK1\n"
HEADER_SIZE = 4096


def pack_path(db_path: Path) -> Path:
    """The pack file of a database."""
    return Path(f"{db_path}.keyword-pack")


def current_tag(conn: sqlite3.Connection) -> str:
    """Names the keyword index of this database: index id and keyword epoch."""
    meta = dict(
        conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('index_id', 'keyword_epoch')"
        ).fetchall()
    )
    return f"{meta.get('index_id', '')}:{meta.get('keyword_epoch', '0')}"


def current_seq(conn: sqlite3.Connection) -> int:
    """The last position written to ``keyword_log``."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'keyword_log'").fetchone()
    return int(row[0]) if row else 0


def log_floor(conn: sqlite3.Connection) -> int:
    """Log rows at or below this position were pruned."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'keyword_log_floor'").fetchone()
    return int(row[0]) if row else 0


def read_header(path: Path) -> dict[str, Any] | None:
    """The JSON header of a pack file (None when missing or not a pack)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEADER_SIZE)
        if not head.startswith(MAGIC):
            return None
        return json.loads(head[len(MAGIC) :].rstrip(b"\0 \n"))
    except (OSError, ValueError):
        return None


def prune_log(conn: sqlite3.Connection, path: Path) -> None:
    """Inside a write transaction: drop log rows the pack on disk already holds."""
    header = read_header(path)
    if header is None or header.get("tag") != current_tag(conn):
        return
    seq = int(header.get("seq", 0))
    if seq > log_floor(conn) and seq <= current_seq(conn):
        conn.execute("DELETE FROM keyword_log WHERE seq <= ?", (seq,))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('keyword_log_floor', ?)", (str(seq),))

"""The keyword log and the pack file's header: what writers need of the packed index.

Kept apart from :mod:`.packed` so writes and small searches never import numpy. See
:mod:`.packed` for the design.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

# The layout's version is in the magic: a pack of another version reads as of no index
# (stale), so the next search replaces it and nothing else trusts it.
FORMAT = 2
MAGIC = b"KBPACK%d\n" % FORMAT
# Postings of tf 1 .. TF_RUNS - 1 form one run per tf in each term (and score from per-slot
# tables); higher tfs share the last run. Part of the layout: recorded in the header.
TF_RUNS = 4
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
    """The JSON header of a pack file (None when missing or not a pack). A pack of another
    format version has the tag None: of no index."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEADER_SIZE)
        if not head.startswith(MAGIC[:6]) or len(head) < len(MAGIC):
            return None
        header = json.loads(head[len(MAGIC) :].rstrip(b"\0 \n"))
        if not isinstance(header, dict):
            return None
        if (
            not head.startswith(MAGIC)
            or header.get("format") != FORMAT
            or header.get("tf_runs") != TF_RUNS
        ):
            header["tag"] = None
        return header
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

"""Named crash points, for the crash tests only (tests/ingest/test_crash_points.py).

``KB_TEST_CRASH_AT=NAME`` (or ``NAME@N``: the N-th time) makes the process end at once with
``os._exit(137)`` when it reaches the point ``NAME``, as ``kill -9`` would: no cleanup, no
``finally``, no flush. The variable is read once at import; unset (every real run),
:func:`crash_point` is one comparison with None. Never set it outside tests.

Points: ``after-parse`` (a file read and parsed, nothing embedded), ``after-embed`` (a batch
embedded, nothing written), ``before-commit`` (inside a write transaction, rows written, COMMIT
not yet run; SQLite and PostgreSQL), ``after-commit`` (just after a COMMIT; both),
``vector-cache-write`` (the vectors cache half written), ``derived-file-write`` (a FAISS file or
Chroma state file half written), ``vector-index-sync`` (a Chroma collection changed by a sync
that has not recorded it yet), ``keyword-pack-write`` (the keyword pack half written),
``mid-migration`` (an SQLite schema upgrade inside its transaction; the PostgreSQL schema has
no migration yet).
"""

from __future__ import annotations

import os

_SPEC = os.environ.get("KB_TEST_CRASH_AT") or None
_NAME, _, _NTH = (_SPEC or "").partition("@")
_hits = 0


def crash_point(name: str) -> None:
    """End the process at once when ``KB_TEST_CRASH_AT`` names this point (test-only)."""
    if _SPEC is None or name != _NAME:
        return
    global _hits
    _hits += 1
    if _hits >= int(_NTH or 1):
        os._exit(137)

"""Nested transactions over one connection: what every engine part shares.

A write inside an open write transaction joins it (``replace_file`` calls ``add``; ``kb
ingest`` writes many files in one transaction), and so does a read; only the outermost write
commits. A thread lock makes one store usable from several threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic

from kbcli.stores.parts import Conn


class Nesting(Generic[Conn]):
    """Base of the engines: :meth:`transaction` and :meth:`read` join an open write
    transaction; otherwise a subclass's :meth:`_write` (which sets :attr:`depth` to 1 once its
    transaction is open and back to 0 when it ends) or :meth:`_read` runs."""

    conn: Conn
    depth = 0

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.commits = 0  # write transactions committed

    @contextmanager
    def transaction(self, **options: object) -> Iterator[Conn]:  # for the engine's _write
        """One write transaction; nested calls join the outer one. Commits or rolls back whole."""
        with self.lock:
            if self.depth:
                self.depth += 1
                try:
                    yield self.conn
                finally:
                    self.depth -= 1
                return
            with self._write(**options) as conn:
                yield conn
            self.commits += 1

    @contextmanager
    def read(self, *, latest: bool = False) -> Iterator[Conn]:
        """A consistent snapshot for several reads (joins an open write transaction);
        ``latest``: one that holds every commit made so far (an engine that reads from a
        replica takes it from the primary)."""
        with self.lock:
            if self.depth:
                yield self.conn
                return
            with self._read_latest() if latest else self._read() as conn:
                yield conn

    def _read_latest(self) -> AbstractContextManager[Conn]:
        """A snapshot holding every commit made so far: :meth:`_read`'s, unless the engine
        reads from a replica."""
        return self._read()

    def figures(self) -> dict[str, Any]:
        """What :meth:`~kbcli.stores.composite.Store.stats` adds about the engine (none)."""
        return {}

    #: the outermost write transaction (its keyword arguments: ``transaction``'s)
    _write: Callable[..., AbstractContextManager[Conn]]
    #: a read snapshot outside any write transaction
    _read: Callable[[], AbstractContextManager[Conn]]

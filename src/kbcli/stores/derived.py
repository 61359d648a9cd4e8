"""Keeping a derived vector index (a FAISS file, a Chroma collection) current after an ingest."""

from __future__ import annotations

from typing import Any

from ..errors import StoreError


class RefreshAfterIngest:
    """Mixin for :class:`~kbcli.stores.sqlite.SQLiteStore` subclasses whose vector index is
    derived from the ``vectors`` table: once the store has written files (``replace_file``:
    an ingest), ``close`` brings the index up to date, so the next process (``kb search``)
    finds it current instead of paying for the update. Other writes (``kb add``, deletes)
    leave it to the next dense search."""

    _ingested = False

    def replace_file(self, *args: Any, **kwargs: Any) -> int:
        """As the store's ``replace_file``; marks the derived index for refresh on close."""
        self._ingested = True
        return super().replace_file(*args, **kwargs)  # type: ignore[misc]

    def close(self) -> None:
        """Refresh the derived index after an ingest (not for a temporary store), then close.
        An index that cannot be refreshed now (a damaged Chroma folder) is left to the next
        dense search, which rebuilds it or names the repair: the ingest itself committed."""
        try:
            if self._ingested and self._scratch is None:  # type: ignore[attr-defined]
                self._ingested = False
                self.refresh_vector_index()  # type: ignore[attr-defined]
        except StoreError:
            pass
        finally:
            super().close()  # type: ignore[misc]

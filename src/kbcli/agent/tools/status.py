"""``knowledge_status``: whether the index is behind its files, for an agent that must know
before it trusts an empty answer (what ``kb status`` says, :mod:`kbcli.ingest.status`).

The whole index (no scope): every ingested root walked, new / changed / gone counts, chunks
without vectors, a ``kb watch`` running, the index watermark. A scope (a token's filter) sees
only its own: the indexed files that have chunks in the scope, checked for changed or gone
(a file not indexed yet belongs to no scope, so no ``new`` count), and the chunks in the scope
without a vector; the roots and the watch are not shown.
"""

from __future__ import annotations

from typing import Any

from kbcli.agent.tools.base import KnowledgeTool, ToolResult, reader_of
from kbcli.errors import InvalidOptionError
from kbcli.ingest.files import limit_bytes
from kbcli.ingest.status import IndexStatus, database_file, index_status, scope_status
from kbcli.ingest.watch_marker import watch_running
from kbcli.protocols import DocumentCatalog, DocumentReader, FileLedger, supports
from kbcli.search.freshness import index_watermark
from kbcli.views import KnowledgeView, Reader


class KnowledgeStatusTool(KnowledgeTool):
    """``knowledge_status``: is the (scoped) index current, or behind its files?"""

    name = "knowledge_status"
    description = (
        "Say whether the knowledge base is current or behind its files: files new, changed or "
        "gone since they were indexed, chunks still without vectors (found by keyword search "
        "only), whether an ingest is running, and when the index last changed. Call it before "
        "trusting an empty or surprising search result."
    )

    def __init__(self, view: Reader, *, max_file_mb: float | None = None):
        self.view = reader_of(view)
        config = self.view.kb.config
        mb = (
            max_file_mb
            if max_file_mb is not None
            else (config.limits.max_file_mb if config is not None else None)
        )
        self.max_bytes = limit_bytes(mb)

    def status(self) -> IndexStatus:
        """The status the tool reports (see the module docstring)."""
        store = self.view.kb.store
        if not (supports(store, FileLedger) and supports(store, DocumentCatalog)):
            raise InvalidOptionError(
                "this store keeps no file ledger: there is no file status to give"
            )
        watermark = index_watermark(self.view)
        if self.view.filter is None:
            db = database_file(store) if supports(store, DocumentCatalog) else None
            running, pid = watch_running(db) if db is not None else (None, None)
            return index_status(
                store,
                max_bytes=self.max_bytes,
                vectors_pending=watermark.vectors_pending,
                watch_running=running,
                watch_pid=pid,
                watermark=watermark.as_json(),
            )
        sources, pending = _in_scope(store, self.view)
        if watermark.vectors_pending == 0:
            pending = 0  # an embedder with no vectors to make (the watermark says so)
        return scope_status(
            store,
            sources,
            max_bytes=self.max_bytes,
            vectors_pending=pending,
            watermark={"changed_at": watermark.changed_at, "syncing": watermark.syncing},
        )

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        self.check_keys(arguments)
        found = self.status()
        t = found.totals()
        lines = [found.summary()]
        counts = ", ".join(f"{key} {t[key]:,}" for key in ("indexed", "new", "changed", "gone"))
        if self.view.filter is not None:
            counts = counts.replace(", new 0", "")
        lines.append(f"files: {counts}")
        lines.append(f"chunks without vectors: {found.vectors_pending:,}")
        mark = found.watermark or {}
        lines.append(f"index changed at: {mark.get('changed_at') or 'unknown'}")
        lines.append(f"ingest running: {'yes' if mark.get('syncing') else 'no'}")
        if self.view.filter is None:
            watch = {True: "running", False: "not running", None: "unknown"}
            lines.append(f"kb watch: {watch[found.watch_running]}")
        for root in found.roots:
            if self.view.filter is None:
                kinds = ", ".join(f"{k} {getattr(root, k):,}" for k in ("new", "changed", "gone"))
                lines.append(f"root {root.path} (last sync {root.synced_at or '-'}): {kinds}")
            for kind, paths in root.examples.items():
                if paths:
                    lines.append(f"  {kind}: {', '.join(paths)}")
        return ToolResult("\n".join(lines))


def _in_scope(store: DocumentReader, view: KnowledgeView) -> tuple[set[str], int]:
    """The sources with chunks in ``view``'s scope, and how many of its chunks have no
    vector (one pass over the scope, as ``knowledge_stats`` makes)."""
    sources: set[str] = set()
    pending = 0
    for doc in store.iter_documents(view.narrow(None), with_embeddings=True):
        if not view.visible(doc):
            continue
        if doc.metadata.get("source") is not None:
            sources.add(str(doc.metadata["source"]))
        if doc.embedding is None or not len(doc.embedding):
            pending += 1
    return sources, pending

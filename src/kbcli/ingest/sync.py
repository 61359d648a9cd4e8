"""Incremental, crash-safe sync of folders into a knowledge base (what ``kb ingest`` runs).

For each file found under the given paths:

- size and mtime match the record, settings unchanged: skipped without reading it;
- otherwise its content hash is compared: the same bytes only refresh the record;
- changed or new: loaded, chunked and embedded *before* the write lock is taken (unchanged
  chunk texts come from the embedding cache), then its old chunks, new chunks and file record
  are swapped in one transaction, so a search sees the old version or the new one, never both,
  and ``kill -9`` at any moment leaves each file at its old version, its new one, or absent.

The walker (:func:`discover`) visits regular files only (FIFOs, sockets and devices are
counted, never opened), follows symbolic links only with ``follow_symlinks`` and only inside
their root, and every read stops at ``limits.max_file_mb`` bytes actually read. A file that
changes while it is read is read again once, then reported as failed, never indexed torn.

Files recorded under the given roots that this run did not pick are *stale*: those that no
longer exist (deleted, moved away) are removed by default, those that still exist but are no
longer picked (another extension, a ``.kbignore`` rule, hidden, a link not followed) only with
``prune=True``; ``prune=False`` keeps both. A removal that looks like an accident (an empty
root, more than half of the index; see :func:`kbcli.ingest.discovery.check_prune`) is refused before
anything is written. Files under a folder that could not be listed are never stale. One ingest
runs at a time per database (an advisory lock file beside it); a second one waits ``wait``
seconds, then fails with :class:`~kbcli.errors.DatabaseLockedError`.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli.embedders.base import embedder_info
from kbcli.embedders.resolve import remember_choice
from kbcli.errors import KBError, LoaderError
from kbcli.ingest.discovery import (
    DEFAULT_EXTENSIONS,
    check_prune,
    discover,
    on_disk,
    parse_extensions,
)
from kbcli.ingest.files import FileChanged, file_kind, limit_bytes, read_content, too_large
from kbcli.ingest.lines import map_file_lines
from kbcli.ingest.report import FileFailure, SyncReport
from kbcli.ingest.settings import (
    chunk_settings,
    file_settings,
    relabel,
    settings_with_meta,
    split_settings,
)
from kbcli.ingest.status import Root, record_roots
from kbcli.ingest.vector_fill import fill_vectors
from kbcli.ingest.writes import (
    CHECKPOINT_EVERY,
    Indexable,
    PendingWrites,
    Prepared,
    ledger_store,
    write_errors,
)
from kbcli.protocols import KeywordIndex, supports
from kbcli.search.calibration import calibrate_index, has_floor
from kbcli.system.crashpoints import crash_point
from kbcli.system.paths import canonical_source, source_name, source_path
from kbcli.system.signals import stop_if_terminated
from kbcli.types import FileRecord

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.ingest.loaders.registry import Loaded
    from kbcli.ingest.pipeline import Loader

__all__ = [
    "DEFAULT_EXTENSIONS", "Indexable", "SyncInterrupted", "SyncReport", "discover", "ingest_one",
    "ledger_store", "parse_extensions", "sync",
]  # fmt: skip

TORN_READ_RETRY_DELAY = 0.2  # seconds before reading a file again that changed while read
Progress = Callable[[str, int, int], None]


class SyncInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP: :mod:`kbcli.system.signals`) during a sync, after every file
    prepared so far was written: ``report`` says what the index kept; the next sync resumes
    from there (written files are unchanged). ``signum`` is the signal that stopped it."""

    def __init__(self, report: SyncReport, signum: int = signal.SIGINT):
        super().__init__()
        self.report = report
        self.signum = signum


def sync(
    kb: Indexable,
    paths: list[Path],
    *,
    extensions: tuple[str, ...] | list[str] | str = DEFAULT_EXTENSIONS,
    recursive: bool = True,
    metadata: dict[str, Any] | None = None,
    prune: bool | None = None,
    include_hidden: bool = False,
    rebuild: bool = False,
    wait: float = 60.0,
    progress: Progress | None = None,
    follow_symlinks: bool = False,
    allow_mass_delete: bool = False,
    vector_progress: Callable[[int, int], None] | None = None,
    only: Collection[Path] | None = None,
) -> SyncReport:
    """Bring the index in line with the files under ``paths`` (see the module docstring).

    ``prune`` decides what happens to indexed files under ``paths`` this run did not pick:
    None (the default, ``kb ingest``) removes those that no longer exist; True
    (``--prune``) also those that exist but are no longer picked (another extension, a
    ``.kbignore`` rule, hidden); False (``--no-prune``) keeps them all. A run that would
    empty a folder or remove more than half of the files indexed under ``paths`` raises
    :class:`~kbcli.errors.UnsafePruneError` before anything is written, unless
    ``allow_mass_delete``. ``rebuild`` re-tokenises the keyword index, re-embeds every chunk
    with the configured embedder (resumable) and re-reads every file under ``paths``.
    ``follow_symlinks`` follows links that stay inside their root (see :func:`discover`).
    An interrupt (Ctrl-C, or SIGTERM within :func:`kbcli.system.signals.interrupt_on_termination`)
    raises :class:`SyncInterrupted` once the files prepared so far are written.

    Files are written before their new chunks are embedded, so keyword search finds a file
    as soon as it is written; then the chunks still lacking vectors (this run's and any an
    earlier, interrupted run left) are embedded and stored (:func:`fill_vectors`;
    ``vector_progress(done, total)`` counts them), and the index's relevance floor is
    calibrated again (:func:`kbcli.search.calibration.calibrate_index`).

    ``only`` (``kb watch``'s changed paths, resolved, below ``paths``; gone ones included)
    limits the run to those files and folders, with the same rules (:func:`discover`): a
    path gone from disk leaves the index, a folder's files with it.

    A run stopped by an error raises it as it is (its class unchanged), carrying the report
    of what the index kept (the files written before the error) in its typed
    :attr:`~kbcli.errors.KBError.report` (``kb ingest --json`` prints it with the error); an
    interrupt carries it too (:class:`SyncInterrupted`).
    """
    started = time.monotonic()
    report = SyncReport()
    with _interrupts_kept(report, started), _reported_on_error(report, started):
        store = ledger_store(kb)
        extensions = parse_extensions(extensions)
        found = discover(
            list(paths),
            extensions,
            recursive=recursive,
            include_hidden=include_hidden,
            follow_symlinks=follow_symlinks,
            only=only,
        )
        report.skipped = found.skipped
        report.warnings = [source_name(w) for w in found.warnings]
        report.special, report.links = found.special, found.links
        report.skipped_folders = found.folders
        report.unreadable = len(found.unreadable)
        with store.writer_lock(wait), write_errors():
            records = store.file_records()
            names = {path: source_name(path) for path in found.files}
            present = set(names.values())
            stale = [p for p in records if p not in present and found.covers(p)]
            gone = [p for p in stale if not on_disk(p)]
            going = stale if prune else gone if prune is None else []
            if going and not allow_mass_delete:
                check_prune(found, records, going, extensions)
            if rebuild:
                report.rebuilt = _rebuild_index(kb)
                records = store.file_records()
            settings = chunk_settings(kb)
            info = kb.ingestor.check_embedder()
            if store.embedder_info is None:
                remember_choice(store, info)
            total = len(found.files)
            pending = PendingWrites(kb, report)
            reading = _Reading(_max_bytes(kb), follow_symlinks)
            if progress is not None:
                progress("", 0, total)
            try:
                for done, path in enumerate(found.files, start=1):
                    stop_if_terminated()
                    began = time.monotonic()
                    name = names[path]
                    if name != str(path) and os.path.lexists(name):
                        report.failed.append(FileFailure(name, _name_taken(name)))
                        continue
                    own = file_settings(settings, kb, path)
                    prepared = _sync_file(
                        kb, path, records.get(name), own, metadata, rebuild, report, reading
                    )
                    if prepared is not None:
                        pending.add(prepared)
                    report.timed(name, time.monotonic() - began)
                    if progress is not None:
                        progress(name, done, total)
                    if done % CHECKPOINT_EVERY == 0:
                        pending.flush()
                        store.checkpoint()
                pending.flush()
            except KeyboardInterrupt:
                # Keep what was prepared: write those files, each whole (their vectors, if
                # not known yet, are filled by the next run).
                pending.flush()
                store.checkpoint()
                raise
            for source in going:
                report.chunks_removed += store.delete_source(source)
                report.removed += 1
            report.stale = len(stale) - len(going)
            report.missing = len(gone) if prune is False else 0
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            store.set_meta("last_ingest", now)
            if only is None:  # a whole sync: kb status walks these roots with these rules
                rules = Root("", extensions, recursive, include_hidden, follow_symlinks)
                record_roots(store, found, rules, now)
            store.checkpoint()
            changed = bool(report.chunks_added or report.chunks_removed or report.rebuilt)
            if changed:
                store.prepare_search()  # keyword search at full speed while vectors fill in
            try:
                fill_vectors(kb, report, list(pending.lacking), vector_progress)
            finally:
                store.checkpoint()
            if report.vectors_added:
                store.prepare_search()
            if changed or report.vectors_added or not has_floor(kb):
                calibrate_index(kb)
    report.seconds = time.monotonic() - started
    return report


def ingest_one(
    kb: Indexable,
    path: str | os.PathLike[str],
    metadata: dict[str, Any] | None = None,
    *,
    wait: float = 60.0,
) -> list[str]:
    """Index one file exactly as ``kb ingest`` does, for :meth:`KnowledgeBase.ingest_file`:
    the same reading (hashed, never torn), chunks, line numbers and file record, written the
    same way, so a later ``kb ingest`` finds the file unchanged. The file is always read
    again; its earlier chunks are replaced, with their vectors, in one transaction;
    ``metadata`` (None: none) becomes its meta. Returns the file's chunk ids; raises
    LoaderError when the file cannot be indexed.
    """
    store = ledger_store(kb)
    resolved = Path(source_path(canonical_source(path)))
    report = SyncReport()
    with store.writer_lock(wait), write_errors():
        settings = file_settings(chunk_settings(kb), kb, resolved)
        info = kb.ingestor.check_embedder()
        if store.embedder_info is None:
            remember_choice(store, info)
        prepared = _sync_file(
            kb,
            resolved,
            None,
            settings,
            dict(metadata or {}),
            True,
            report,
            _Reading(_max_bytes(kb), True),
            raise_failure=True,
        )
        assert prepared is not None  # with record None the file is always prepared
        # One file: embedded before its write (one transaction, chunks and vectors together),
        # where kb ingest writes files first and embeds across them after.
        prepared.vectors = kb.ingestor.embed([d.text for d in prepared.docs], remember=False)
        pending = PendingWrites(kb, report)
        pending.add(prepared)
        pending.flush()
        # No prepare_search here: a script ingesting files one by one would rewrite the keyword
        # pack after each; the next search brings it up to date once.
        if not has_floor(kb):
            calibrate_index(kb)
    return list(prepared.record.chunk_ids)


@contextmanager
def _interrupts_kept(report: SyncReport, started: float) -> Iterator[None]:
    """An interrupt anywhere in a sync (files prepared so far written already) becomes
    :class:`SyncInterrupted` carrying the report and the signal."""
    try:
        yield
    except KeyboardInterrupt as stop:
        signum = getattr(stop, "signum", signal.SIGINT)
        report.interrupted, report.signal = True, signal.Signals(signum).name
        report.seconds = time.monotonic() - started
        raise SyncInterrupted(report, signum) from None


def _name_taken(name: str) -> str:
    """Why a file whose name is not UTF-8 is not indexed when its escaped form (what kb
    records, see :mod:`kbcli.system.paths`) is the real name of another file."""
    return (
        f"{name}: the file name is not valid UTF-8 and the form kb records it under (shown "
        "here) is the name of another file beside it: not indexed; rename one of them"
    )


@contextmanager
def _reported_on_error(report: SyncReport, started: float) -> Iterator[None]:
    """A :class:`KBError` that stops the sync leaves with ``report`` (what the index kept:
    the files written before the error), timed, in its declared ``report`` attribute."""
    try:
        yield
    except KBError as failed:
        report.seconds = time.monotonic() - started
        failed.report = report
        raise


@dataclass(frozen=True)
class _Reading:
    """How files are read: the byte limit and whether symlinks may be opened."""

    limit: int | None
    follow_symlinks: bool


def _max_bytes(kb: Indexable) -> int | None:
    """``limits.max_file_mb`` of the loader (else of the configuration) in bytes."""
    loader = kb.ingestor.loader
    if hasattr(loader, "max_file_mb"):
        return limit_bytes(loader.max_file_mb)
    return limit_bytes(kb.ingestor.settings.limits.max_file_mb)


def _sync_file(
    kb: Indexable,
    path: Path,
    record: FileRecord | None,
    settings: str,
    metadata: dict[str, Any] | None,
    force: bool,
    report: SyncReport,
    reading: _Reading | None = None,
    *,
    raise_failure: bool = False,
) -> Prepared | None:
    """Skip an unchanged file, re-label one whose ``--meta`` changed, or load and chunk a
    changed one (nothing embedded or written yet: :class:`~kbcli.ingest.writes.PendingWrites`
    writes, and :func:`fill_vectors` embeds, across files).

    ``metadata`` None keeps the meta a file was indexed with; a dict replaces it. The file is
    read once, hashed while read (:func:`~kbcli.ingest.files.read_content`), and loaded from
    that read: a text file from its bytes, a PDF, DOCX or HTML file by the parser, which checks
    the hash. Unless the loader confirms that what it loaded is one version of exactly the
    bytes hashed, the file is hashed again after loading. A file that changed meanwhile is read
    once more, and reported as failed if it changed again (never indexed torn). A file that
    cannot be indexed is counted in ``report.failed``, or with ``raise_failure`` raises its
    LoaderError.
    """
    store = ledger_store(kb)
    reading = reading or _Reading(_max_bytes(kb), True)
    recorded_settings, recorded_meta = (
        split_settings(record.settings) if record is not None else ("", {})
    )
    meta = recorded_meta if metadata is None else metadata
    # the record whose chunks still hold, if the bytes did not change
    kept = record if record is not None and not force and recorded_settings == settings else None
    meta_changed = kept is not None and meta != recorded_meta
    try:
        st = os.stat(path, follow_symlinks=reading.follow_symlinks)
        if not stat.S_ISREG(st.st_mode):
            raise LoaderError(f"{path}: not a regular file ({file_kind(st.st_mode)}): not read")
        if kept is not None and (kept.size, kept.mtime_ns) == (st.st_size, st.st_mtime_ns):
            if meta_changed:
                return Prepared(*relabel(store, kept, recorded_meta, meta, settings))
            report.unchanged += 1
            return None
        if reading.limit is not None and st.st_size > reading.limit:
            raise too_large(path, reading.limit)
        ingestor = kb.ingestor
        keep = ingestor.takes_bytes(path)
        for attempt in (1, 2):
            content = read_content(
                path, reading.limit, follow_symlinks=reading.follow_symlinks, keep=keep
            )
            digest, st = content.sha256, content.stat
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            if kept is not None and kept.sha256 == digest:
                kept.size, kept.mtime_ns = st.st_size, st.st_mtime_ns
                if meta_changed:
                    return Prepared(*relabel(store, kept, recorded_meta, meta, settings))
                store.touch_file(kept)
                report.unchanged += 1
                return None
            loaded: Loaded | None
            try:
                loaded = ingestor.load_content(path, content)
            except FileChanged:
                loaded = None
            del content  # the bytes: freed before chunking (a big file's peak)
            if loaded is not None and loaded.confirmed:
                break
            if loaded is not None:
                again = read_content(
                    path, reading.limit, follow_symlinks=reading.follow_symlinks, keep=False
                )
                if again.sha256 == digest and (again.stat.st_size, again.stat.st_mtime_ns) == (
                    st.st_size,
                    st.st_mtime_ns,
                ):
                    break
            if attempt == 2:
                raise LoaderError(
                    f"{path}: the file changed while it was being read (twice): not indexed "
                    "this time; run kb ingest again when it is no longer being written"
                )
            time.sleep(TORN_READ_RETRY_DELAY)
        assert loaded is not None  # the loop breaks with a file loaded, else raises
        crash_point("after-parse")
        report.warnings.extend(_loader_warnings(ingestor.loader, path))
        report.ocr_done(source_name(path), getattr(ingestor.loader, "last_ocr", None))
        sections = loaded.sections
        chunks = ingestor.chunk_sections(sections)
        if loaded.text is not None and len(sections) == 1:
            # a text file: chunk line numbers as the file on disk has them (kbcli.ingest.lines)
            map_file_lines(loaded.text, sections[0].text, chunks)
        del sections, loaded  # the file's whole text: free it before embedding (a big file's peak)
        docs = ingestor.build_documents(chunks, {**meta, "source": source_name(path)})
        del chunks
    except LoaderError as exc:
        if raise_failure:
            raise
        report.failed.append(FileFailure(source_name(path), _one_line(exc, path)))
        return None
    except OSError as exc:
        reason = source_name(f"{path}: {exc.strerror or exc}")
        if raise_failure:
            raise LoaderError(reason) from None
        report.failed.append(FileFailure(source_name(path), reason))
        return None
    except KBError:
        raise  # index-wide problems (embedder, lock) stop the run
    new_record = FileRecord(
        source_name(path),
        st.st_size,
        st.st_mtime_ns,
        digest,
        settings_with_meta(settings, meta),
        [d.id for d in docs],
        now,
    )
    return Prepared(new_record, docs, record is None)


def _loader_warnings(loader: Loader, path: Path) -> list[str]:
    warnings = getattr(loader, "last_warnings", None) or []
    return [source_name(w if str(path) in w else f"{path}: {w}") for w in warnings]


def _one_line(exc: Exception, path: Path) -> str:
    text = " ".join(str(exc).split())
    return source_name(text if str(path) in text else f"{path}: {text}")


def _rebuild_index(kb: Indexable) -> int:
    """Re-tokenise and re-embed every chunk; returns how many chunks were embedded."""
    store = ledger_store(kb)
    if supports(store, KeywordIndex):
        store.rebuild_keyword_index()
    info = embedder_info(kb.embedder)
    recorded = store.embedder_info
    embedded = store.reembed(kb.ingestor.embed, info)
    if recorded is None and not store.count():
        return 0
    return embedded

"""``kb status``: how far the index is behind the files it was built from.

kb remembers what ``kb ingest`` was asked to keep in line: each full sync (not a ``kb watch``
batch, which looks at a few paths) records its roots with the rules it used (extensions,
recursive, hidden, symlinks) and the time, in the index's meta under :data:`ROOTS_KEY`
(:func:`record_roots`, at most :data:`MAX_ROOTS`, the oldest forgotten first). A status walks
each root with those rules (``kb ingest``'s own walker, :mod:`kbcli.ingest.discovery`: its
``.kbignore`` files, hidden files, links) and compares every file found with the file ledger:

- no record: ``new``;
- size and mtime as recorded: unchanged, nothing read;
- size different: ``changed``, nothing read;
- same size, other mtime: hashed (at most ``limits.max_file_mb``): the recorded SHA-256 means
  ``touched`` (unchanged; ``kb ingest`` only refreshes its record), another one ``changed``.

Recorded files under a root that the walk did not find and that are gone from disk are
``gone``. Files recorded under no root (``KnowledgeBase.ingest_file``, an index written before
roots were recorded) are checked for ``changed`` and ``gone`` only (nothing says which new
files would belong to them). The walk keeps counts and a few example paths per root, and of
the files found only those the ledger records (never a list of new ones); the file ledger is
read once.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kbcli.errors import InvalidOptionError, LoaderError
from kbcli.ingest.discovery import DEFAULT_EXTENSIONS, Discovery, _walk, on_disk, parse_extensions
from kbcli.ingest.files import read_content
from kbcli.protocols import FileLedger, IndexMetadata
from kbcli.system.paths import source_name, source_path
from kbcli.types import FileRecord

ROOTS_KEY = "ingest_roots"
MAX_ROOTS = 1000  # roots remembered per index; the least recently synced are forgotten first
EXAMPLES = 5  # example paths kept per kind and root
OTHER = "(files indexed outside a recorded root)"


@dataclass(frozen=True)
class Root:
    """A root ``kb ingest`` synced whole, with the rules it walked it by, and when."""

    path: str
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS
    recursive: bool = True
    include_hidden: bool = False
    follow_symlinks: bool = False
    synced_at: str | None = None
    is_file: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "extensions": list(self.extensions),
            "recursive": self.recursive,
            "include_hidden": self.include_hidden,
            "follow_symlinks": self.follow_symlinks,
            "synced_at": self.synced_at,
            "is_file": self.is_file,
        }

    @classmethod
    def from_json(cls, data: Any) -> Root | None:
        """A root from its recorded JSON (None when it is not one)."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return None
        try:
            extensions = parse_extensions(list(data.get("extensions") or DEFAULT_EXTENSIONS))
        except (InvalidOptionError, TypeError):
            return None
        synced = data.get("synced_at")
        return cls(
            data["path"],
            extensions,
            bool(data.get("recursive", True)),
            bool(data.get("include_hidden", False)),
            bool(data.get("follow_symlinks", False)),
            synced if isinstance(synced, str) else None,
            bool(data.get("is_file", False)),
        )


def recorded_roots(store: IndexMetadata) -> list[Root]:
    """The roots recorded in ``store`` (:func:`record_roots`); none for an older index."""
    try:
        raw = store.get_meta(ROOTS_KEY)
        data = json.loads(raw) if raw else []
    except ValueError:
        return []
    roots = (Root.from_json(item) for item in data if isinstance(data, list))
    return [root for root in roots if root is not None]


def record_roots(store: IndexMetadata, found: Discovery, rules: Root, when: str) -> None:
    """Remember the roots a full sync walked (``found``'s folder and file roots) with the
    ``rules`` it used and the time ``when``; called by :func:`kbcli.ingest.sync.sync`."""
    kept = {root.path: root for root in recorded_roots(store)}
    walked = [(source_name(p), False) for p, _ in found.dir_roots]
    walked += [(source_name(p), True) for p in found.file_roots]
    for path, is_file in walked:
        kept.pop(path, None)  # re-inserted last: the most recent sync
        kept[path] = Root(
            path,
            rules.extensions,
            rules.recursive,
            rules.include_hidden,
            rules.follow_symlinks,
            when,
            is_file,
        )
    newest = list(kept.values())[-MAX_ROOTS:]
    store.set_meta(ROOTS_KEY, json.dumps([root.as_json() for root in newest]))


# --- the status ---------------------------------------------------------------------------


@dataclass
class RootStatus:
    """What differs under one root: counts, and up to :data:`EXAMPLES` paths of each kind."""

    path: str
    synced_at: str | None
    indexed: int = 0
    new: int = 0
    changed: int = 0
    gone: int = 0
    touched: int = 0
    unreadable: int = 0
    walked: bool = True  # False: a group of files with no recorded rules (no new files)
    examples: dict[str, list[str]] = field(
        default_factory=lambda: {"new": [], "changed": [], "gone": []}
    )

    @property
    def behind(self) -> bool:
        return bool(self.new or self.changed or self.gone)

    def note(self, kind: str, path: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if kind in self.examples and len(self.examples[kind]) < EXAMPLES:
            self.examples[kind].append(path)

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "synced_at": self.synced_at,
            "walked": self.walked,
            "indexed": self.indexed,
            "new": self.new,
            "changed": self.changed,
            "gone": self.gone,
            "touched": self.touched,
            "unreadable": self.unreadable,
            "examples": self.examples,
        }


@dataclass
class IndexStatus:
    """The status of an index: per root, vectors still to fill, a watch, the watermark."""

    roots: list[RootStatus]
    last_ingest: str | None
    vectors_pending: int
    watch_running: bool | None  # None: cannot tell (no marker place)
    watch_pid: int | None = None
    watermark: dict[str, Any] | None = None

    @property
    def behind(self) -> bool:
        """True when a ``kb ingest`` would change the index, or vectors are still missing."""
        return self.vectors_pending > 0 or any(root.behind for root in self.roots)

    def totals(self) -> dict[str, int]:
        keys = ("indexed", "new", "changed", "gone", "touched", "unreadable")
        return {key: sum(getattr(root, key) for root in self.roots) for key in keys}

    def as_json(self) -> dict[str, Any]:
        """``kb status --json``: one object."""
        return {
            "state": "behind" if self.behind else "current",
            "last_ingest": self.last_ingest,
            **self.totals(),
            "vectors_pending": self.vectors_pending,
            "watch": {"running": self.watch_running, "pid": self.watch_pid},
            "index": self.watermark,
            "roots": [root.as_json() for root in self.roots],
        }

    def summary(self) -> str:
        """The one line ``kb status`` ends with."""
        t = self.totals()
        if not self.behind:
            return f"Index current: {t['indexed']:,} files indexed, nothing new, changed or gone."
        parts = [f"{t[key]:,} {key}" for key in ("new", "changed", "gone") if t[key]]
        if self.vectors_pending:
            parts.append(f"{self.vectors_pending:,} chunks without vectors")
        return f"Index behind: {', '.join(parts)} (kb ingest brings it up to date)."


class StatusStore(FileLedger, IndexMetadata, Protocol):
    """What a status reads of a store: its file ledger and meta."""


def index_status(
    store: StatusStore,
    paths: Iterable[Path] = (),
    *,
    max_bytes: int | None = None,
    vectors_pending: int = 0,
    watch_running: bool | None = None,
    watch_pid: int | None = None,
    watermark: dict[str, Any] | None = None,
) -> IndexStatus:
    """The status of ``store``'s index (see the module docstring): every recorded root, or
    only ``paths`` (each a recorded root, a path under one, or a path files are indexed under;
    InvalidOptionError, exit 2, for one that is none of these). ``max_bytes`` bounds a hash."""
    records = store.file_records()
    roots = recorded_roots(store)
    seen: set[str] = set()
    out: list[RootStatus] = []
    if paths:
        for path in paths:
            out += _path_status(path, roots, records, seen, max_bytes)
    else:
        for root in roots:
            if _within_another(root, roots):
                continue  # walked as part of the root that holds it, by that root's rules
            out.append(_walk_root(root, Path(source_path(root.path)), records, seen, max_bytes))
        others = [name for name in records if name not in seen and not _under_any(name, roots)]
        if others:
            out.append(_records_status(OTHER, None, others, records, max_bytes))
    return IndexStatus(
        out,
        store.get_meta("last_ingest"),
        vectors_pending,
        watch_running,
        watch_pid,
        watermark,
    )


def scope_status(
    store: StatusStore,
    sources: set[str],
    *,
    max_bytes: int | None = None,
    vectors_pending: int = 0,
    watermark: dict[str, Any] | None = None,
) -> IndexStatus:
    """The status of a scope: its indexed files (``sources`` with a ledger record) checked
    for changed or gone, one group naming no root (a file not indexed belongs to
    no scope, so none is ``new``); ``vectors_pending`` counted in the scope by the caller."""
    records = store.file_records()
    names = sorted(name for name in sources if name in records)
    group = _records_status("(scope)", None, names, records, max_bytes)
    return IndexStatus([group], None, vectors_pending, None, None, watermark)


def _path_status(
    path: Path,
    roots: list[Root],
    records: Mapping[str, FileRecord],
    seen: set[str],
    max_bytes: int | None,
) -> list[RootStatus]:
    """The status under one PATH argument: the recorded root it lies in (walked there only),
    else the recorded roots inside it and its other indexed files."""
    resolved = Path(os.path.abspath(path.expanduser()))
    real = resolved.resolve()
    for root in roots:
        root_path = Path(source_path(root.path))
        if real == root_path or (not root.is_file and real.is_relative_to(root_path)):
            return [_walk_root(root, root_path, records, seen, max_bytes, only=real)]
    out = []
    for root in roots:
        root_path = Path(source_path(root.path))
        if root_path.is_relative_to(real):
            out.append(_walk_root(root, root_path, records, seen, max_bytes))
    name = source_name(real)
    rest = [
        r
        for r in records
        if r not in seen and (r == name or Path(source_path(r)).is_relative_to(real))
    ]
    if rest:
        seen.update(rest)
        out.append(_records_status(name, None, rest, records, max_bytes))
    if not out:
        raise InvalidOptionError(
            f"{source_name(resolved)} is not ingested: no indexed file lies under it (kb "
            "ingest it first, or run kb status without a path for every ingested root)"
        )
    return out


def _within_another(root: Root, roots: list[Root]) -> bool:
    """True when ``root`` lies inside another recorded folder root (its files are that one's)."""
    p = Path(source_path(root.path))
    return any(
        not other.is_file
        and other.path != root.path
        and _inside(p, Path(source_path(other.path)), other.recursive)
        for other in roots
    )


def _under_any(name: str, roots: list[Root]) -> bool:
    p = Path(source_path(name))
    for root in roots:
        rp = Path(source_path(root.path))
        if p == rp or (not root.is_file and _inside(p, rp, root.recursive)):
            return True
    return False


def _inside(p: Path, root: Path, recursive: bool) -> bool:
    return p.is_relative_to(root) and p != root if recursive else p.parent == root


def _walk_root(
    root: Root,
    root_path: Path,
    records: Mapping[str, FileRecord],
    seen: set[str],
    max_bytes: int | None,
    only: Path | None = None,
) -> RootStatus:
    """Walk one recorded root (``only``: just that path below it) with its rules."""
    status = RootStatus(root.path if only is None else source_name(only), root.synced_at)
    narrowed = frozenset({only}) if only is not None and only != root_path else None
    found = Discovery([], [], [], only=narrowed)
    if root.is_file:
        found.file_roots.append(root_path)
        picked = root_path.suffix.lower() in root.extensions and os.path.lexists(root_path)
        files: Iterator[Path] = iter([root_path] if picked else [])
    elif not os.path.isdir(root_path):
        found.dir_roots.append((root_path, root.recursive))
        files = iter(())
    else:
        found.dir_roots.append((root_path, root.recursive))
        files = _walk(
            root_path,
            root.extensions,
            root.recursive,
            root.include_hidden,
            root.follow_symlinks,
            found,
        )
    for path in files:
        name = source_name(path)
        record = records.get(name)
        if record is None:
            status.note("new", name)
            continue
        seen.add(name)  # (recorded names only: the set stays within the ledger's size)
        status.indexed += 1
        kind = compare(path, record, max_bytes)
        if kind is not None:
            status.note(kind, name)
    for name in records:
        if name in seen or not found.covers(name):
            continue
        seen.add(name)
        if not on_disk(name):
            status.indexed += 1
            status.note("gone", name)
        # on disk but not picked now (another --ext, a .kbignore rule): kb ingest keeps it
    status.unreadable += len(found.unreadable)
    return status


def _records_status(
    label: str,
    synced_at: str | None,
    names: list[str],
    records: Mapping[str, FileRecord],
    max_bytes: int | None,
) -> RootStatus:
    """Recorded files with no recorded root: changed or gone, never new."""
    status = RootStatus(label, synced_at, walked=False)
    for name in names:
        status.indexed += 1
        path = Path(source_path(name))
        if not on_disk(name):
            status.note("gone", name)
            continue
        kind = compare(path, records[name], max_bytes)
        if kind is not None:
            status.note(kind, name)
    return status


def compare(path: Path, record: FileRecord, max_bytes: int | None) -> str | None:
    """How the file at ``path`` differs from its ``record``: None (as recorded), ``touched``
    (another mtime, the same bytes), ``changed`` or ``unreadable``. Hashes only when the size
    matches and the mtime does not."""
    try:
        st = os.stat(path)
    except OSError:
        return "unreadable"
    if not stat.S_ISREG(st.st_mode) or st.st_size != record.size:
        return "changed"
    if st.st_mtime_ns == record.mtime_ns:
        return None
    if max_bytes is not None and st.st_size > max_bytes:
        return "changed"
    try:
        content = read_content(path, max_bytes, keep=False)
    except (OSError, LoaderError):  # kb ingest would report it as failed
        return "unreadable"
    return "touched" if content.sha256 == record.sha256 else "changed"


def database_file(store: IndexMetadata) -> Path | None:
    """The file an index lives in, where a watch's marker sits beside it (None: a server's
    index, whose watches ``kb status`` cannot see)."""
    try:
        where = store.stats().get("path")
    except (AttributeError, NotImplementedError):
        return None
    if not isinstance(where, str) or "://" in where or not os.path.isfile(where):
        return None
    return Path(where)

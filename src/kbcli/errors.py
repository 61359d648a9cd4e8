"""Errors raised by kbcli.

Every error a user can cause or fix derives from :class:`KBError`; its message is one line that
names the problem and the fix. The CLI prints that line and exits non-zero; anything else is a
bug and keeps its traceback.

    KBError
    ├── ConfigError            bad jianmu.yaml value or file (also ValueError)
    ├── InvalidOptionError     bad search mode, fusion, filter, k ... (also ValueError)
    │   └── FilterError        a metadata filter that cannot be applied
    ├── MissingDependencyError an optional package is not installed (also ImportError)
    ├── EmbedderError          an embedding provider failed or is not set up (also RuntimeError)
    ├── RerankerError          a reranker or query rewriter failed or is unset (also RuntimeError)
    ├── AnswerError            kb ask's answer model failed or is not set up (also RuntimeError)
    ├── LoaderError            a file could not be read into text (also RuntimeError)
    │   └── UnsupportedFormatError
    ├── StoreError             the knowledge database cannot be used
    │   ├── NotAKnowledgeBaseError  the file is not a kb database (or is corrupt)
    │   ├── DatabaseLockedError     another process holds the write lock too long
    │   ├── ReadOnlyIndexError      a write to an index opened read-only (a read-only mount ...)
    │   └── IndexMismatchError      index built with another embedder or analyzer
    ├── UnsafePruneError       an ingest would remove most of the index (an unmounted folder?)
    ├── NotFoundError          an id or source that is not in the index
    ├── ListenError            kb mcp --http cannot listen on its address (port in use ...)
    └── IndexBehindError       the index is behind its files (kb search --stale fail ...)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.ingest.report import SyncReport


class KBError(Exception):
    """Base class of every error a user can cause or fix.

    ``exit_code`` is what the ``kb`` command exits with: 1 for a failure, 2 for a usage error
    (bad option, filter, config or database path), 3 when the database stayed locked, 4 when
    ``kb mcp --http`` cannot listen on its address, 6 when the index is behind its files.

    ``report`` is what the index kept when the error stopped a sync
    (:func:`kbcli.ingest.sync.sync` sets it: the files written before the error, the time
    taken; ``kb ingest --json`` prints it with the error), None for an error raised anywhere
    else. The error keeps its own class, so callers catch what they caught before.
    """

    exit_code = 1
    report: SyncReport | None = None


class ConfigError(KBError, ValueError):
    """A configuration file or value is wrong."""

    exit_code = 2


class InvalidOptionError(KBError, ValueError):
    """An option passed to the library or CLI is not valid."""

    exit_code = 2


class FilterError(InvalidOptionError):
    """A metadata filter is malformed or uses an unknown operator."""


class MissingDependencyError(KBError, ImportError):
    """An optional dependency is needed but not installed."""


class EmbedderError(KBError, RuntimeError):
    """An embedder is not configured (no key) or its provider failed."""


class RerankerError(KBError, RuntimeError):
    """A reranker or query rewriter is not configured, cannot load its model, or its server
    failed."""


class AnswerError(KBError, RuntimeError):
    """The chat model that writes ``kb ask`` answers is not set up (no key, unknown provider)
    or its server failed (4xx/5xx, timeout, an empty or malformed completion)."""


class LoaderError(KBError, RuntimeError):
    """A document could not be loaded (also a RuntimeError, as reference code expects)."""


class UnsupportedFormatError(LoaderError):
    """No loader handles this file type."""


class StoreError(KBError):
    """The knowledge database cannot be used."""


class NotAKnowledgeBaseError(StoreError):
    """The file is not a kb database, or it is corrupt."""

    exit_code = 2


class DatabaseLockedError(StoreError):
    """Another process kept the database locked for longer than we may wait."""

    exit_code = 3


class ReadOnlyIndexError(StoreError):
    """A write to an index that can only be read here (a read-only file, folder or mount):
    searching it works; the message names the cause and the fix."""


class IndexMismatchError(StoreError):
    """The index was built with another embedder or analyzer than the one in use."""


class UnsafePruneError(KBError):
    """Removing indexed files refused: the folder looks empty or unmounted, or most files
    would go."""

    exit_code = 2


class NotFoundError(KBError):
    """An id or source is not in the index."""


class ListenError(KBError):
    """A server cannot listen on its address: the port is in use, needs privileges, or the
    address is not this machine's."""

    exit_code = 4


def require(
    module: str,
    *,
    extra: str | None = None,
    feature: str | None = None,
    package: str | None = None,
) -> Any:
    """Import an optional dependency, or raise :class:`MissingDependencyError` naming the
    install command: ``pip install 'kbcli[extra]'``, or ``pip install package`` for a package
    that no extra provides (``package`` defaults to the module's name). The module is ``Any``:
    optional packages are untyped (``ignore_missing_imports``), so nothing more is known."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        message = missing_message(module, extra=extra, feature=feature, package=package)
        raise MissingDependencyError(message) from None


def missing_message(
    module: str,
    *,
    extra: str | None = None,
    feature: str | None = None,
    package: str | None = None,
) -> str:
    """The line :func:`require` raises for a missing ``module`` (for callers that report it
    another way, e.g. as a loader's warning)."""
    what = feature or "This feature"
    name = package or module.split(".")[0]
    command = f"pip install 'kbcli[{extra}]'" if extra else f"pip install {name}"
    return f"{what} needs the '{name}' package: {command}"


class IndexBehindError(KBError):
    """The index is behind the files it was built from: a hit's file changed or is gone
    since it was indexed (``kb search --stale fail``), or files are new, changed or gone, or
    vectors pending (``kb status``). Exit code 6; ``kb ingest`` brings the index up to date."""

    exit_code = 6

"""What a command opens: the configuration, the knowledge base and its catalog, and the paths
and filters as ingest recorded them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kbcli.cli import render
from kbcli.cli.state import State, get_state
from kbcli.config.lookup import (
    configured_file,
    get_config,
    load_config,
    with_embedder,
    with_store,
)
from kbcli.config.schema import Config
from kbcli.errors import ConfigError, InvalidOptionError
from kbcli.filters.model import MAX_FILTER_CONDITIONS, ensure_checked
from kbcli.filters.syntax import under_folders, with_source_paths
from kbcli.pipeline import KnowledgeBase
from kbcli.protocols import DocumentCatalog, supports
from kbcli.system.paths import canonical_source, source_forms


def configuration(state: State) -> Config:
    """The configuration, with ``--store`` overriding ``store.backend`` (settings are kept
    when it names the configured backend)."""
    # kb's root callback named state.config to get_config (use_config_file): the library's
    # defaults and the command then share one read of the file
    config = get_config() if state.config == configured_file() else load_config(state.config)
    return with_store(config, state.store) if state.store else config


def open_kb(
    ctx: typer.Context,
    *,
    create: bool,
    busy_timeout: float | None = None,
    embedder: str | None = None,
) -> KnowledgeBase:
    """The knowledge base named by --db / config. Read-only commands do not create one.
    ``embedder``: ``kb ingest --embedder``, over ``$KB_EMBEDDER`` and the file."""
    state = get_state(ctx)
    config = configuration(state)
    if embedder is not None:
        config = with_embedder(config, embedder)
    db = Path(state.db or config.paths.knowledge_db).expanduser()

    def note(text: str) -> None:
        if not state.quiet:
            render.message(text)

    kb = KnowledgeBase.from_config(
        config, db=db, on_note=note, busy_timeout=busy_timeout, create=create
    )
    if not supports(kb.store, DocumentCatalog):
        kb.close()
        raise ConfigError(
            f"store.backend {config.store.backend!r} is not a document catalog (see "
            "kbcli.protocols.DocumentCatalog): kb needs one to list, delete and ingest"
        )
    return kb


def catalog(kb: KnowledgeBase) -> DocumentCatalog:
    """The store of a knowledge base :func:`open_kb` opened: a document catalog."""
    store = kb.store
    if not supports(store, DocumentCatalog):
        raise ConfigError("kb needs a store that is a kbcli.protocols.DocumentCatalog")
    return store


def resolve_source(path: Path) -> str:
    """A source path as ingest records it (:func:`kbcli.system.paths.canonical_source`)."""
    if "\0" in str(path):
        raise InvalidOptionError(f"The path {str(path)[:80]!r} contains a NUL character")
    return canonical_source(path)


def source_candidates(path: Path) -> list[str]:
    """The paths ingest may have recorded ``path`` under, most likely first: fully resolved
    (a file named on the command line), its folder resolved but not the file itself (a file
    reached through a link with --follow-symlinks), and as written."""
    resolve_source(path)  # a NUL in the path is one line
    return source_forms(path)


def search_filter(
    where: dict[str, Any] | None, folders: list[Path] | None
) -> dict[str, Any] | None:
    """The ``--filter`` expressions (``source`` values resolved as paths too) ANDed with the
    ``--in`` folders."""
    where = with_source_paths(where, lambda value: resolve_source(Path(value)))
    scope = under_folders([resolve_source(folder) for folder in folders or []])
    distinct = len(scope.get("$or", [scope])) if scope else 0
    if distinct > MAX_FILTER_CONDITIONS:
        raise InvalidOptionError(
            f"--in was given {distinct} folders (none inside another): at most "
            f"{MAX_FILTER_CONDITIONS}; give the folders that hold them instead"
        )
    parts = [part for part in (where, scope) if part]
    if not parts:
        return None
    # the --filter expressions alone, unchanged, are checked already
    return ensure_checked(parts[0] if len(parts) == 1 else {"$and": parts})

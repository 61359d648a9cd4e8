"""What a command opens: the global options, the configuration, the knowledge base, and the
paths and filters as ingest recorded them."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from kbcli.cli import render
from kbcli.config.lookup import (
    configured_file,
    get_config,
    load_config,
    use_config_file,
    with_embedder,
    with_store,
)
from kbcli.errors import ConfigError, InvalidOptionError
from kbcli.filters.model import MAX_FILTER_CONDITIONS, validate_filter
from kbcli.filters.syntax import under_folders, with_source_paths
from kbcli.protocols import DocumentCatalog, supports
from kbcli.system.paths import canonical_source, source_forms

if TYPE_CHECKING:
    from typer._click import Context  # click as typer ships it (types only)

    from kbcli.config.schema import Config
    from kbcli.pipeline import KnowledgeBase

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class State:
    """Global options, kept on the Click context for the commands."""

    db: Path | None = None
    config: Path | None = None
    quiet: bool = False
    debug: bool = False
    store: str | None = None


def get_state(ctx: Context) -> State:
    obj = ctx.find_object(State)
    return obj if obj is not None else State()


def _keep(field: str) -> Callable[[typer.Context, Any], None]:
    """The callback of a global option written after the command: its value goes to the
    :class:`State` the group's callback made (a flag only when given)."""

    def keep(ctx: typer.Context, value: Any) -> None:
        if value is None or value is False:
            return
        setattr(get_state(ctx), field, value)
        if field == "config":
            use_config_file(value)  # as the group's callback does

    return keep


def _hidden(*decls: str, field: str, **settings: Any) -> Any:
    return typer.Option(*decls, hidden=True, expose_value=False, callback=_keep(field), **settings)


#: The group's options a command takes after its name too (``kb search x -q``), hidden from
#: its help: parameter name -> (option names, annotation, default).
GLOBAL_OPTIONS: dict[str, tuple[tuple[str, ...], Any, Any]] = {
    "global_db": (
        ("--db",), Annotated[Path | None, _hidden("--db", field="db", dir_okay=False)], None
    ),
    "global_config": (
        ("--config",), Annotated[Path | None, _hidden("--config", field="config")], None
    ),
    "global_store": (("--store",), Annotated[str | None, _hidden("--store", field="store")], None),
    "global_quiet": (
        ("-q", "--quiet"), Annotated[bool, _hidden("-q", "--quiet", field="quiet")], False
    ),
    "global_debug": (("--debug",), Annotated[bool, _hidden("--debug", field="debug")], False),
}  # fmt: skip


def global_options(*own: str) -> Callable[[F], F]:
    """A command that takes kb's global options after its name too, except those named in
    ``own``, its own options of the same name (``kb eval --db``: the evaluation database)."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        extra = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind
            )
            for name, (decls, kind, default) in GLOBAL_OPTIONS.items()
            if not set(decls) & set(own)
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            for parameter in extra:
                kwargs.pop(parameter.name, None)  # applied by their callbacks
            return command(*args, **kwargs)

        # typer reads a command's options from its signature and annotations
        parameters = [*signature.parameters.values(), *extra]
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {**command.__annotations__, **{p.name: p.annotation for p in extra}}
        return run  # type: ignore[return-value]

    return decorate


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
    # the library, imported when a command opens it: kb --help imports every command module
    from kbcli.pipeline import KnowledgeBase

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
    return validate_filter(parts[0] if len(parts) == 1 else {"$and": parts})

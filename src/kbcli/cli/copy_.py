"""``kb copy``: the whole index into another store, checked."""

from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import configuration, open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import get_state, global_options
from kbcli.config.lookup import load_config, target_store_config
from kbcli.errors import InvalidOptionError, StoreError
from kbcli.stores import build_store
from kbcli.stores.sqlite.replace import remove_database, replace_database
from kbcli.stores.transfer import copy_index

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb copy --to faiss --to-db ~/kb/team-faiss.db",
        "kb --store faiss --db ~/kb/team-faiss.db copy --to sqlite --to-db ~/kb/back.db",
        "kb copy --to chroma --to-db ~/kb/c.db --to-set path=~/kb/chroma --json",
        "kb copy --to sqlite --to-db ~/kb/back.db --replace",
    ),
)
@global_options()
def copy(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Option("--to", metavar="BACKEND", help="Target store: sqlite, faiss, chroma ..."),
    ],
    to_db: Annotated[
        Path | None,
        typer.Option("--to-db", metavar="PATH", dir_okay=False, help="Target database file."),
    ] = None,
    to_set: Annotated[
        list[str] | None,
        typer.Option(
            "--to-set",
            metavar="KEY=VALUE",
            help="A setting of the target store (as under store: in jianmu.yaml); repeatable.",
        ),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="--to sqlite: put the copy in the place of the existing index at --to-db, "
            "which running kb mcp and kb watch processes then read without a restart.",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            metavar="SECONDS",
            min=0,
            help="--replace: how long to wait while another kb process writes to --to-db.",
        ),
    ] = 60.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Copy the whole index (chunks, vectors, file records) into another, empty store without
    re-embedding, then check it: counts, and a sample of searches give the same results.
    With --replace the checked copy takes the place of the existing sqlite index at --to-db,
    in one transaction: processes reading it (kb mcp, kb watch) go on, now on the copy."""

    state = get_state(ctx)
    kb = open_kb(ctx, create=False)
    try:
        # the target takes jianmu.yaml's store settings when the file names the same backend
        config = target_store_config(load_config(state.config), to, to_set or [])
        files = ("sqlite", "faiss", "chroma")  # the stores kept in a database file
        if to_db is None and config.store.backend in files:
            raise InvalidOptionError("kb copy needs --to-db PATH for the target database")
        source = configuration(state)
        source_db = Path(state.db or source.paths.knowledge_db).expanduser().resolve()
        same_file = to_db is not None and Path(to_db).expanduser().resolve() == source_db
        if same_file and source.store.backend in files and config.store.backend in files:
            raise InvalidOptionError("--to-db is the source database: give another path")
        live = None
        if replace:
            live = _replaceable(config.store.backend, to_db)
            to_db = live.with_name(f"{live.name}.kb-copy")
            remove_database(to_db)  # what an interrupted --replace left
        target = build_store(config, db=to_db)
        try:
            report = copy_index(kb.store, target)
        finally:
            target.close()
        if live is not None and to_db is not None:
            try:
                if report.ok:
                    replace_database(to_db, live, wait)
            finally:
                remove_database(to_db)
            to_db = live
    finally:
        kb.close()
    if json_out:
        render.print_json({"to": config.store.backend, "db": str(to_db), **report.as_dict()})
    elif not state.quiet:
        render.message(
            f"Copied {report.documents} chunks ({report.vectors} vectors, {report.files} "
            f"files) to {config.store.backend} at {to_db}"
        )
    if not report.ok:
        raise StoreError("The copy differs from the source: " + "; ".join(report.problems))
    if not json_out and not state.quiet:
        render.message(
            f"Checked: counts equal, {report.searches} sampled searches give the same results"
        )


def _replaceable(backend: str, to_db: Path | None) -> Path:
    """The existing SQLite database --replace writes into (a one-line error otherwise)."""

    if backend != "sqlite":
        raise InvalidOptionError(f"--replace writes into a sqlite database, not {backend}")
    if to_db is None or not Path(to_db).expanduser().is_file():
        raise InvalidOptionError(
            f"--replace needs --to-db naming an existing index, not {to_db}: without "
            "--replace kb copy creates a new one"
        )
    return Path(to_db).expanduser().resolve()

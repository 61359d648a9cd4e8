"""``kb status``: is the index behind its files (exit 6) or current (exit 0)?"""

from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import configuration, open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.render.status import status_output
from kbcli.cli.state import get_state, global_options
from kbcli.errors import IndexBehindError
from kbcli.ingest.files import limit_bytes
from kbcli.ingest.status import database_file, index_status
from kbcli.ingest.watch_marker import watch_running
from kbcli.ingest.writes import ledger_store
from kbcli.search.freshness import index_watermark

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb status || kb ingest docs notes",
        "kb --db team.db status notes --json",
        "kb -q status ~/notes || kb -q ingest ~/notes",
    ),
)
@global_options()
def status(
    ctx: typer.Context,
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="[PATH]...", help="Ingested folders or files [default: every root]."
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the status as one JSON object.")
    ] = False,
) -> None:
    """Show whether the index is behind its files: per ingested root, the files new, changed
    or gone since its last sync (a stat per file; a hash only where the size matches and the
    mtime does not), chunks without vectors, a kb watch running. Exit 0 when current, 6 when
    behind (kb ingest brings it up to date)."""

    state = get_state(ctx)
    config = configuration(state)
    kb = open_kb(ctx, create=False)
    try:
        store = ledger_store(kb)  # a store without a file ledger: one line, exit 2
        watermark = index_watermark(kb)
        db = database_file(store) or Path(state.db or config.paths.knowledge_db).expanduser()
        running, pid = watch_running(db)
        found = index_status(
            store,
            paths or [],
            max_bytes=limit_bytes(config.limits.max_file_mb),
            vectors_pending=watermark.vectors_pending,
            watch_running=running,
            watch_pid=pid,
            watermark=watermark.as_json(),
        )
    finally:
        kb.close()
    if json_out:
        render.print_json(found.as_json())
    elif state.quiet:
        if found.behind:
            render.message(found.summary())
    else:
        status_output(found)
    if found.behind:
        raise typer.Exit(IndexBehindError.exit_code)

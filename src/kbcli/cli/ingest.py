"""``kb ingest``: index files and folders (an incremental sync)."""

from pathlib import Path
from typing import Annotated, Any

import typer

from kbcli.cli import render
from kbcli.cli.context import open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import MetaOption, example
from kbcli.cli.state import get_state, global_options
from kbcli.cli.sync_options import (
    EmbedderOption,
    ExtOption,
    FollowSymlinksOption,
    IncludeHiddenOption,
    MassDeleteOption,
    PruneOption,
    RecursiveOption,
    WaitOption,
)
from kbcli.embedders.base import embedder_info
from kbcli.errors import KBError
from kbcli.filters.syntax import parse_meta
from kbcli.ingest.discovery import DEFAULT_EXTENSIONS, parse_extensions
from kbcli.ingest.report import SyncReport
from kbcli.ingest.sync import SyncInterrupted, sync
from kbcli.pipeline import LazyEmbedder
from kbcli.system.signals import exit_code, interrupt_on_termination, signal_name

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb ingest ~/notes docs/manual.pdf --ext .md,.pdf --meta project=apollo",
        "kb ingest ~/notes --prune --json",
        "kb ingest ~/notes --no-prune",
    ),
)
@global_options()
def ingest(
    ctx: typer.Context,
    paths: Annotated[list[Path], typer.Argument(metavar="PATH...", help="Files or folders.")],
    ext: ExtOption = None,
    recursive: RecursiveOption = True,
    meta: MetaOption = None,
    prune: PruneOption = None,
    allow_mass_delete: MassDeleteOption = False,
    follow_symlinks: FollowSymlinksOption = False,
    include_hidden: IncludeHiddenOption = False,
    rebuild: Annotated[
        bool,
        typer.Option("--rebuild", help="Re-read and re-embed every file, even unchanged ones."),
    ] = False,
    wait: WaitOption = 60.0,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON line.")
    ] = False,
    embedder: EmbedderOption = None,
) -> None:
    """Index files and folders (only new and changed files are read again; files deleted
    from PATH leave the index). Files are searchable by keyword as soon as they are written;
    their vectors follow in the same run (or the next one, if it was stopped)."""

    state = get_state(ctx)
    extensions = parse_extensions(ext) if ext is not None else DEFAULT_EXTENSIONS
    metadata = parse_meta(meta) or None

    try:
        # SIGTERM and SIGHUP (cron, systemd, timeout, a closed terminal) stop it as Ctrl-C does
        with interrupt_on_termination():
            kb = open_kb(ctx, create=True, busy_timeout=wait, embedder=embedder)
            try:
                terminal = render.stderr_is_terminal()
                show_bar = terminal and not state.quiet
                lines = not terminal and not state.quiet
                if show_bar and isinstance(kb.embedder, LazyEmbedder):
                    _ = kb.embedder.resolved  # its note (if any) goes out before the bar starts

                def described() -> str:  # for the line that opens a long embedding
                    return embedder_info(kb.embedder).describe()

                with render.progress(show_bar, lines=lines, embedder=described) as on_progress:
                    on_vectors = None
                    if on_progress is not None:
                        bar = on_progress

                        def on_vectors(done: int, total: int) -> None:
                            bar("", done, total, unit="chunks")

                    report = sync(
                        kb,
                        list(paths),
                        extensions=extensions,
                        recursive=recursive,
                        metadata=metadata,
                        prune=prune,
                        include_hidden=include_hidden,
                        rebuild=rebuild,
                        wait=wait,
                        progress=on_progress,
                        follow_symlinks=follow_symlinks,
                        allow_mass_delete=allow_mass_delete,
                        vector_progress=on_vectors,
                    )
            finally:
                kb.close()
    except KeyboardInterrupt as stop:
        stopped = stop.report if isinstance(stop, SyncInterrupted) else SyncReport()
        stopped.interrupted, stopped.signal = True, signal_name(stop)
        if json_out:
            render.print_json(stopped.to_dict(), one_line=True)
        render.message(render.interrupted_summary(stopped))
        raise typer.Exit(exit_code(stop)) from None
    except KBError as exc:  # the one-line error follows; the summary counts what was written
        if json_out and exc.report is not None:  # the sync ran: what the index kept
            render.print_json({**exc.report.to_dict(), "error": str(exc)}, one_line=True)
        raise
    report_output(report, quiet=state.quiet, json_out=json_out)
    if report.failed:
        raise typer.Exit(1)


def report_output(
    report: SyncReport, *, quiet: bool, json_out: bool, extra: dict[str, Any] | None = None
) -> None:
    """A sync's failures and warnings on stderr, then its summary (or its JSON line, with
    ``extra`` keys first) on stdout; ``kb watch`` shows its first index the same way."""

    for failure in report.failed:
        reason = (
            failure.error if failure.path in failure.error else f"{failure.path}: {failure.error}"
        )
        render.message(f"Failed: {reason}")
    if not quiet:
        for text in report.warnings:
            render.warning(text)
    if json_out:
        render.print_json({**(extra or {}), **report.to_dict()}, one_line=True)
    elif not quiet:
        for line in render.ingest_summary(report):
            render.result(line)

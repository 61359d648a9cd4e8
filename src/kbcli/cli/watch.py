"""``kb watch``: index folders, then keep the index in line with them as they change."""

from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import configuration, open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.ingest import report_output
from kbcli.cli.options import MetaOption, example
from kbcli.cli.render.messages import plural
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
from kbcli.filters.syntax import parse_meta
from kbcli.ingest.discovery import DEFAULT_EXTENSIONS, parse_extensions
from kbcli.ingest.report import SyncReport
from kbcli.ingest.sync import SyncInterrupted
from kbcli.ingest.watch import Batch, Watch, WatchSettings, batch_line
from kbcli.system.signals import interrupt_on_termination, signal_name, stop_between, stopped_by

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb watch ~/notes --ext .md,.pdf --meta project=apollo",
        "kb -q watch ~/notes --json >> watch.log",
        "kb watch /mnt/share/docs --scan-every 30",
    ),
)
@global_options()
def watch(
    ctx: typer.Context,
    paths: Annotated[list[Path], typer.Argument(metavar="PATH...", help="Files or folders.")],
    ext: ExtOption = None,
    recursive: RecursiveOption = True,
    meta: MetaOption = None,
    prune: PruneOption = None,
    allow_mass_delete: MassDeleteOption = False,
    follow_symlinks: FollowSymlinksOption = False,
    include_hidden: IncludeHiddenOption = False,
    wait: WaitOption = 60.0,
    scan_every: Annotated[
        float | None,
        typer.Option(
            "--scan-every",
            metavar="SECONDS",
            min=0.05,
            help="Scan every SECONDS instead of following file-system events (network shares, "
            "where events do not arrive) [default: follow events; scan every 2 s where they "
            "are unavailable].",
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON line on stdout for the first index, each applied batch and the end.",
        ),
    ] = False,
    embedder: EmbedderOption = None,
) -> None:
    """Index files and folders as kb ingest does, then follow their changes until stopped:
    new, edited, deleted and renamed files and folders are applied in batches, each once
    its events have been quiet for half a second (one line per batch on stderr). The
    database's writer lock is taken per batch, so kb ingest, kb mcp and kb search run
    alongside. Ctrl-C or SIGTERM finishes the batch in flight and exits 0. A watched folder
    gone, or replaced by a link (renamed away, a link in its place), stops the watch with one
    line and exit 2, the index as it was; with --follow-symlinks the folder the link leads to
    is indexed and followed instead. Another folder made in its place is indexed again."""
    import signal
    import threading

    state = get_state(ctx)
    settings = WatchSettings(
        extensions=parse_extensions(ext) if ext is not None else DEFAULT_EXTENSIONS,
        recursive=recursive,
        metadata=parse_meta(meta) or None,
        prune=prune,
        include_hidden=include_hidden,
        follow_symlinks=follow_symlinks,
        allow_mass_delete=allow_mass_delete,
        wait=wait,
    )

    def note(text: str) -> None:
        if not state.quiet:
            render.message(text)

    kb = open_kb(ctx, create=True, busy_timeout=wait, embedder=embedder)
    try:
        database = Path(state.db or configuration(state).paths.knowledge_db)
        watcher = Watch(kb, paths, settings, scan_every=scan_every, note=note, database=database)
        try:
            try:
                # The first index stops on a signal as kb ingest does (each file whole).
                with interrupt_on_termination():
                    terminal = render.stderr_is_terminal()
                    lines = not terminal and not state.quiet
                    with render.progress(terminal and not state.quiet, lines=lines) as bar:
                        report = watcher.index(progress=bar)
            except KeyboardInterrupt as interrupt:
                stopped = (
                    interrupt.report if isinstance(interrupt, SyncInterrupted) else SyncReport()
                )
                stopped.interrupted, stopped.signal = True, signal_name(interrupt)
                if json_out:
                    render.print_json({"event": "indexed", **stopped.to_dict()}, one_line=True)
                if not state.quiet:
                    render.message(render.interrupted_summary(stopped))
                return
            report_output(report, quiet=state.quiet, json_out=json_out, extra={"event": "indexed"})

            def on_batch(batch: Batch) -> None:
                for failure in batch.report.failed:
                    render.message(f"Failed: {failure.error}")
                if batch.refused and not state.quiet:
                    render.warning(f"{batch.refused.split(';')[0]}; the files were kept.")
                if json_out:
                    render.print_json(batch.to_dict(), one_line=True)
                if not state.quiet:
                    render.message(batch_line(batch))

            stop = threading.Event()
            with stop_between(stop):
                n = len(paths)
                note(f"Watching {n} path{plural(n)} ({watcher.how}); Ctrl-C to stop.")
                watcher.follow(stop, on_batch)
            by = signal.Signals(stopped_by[-1]).name if stopped_by else None
            if json_out:
                end = {"event": "stopped", "batches": watcher.batches, "signal": by}
                render.print_json({**end, "unapplied": watcher.unapplied}, one_line=True)
            batches = f"{watcher.batches} batch{'' if watcher.batches == 1 else 'es'}"
            left = (
                f"; {watcher.unapplied} changed path{plural(watcher.unapplied)} not "
                "applied (the next kb ingest or kb watch applies them)"
                if watcher.unapplied
                else ""
            )
            note(f"Stopped{f' ({by})' if by else ''} after {batches}{left}.")
        finally:
            watcher.close()
    finally:
        kb.close()

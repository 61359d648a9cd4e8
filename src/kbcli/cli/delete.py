"""``kb delete``: chunks by id, a file's chunks, or every file under a folder."""

import os
from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import catalog, open_kb, source_candidates
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.render.messages import diagnostics
from kbcli.cli.state import global_options
from kbcli.errors import InvalidOptionError, NotFoundError
from kbcli.pipeline import KnowledgeBase

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb delete 3f2a9c0d1e8b4a7f9c6d5e4b3a2f1e0d",
        "kb delete --source notes/old-plan.md",
        "kb delete --source notes/archive --yes",
    ),
)
@global_options()
def delete(
    ctx: typer.Context,
    ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="[ID]...", help="Chunk ids (see 'kb list')."),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option(
            "--source",
            metavar="PATH",
            help="Delete every chunk of this file, or of every file under this folder.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete a folder's files without asking.")
    ] = False,
) -> None:
    """Delete chunks by id, a file's chunks, or every file under a folder."""

    if not ids and source is None:
        render.error("Give chunk ids or --source PATH (see 'kb list' for ids)")
        raise typer.Exit(2)
    kb = open_kb(ctx, create=False)
    missing: list[str] = []
    deleted = 0
    files = 0
    try:
        if ids:
            wanted = list(dict.fromkeys(ids))
            known = {doc.id for doc in catalog(kb).get(wanted)}
            missing = [i for i in wanted if i not in known]
            deleted += catalog(kb).remove([i for i in wanted if i in known])
        if source is not None:
            candidates = source_candidates(source)
            removed = 0
            for path in candidates:
                removed = catalog(kb).delete_source(path)
                if removed:
                    break
            if removed:
                deleted += removed
            else:
                path = candidates[0]
                under = _sources_under(kb, path)
                if not under:
                    missing.append(f"--source {path}")
                elif yes or _confirm_folder(path, under):
                    with catalog(kb).transaction():
                        for name, _count in under:
                            deleted += catalog(kb).delete_source(name)
                    files = len(under)
                else:
                    render.message("Nothing deleted.")
                    raise typer.Exit(1)
    finally:
        kb.close()
    if deleted or not missing:
        what = f" from {files} file{'' if files == 1 else 's'}" if files else ""
        render.result(f"Deleted {deleted} chunk{'' if deleted == 1 else 's'}{what}.")
    if missing:
        raise NotFoundError(
            f"Nothing indexed under {', '.join(missing)}: see 'kb list' for ids and sources"
        )


def _sources_under(kb: KnowledgeBase, folder: str) -> list[tuple[str, int]]:
    """Indexed sources below ``folder`` (an absolute path), with their chunk counts."""
    prefix = folder if folder.endswith(os.sep) else folder + os.sep
    return [(name, count) for name, count in catalog(kb).sources() if name.startswith(prefix)]


def _confirm_folder(folder: str, under: list[tuple[str, int]]) -> bool:
    """Ask on stderr, read the answer from stdin (``echo y | kb delete ...`` answers too);
    stdin at its end (cron, a script, /dev/null) is a usage error naming ``--yes``."""
    import sys

    chunks = sum(count for _, count in under)
    files = f"{len(under)} file{'' if len(under) == 1 else 's'}"
    question = f"Delete {files} ({chunks} chunk{'' if chunks == 1 else 's'}) under {folder}?"
    while True:
        with diagnostics():
            typer.echo(f"{question} [y/N]: ", err=True, nl=False)
        line = sys.stdin.readline()
        if not line:
            with diagnostics():
                typer.echo(err=True)
            raise InvalidOptionError(
                "no answer (stdin is not a terminal, or it ended): nothing deleted; add --yes "
                f"to delete the {files} under {folder} without asking"
            )
        answer = line.strip().lower()
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False

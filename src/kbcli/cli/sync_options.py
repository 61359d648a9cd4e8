"""The options ``kb ingest`` and ``kb watch`` share: what to pick, what to remove, how long to
wait for the writer lock, which embedder."""

from __future__ import annotations

from typing import Annotated

import typer

from kbcli.config.registry import EMBEDDER_NOTES

ExtOption = Annotated[
    str | None,
    typer.Option(
        "--ext",
        metavar=".md,.pdf",
        help="Comma-separated extensions to index [default: .md,.txt,.pdf,.docx]; "
        "images (.png,.jpg,.tif,...) are read by OCR when named here.",
    ),
]
RecursiveOption = Annotated[
    bool, typer.Option("--recursive/--no-recursive", help="Descend into sub-folders.")
]
PruneOption = Annotated[
    bool | None,
    typer.Option(
        "--prune/--no-prune",
        help="--prune: also remove indexed files under PATH that still exist but are no "
        "longer picked (--ext, .kbignore, hidden); --no-prune: keep even those deleted "
        "[default: remove the deleted ones].",
    ),
]
MassDeleteOption = Annotated[
    bool,
    typer.Option(
        "--allow-mass-delete",
        help="Let a run empty a folder's index or remove more than half of its files "
        "(refused otherwise: an unmounted or emptied folder looks the same).",
    ),
]
FollowSymlinksOption = Annotated[
    bool,
    typer.Option(
        "--follow-symlinks",
        help="Follow symbolic links that stay inside PATH (never outside; each file once).",
    ),
]
IncludeHiddenOption = Annotated[
    bool, typer.Option("--include-hidden", help="Also index hidden files and folders.")
]
WaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        metavar="SECONDS",
        min=0,
        help="How long to wait while another kb process writes to the database.",
    ),
]
EmbedderOption = Annotated[
    str | None,
    typer.Option(
        "--embedder",
        metavar="NAME",
        help=f"Embed with NAME: {', '.join(EMBEDDER_NOTES)} (kb --help says what each is); "
        "recorded in the index, so later commands use it [default: $KB_EMBEDDER, "
        "rag.embedding.provider, the index's own, else by API keys, else simple].",
    ),
]

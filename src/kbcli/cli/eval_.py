"""``kb eval``: retrieval quality on a BEIR collection."""

from pathlib import Path
from typing import Annotated

import typer

from .context import configuration, get_state
from .group import KBCommand
from .options import MAX_K, example
from .root import app


@app.command(
    "eval",
    cls=KBCommand,
    epilog=example(
        "kb eval examples/eval/it-helpdesk --mode keyword",
        "kb eval ./my-beir-set --mode hybrid --db eval.db --json",
    ),
)
def eval_(
    ctx: typer.Context,
    dataset: Annotated[
        Path,
        typer.Argument(
            metavar="DATASET_DIR",
            help="A BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.",
        ),
    ],
    split: Annotated[
        str | None,
        typer.Option("--split", metavar="NAME", help="qrels split [default: test, dev, train]."),
    ] = None,
    mode: Annotated[
        str, typer.Option("--mode", "-m", metavar="MODE", help="keyword, semantic or hybrid.")
    ] = "hybrid",
    k: Annotated[
        int,
        typer.Option(
            "-k", "--k", metavar="N", min=1, max=MAX_K, help="Cut-off of nDCG, MRR, recall."
        ),
    ] = 10,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            metavar="PATH",
            help="Index into this file and keep it (reused for the same corpus) "
            "[default: a temporary database]. Never your knowledge base.",
        ),
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option("--alpha", metavar="F", min=0.0, max=1.0, help="Hybrid dense weight."),
    ] = None,
    fusion: Annotated[
        str | None, typer.Option("--fusion", metavar="NAME", help="weighted or rrf.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Measure retrieval quality on a BEIR collection (nDCG, recall, MRR).

    Each document's title and text go through the normal ingest path (chunked like any file);
    documents are ranked by their best chunk; trec_eval conventions.
    """
    from .. import render
    from ..evaluation import evaluate

    state = get_state(ctx)
    extra = {key: v for key, v in (("alpha", alpha), ("fusion", fusion)) if v is not None}
    with render.progress(render.stderr_is_terminal() and not state.quiet) as bar:
        result = evaluate(
            dataset,
            split=split,
            mode=mode,
            k=k,
            db=db,
            config=configuration(state),
            progress=bar,
            search_options=extra,
        )
    if json_out:
        render.print_json(result)
    else:
        render.eval_summary(result)

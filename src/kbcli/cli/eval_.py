"""``kb eval``: retrieval quality on a BEIR collection, or on your own index with your own
questions (``--queries``)."""

from pathlib import Path
from typing import Annotated, Any

import typer

from kbcli.cli import render
from kbcli.cli.context import configuration, open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import MAX_K, example
from kbcli.cli.state import get_state, global_options
from kbcli.errors import InvalidOptionError
from kbcli.eval.beir import evaluate
from kbcli.eval.questions import evaluate_questions, load_questions
from kbcli.eval.report import summary_lines, write_html
from kbcli.types import normalize_mode

app = command_app()


@app.command(
    "eval",
    cls=KBCommand,
    epilog=example(
        "kb eval examples/eval/it-helpdesk --mode keyword",
        "kb eval ./my-beir-set --mode hybrid --db eval.db --json",
        "kb eval --queries questions.jsonl --compare keyword,hybrid --report eval.html",
    ),
)
@global_options("--db")
def eval_(
    ctx: typer.Context,
    dataset: Annotated[
        Path | None,
        typer.Argument(
            metavar="[DATASET_DIR]",
            help="A BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv "
            "(or --queries for your own questions on your index).",
        ),
    ] = None,
    queries: Annotated[
        Path | None,
        typer.Option(
            "--queries",
            metavar="FILE",
            help='Your questions, JSONL: {"query": ..., "expected": ["docs/a.md", '
            '"docs/b.md:40"]} (or {"path": grade}); searched on the index (--db).',
        ),
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="MODE,MODE",
            help="With --queries: these modes side by side, each against the first.",
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            metavar="FILE.html",
            help="With --queries: write a self-contained HTML report with plots.",
        ),
    ] = None,
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
            "-k",
            "--k",
            metavar="N",
            min=1,
            max=MAX_K,
            help="Cut-off of nDCG, MRR, recall; with --queries the files each question gets, "
            "as kb search -k N shows them.",
        ),
    ] = 10,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            metavar="PATH",
            help="BEIR: index into this file and keep it (reused for the same corpus) "
            "[default: a temporary database; never your knowledge base]. --queries: the "
            "index to search [default: the knowledge base].",
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
    """Measure retrieval quality: on a BEIR collection (nDCG, recall, MRR), or with --queries
    on your own index with your own questions (nDCG, hit@1/@3, MRR with 95% intervals, the
    misses, a suggested --min-score; --compare, --report).

    --queries ranks each question with kb search itself (the files kb search -k N shows, in
    its order); latency is per question with the model loaded, the model load apart.

    BEIR: each document's title and text go through the normal ingest path (chunked like any
    file); documents are ranked by their best chunk, in the search's order; trec_eval
    conventions otherwise.
    """

    state = get_state(ctx)
    extra = {key: v for key, v in (("alpha", alpha), ("fusion", fusion)) if v is not None}
    if queries is None:
        if dataset is None:
            raise InvalidOptionError(
                "kb eval needs a BEIR folder (DATASET_DIR) or --queries FILE with your "
                "questions: see kb eval --help"
            )
        if compare or report:
            raise InvalidOptionError("--compare and --report go with --queries FILE")

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
        return
    if dataset is not None:
        raise InvalidOptionError(
            "Give either a BEIR folder or --queries FILE, not both (--queries searches your index)"
        )
    _eval_questions(ctx, queries, compare or mode, k, db, report, extra, json_out)


def _eval_questions(
    ctx: typer.Context,
    queries: Path,
    modes: str,
    k: int,
    db: Path | None,
    report: Path | None,
    extra: dict[str, Any],
    json_out: bool,
) -> None:
    """``kb eval --queries``: the questions of ``queries`` on the live index, in ``modes``."""

    state = get_state(ctx)
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    for name in chosen:
        normalize_mode(name)  # an unknown mode is one line, exit 2
    questions = load_questions(queries)
    if db is not None:
        state.db = db
    kb = open_kb(ctx, create=False)
    try:
        with render.progress(render.stderr_is_terminal() and not state.quiet) as bar:
            result = evaluate_questions(
                kb,
                questions,
                modes=chosen,
                k=k,
                base=queries.expanduser().resolve().parent,
                progress=bar,
                search_options=extra,
            )
    finally:
        kb.close()
    result["file"] = str(queries)
    where = result["index"].get("path")
    if isinstance(where, str) and Path(where).expanduser().is_file():
        result["index"]["path"] = str(Path(where).expanduser().resolve())
    if report is not None:
        written = write_html(result, report, title=f"kb eval {queries.name}")
        if not state.quiet:
            render.message(f"Report written to {written}")
    if json_out:
        render.print_json(result)
    else:
        for line in summary_lines(result):
            render.result(line)

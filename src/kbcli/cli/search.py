"""``kb search``: search the knowledge base, hits by file or by chunk."""

from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import open_kb, resolve_source, search_filter
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import (
    MAX_K,
    FilterOption,
    FusionOption,
    NullOption,
    RerankOption,
    example,
    files_format,
    output_format,
    words,
)
from kbcli.cli.state import global_options
from kbcli.filters.syntax import parse_filter_expressions, under_folders
from kbcli.pipeline import KnowledgeBase
from kbcli.search.freshness import index_watermark, stale_policy
from kbcli.search.hints import unindexed, unknown_keys
from kbcli.search.query import search as run_search
from kbcli.types import SearchOptions

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        'kb search "reset password" --mode keyword -k 5',
        'kb search "revenue" --filter "year>=2023" --filter "lang=en,de" --json',
        "kb search '\"reset link\" password -sms' --by chunk --format csv",
        'kb search "install" --in docs --format files',
        'kb search -- "-v flag"',
        'kb search "reset password" --rerank --candidates 50 --min-relevance 0.3',
        'kb search "deploy steps" --stale fail --json',
    ),
)
@global_options()
def search(
    ctx: typer.Context,
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY",
            help='What to look for: "a phrase" must appear, -word excludes (after --).',
        ),
    ],
    k: Annotated[
        int, typer.Option("-k", "--k", metavar="N", min=1, max=MAX_K, help="How many results.")
    ] = 5,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            "-m",
            metavar="MODE",
            help="keyword, semantic or hybrid (aliases: sparse, vector, dense).",
        ),
    ] = "hybrid",
    by: Annotated[
        str,
        typer.Option(
            "--by",
            metavar="UNIT",
            help="file: one hit per file (its best chunk, how many chunks matched); "
            "chunk: every chunk.",
        ),
    ] = "file",
    in_: Annotated[
        list[Path] | None,
        typer.Option(
            "--in",
            metavar="DIR",
            help="Only files under this folder (repeatable: any of them); applied before ranking.",
        ),
    ] = None,
    filter: FilterOption = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            "--alpha",
            metavar="F",
            min=0.0,
            max=1.0,
            help="Weight of the semantic route in weighted hybrid fusion, the same for every query "
            "[default: config's rerank_alpha; per query for e5 and static].",
        ),
    ] = None,
    fusion: FusionOption = "weighted",
    min_score: Annotated[
        float | None,
        typer.Option("--min-score", metavar="F", help="Drop results scoring below this."),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show how each score was made.")
    ] = False,
    mmr: Annotated[
        float | None,
        typer.Option(
            "--mmr",
            metavar="LAMBDA",
            min=0.0,
            max=1.0,
            help="Diversify results with MMR: 1 = relevance only, lower = more diverse.",
        ),
    ] = None,
    rerank: RerankOption = None,
    candidates: Annotated[
        int | None,
        typer.Option(
            "--candidates",
            metavar="N",
            min=1,
            help="Candidates recalled for the reranker (at least 2 x k) [default: config, 50].",
        ),
    ] = None,
    min_relevance: Annotated[
        float | None,
        typer.Option(
            "--min-relevance",
            metavar="F",
            help="Drop hits the reranker scores below this; none left: 'No relevant knowledge "
            "found' [default: config].",
        ),
    ] = None,
    rewrite: Annotated[
        str | None,
        typer.Option(
            "--rewrite",
            metavar="MODE",
            help="Rewrite the query with rag.rewrite's chat model first: none, hyde, expand "
            "or both [default: config, none].",
        ),
    ] = None,
    stale: Annotated[
        str,
        typer.Option(
            "--stale",
            metavar="POLICY",
            help="Hits whose file changed or is gone since it was indexed: flag (marked), "
            "hide (left out, more hits fill in) or fail (exit 6).",
        ),
    ] = "flag",
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="table, json, jsonl, csv, md, or files (one path per line; a name holding "
            "a newline or control character is shell-quoted: $'a\\nb.md').",
        ),
    ] = "table",
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Same as --format json: an array of hits."),
    ] = False,
    null: NullOption = False,
) -> None:
    """Search the knowledge base; hits show path:line ($EDITOR +LINE path).

    Hits are files by default (each with its best chunk and how many chunks matched); --by
    chunk lists every matching chunk. Each hit says whether its file changed or went missing
    since it was indexed (--stale)."""

    query = words(query, "query", "give the words to look for, as in kb search 'reset password'")
    fmt = files_format(output_format(fmt, json_out, render.SEARCH_FORMATS), null)
    unit = _unit(by)
    options = SearchOptions(
        k=k,
        mode=mode,
        alpha=alpha,
        filter=search_filter(parse_filter_expressions(filter), in_),
        fusion=fusion,
        min_score=min_score,
        explain=explain,
        mmr=mmr,
        rerank=rerank,
        candidates=candidates,
        min_relevance=min_relevance,
        rewrite=rewrite,
        stale=stale_policy(stale),
    )
    kb = open_kb(ctx, create=False)
    try:
        hits = run_search(kb, query, options, by=unit)
        index = index_watermark(kb).as_json() if fmt in ("json", "jsonl") else None
        terms = kb.analyzer.query_terms(query)
        unindexed = _unindexed_folders(kb, in_) if not hits and in_ else []
        unknown = unknown_keys(kb.store, options.filter) if not hits and not unindexed else []
    finally:
        kb.close()
    if fmt != "table":
        render.search_output(hits, fmt, unit, explain, null, index)
    if not hits and unindexed:
        where = ", ".join(str(folder) for folder in unindexed)
        render.message(
            f"No relevant knowledge found: nothing is indexed under {where} (check the "
            f"path, or 'kb ingest {unindexed[0]}')."
        )
    elif not hits and unknown:
        names = ", ".join(repr(key) for key in unknown)
        render.message(
            f"No relevant knowledge found: no indexed chunk has the metadata key {names} "
            "(check the spelling; 'kb list --json' shows the keys in use)."
        )
    elif not hits:
        render.message(render.no_results_text(hits.results))
    elif fmt == "table":
        render.search_table(hits, terms, explain, unit)


def _unit(by: str) -> str:
    unit = by.strip().lower()
    if unit in ("files", "file"):
        return "file"
    if unit in ("chunks", "chunk"):
        return "chunk"
    raise typer.BadParameter(f"{by!r} is not file or chunk.", param_hint="'--by'")


def _unindexed_folders(kb: KnowledgeBase, folders: list[Path]) -> list[Path]:
    """The ``--in`` folders no indexed file lies under (a mistyped path finds nothing)."""

    return unindexed(kb.store, [(f, under_folders([resolve_source(f)])) for f in folders])

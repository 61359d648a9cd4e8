"""The ``kb`` command: parse options, call the library once, render.

Errors: every :class:`~kbcli.errors.KBError` is turned into one ``Error: ...`` line on stderr
and the exit code the error carries (1 failure, 2 usage, 3 database locked) in one place,
:class:`KBGroup.invoke`. ``--debug`` re-raises instead; other exceptions are bugs and keep their
traceback. Ctrl-C exits 130 without one.

Start-up: module-level imports are typer and the standard library only; the library, Rich and
anything heavy are imported inside the command that needs them.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

EXIT_INTERRUPTED = 130


FILTER_HELP = (
    "Metadata filter: key=value, key!=value, key=a,b (any of), key>3, key>=3, key<3, key<=3. "
    "Repeatable; all must hold."
)
FilterOption = Annotated[
    list[str] | None, typer.Option("--filter", "-f", metavar="EXPR", help=FILTER_HELP)
]
MetaOption = Annotated[
    list[str] | None,
    typer.Option("--meta", metavar="KEY=VALUE", help="Metadata key=value (repeatable)."),
]


@dataclass
class State:
    """Global options, kept on the Click context for the commands."""

    db: Path | None = None
    config: Path | None = None
    quiet: bool = False
    debug: bool = False


class _PlainCoercion:
    """Converts str, int, float and Path option values (and lists of them) without Pydantic.

    Typer coerces every non-flag value through a Pydantic ``TypeAdapter``; importing Pydantic
    and building the adapters costs a few hundred milliseconds per ``kb`` run. Our options only
    need these plain conversions, so each parameter gets one of these instead; a parameter of
    any other type (or a Typer without this hook) keeps Typer's own coercion.
    """

    SIMPLE = (str, int, float, Path, bool)
    TRUE = ("1", "true", "yes", "on", "y", "t")
    FALSE = ("0", "false", "no", "off", "n", "f")

    def __init__(self, kind: type, minimum: Any = None, maximum: Any = None):
        self.kind = kind
        self.minimum = minimum
        self.maximum = maximum

    @classmethod
    def install(cls, params: list[Any]) -> None:
        for param in params:
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is None or getattr(param, "_runtime_param", None) is not None:
                continue
            annotation = descriptor.annotation
            if getattr(annotation, "__origin__", None) is list:
                annotation = annotation.__args__[0]
            if annotation not in cls.SIMPLE:
                continue
            info = descriptor.parameter_info
            param._runtime_param = cls(annotation, info.min, info.max)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        if many:
            if isinstance(value, str):
                raise typer.BadParameter("Value must be an iterable.", ctx=ctx, param=param)
            return [self.convert(item, param, ctx) for item in value]
        return self.convert(value, param, ctx)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, bytes):
            value = os.fsdecode(value)
        if self.kind is str:
            return str(value)
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower()
            if word in self.TRUE or word in self.FALSE:
                return word in self.TRUE
            raise typer.BadParameter(f"{value!r} is not a valid boolean.", ctx=ctx, param=param)
        if self.kind is Path:
            return value if isinstance(value, Path) else Path(value)
        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            name = "integer" if self.kind is int else "number"
            raise typer.BadParameter(
                f"{value!r} is not a valid {name}.", ctx=ctx, param=param
            ) from None
        low, high = self.minimum, self.maximum
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = " and ".join(
                part
                for part in (
                    f"at least {low}" if low is not None else "",
                    f"at most {high}" if high is not None else "",
                )
                if part
            )
            raise typer.BadParameter(f"{value} must be {bounds}.", ctx=ctx, param=param)
        return number


class KBGroup(TyperGroup):
    """The one place that turns library errors into a message and an exit code."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _PlainCoercion.install(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        from .errors import KBError

        try:
            return super().invoke(ctx)
        except KBError as exc:
            if ctx.params.get("debug"):
                raise
            from . import render

            render.error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if ctx.params.get("debug"):
                raise
            raise typer.Exit(EXIT_INTERRUPTED) from None


class KBCommand(TyperCommand):
    """A command whose options are converted without Pydantic (see :class:`_PlainCoercion`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _PlainCoercion.install(self.get_params(ctx))
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="kb",
    cls=KBGroup,
    help="kb: a knowledge base on SQLite with keyword, semantic and hybrid search.",
    epilog=('\b\nExample:\n  kb ingest ~/notes\n  kb search "reset password" --mode keyword -k 5'),
    rich_markup_mode=None,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _example(*lines: str) -> str:
    # "\b" keeps Click from re-wrapping the example lines.
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"kb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            metavar="PATH",
            dir_okay=False,
            help="Knowledge database file [default: paths.knowledge_db in jianmu.yaml, or $KB_DB].",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="PATH",
            help="Configuration file [default: $KB_CONFIG, ./jianmu.yaml, ~/.config/kbcli/].",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "-q", "--quiet", help="No notes, warnings, progress or summaries; errors only."
        ),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    """kb: a knowledge base on SQLite with keyword, semantic and hybrid search."""
    ctx.obj = State(db=db, config=config, quiet=quiet, debug=debug)


def _state(ctx: typer.Context) -> State:
    obj = ctx.find_object(State)
    return obj if obj is not None else State()


def _open(ctx: typer.Context, *, create: bool, busy_timeout: float | None = None) -> Any:
    """The knowledge base named by --db / config. Read-only commands do not create one."""
    from .config import load_config
    from .errors import ConfigError
    from .pipeline import KnowledgeBase

    state = _state(ctx)
    config = load_config(state.config)
    db = Path(state.db or config.paths.knowledge_db).expanduser()

    def note(text: str) -> None:
        if not state.quiet:
            from . import render

            render.message(text)

    kb = KnowledgeBase.from_config(
        config, db=db, on_note=note, busy_timeout=busy_timeout, create=create
    )
    from .protocols import DocumentCatalog

    if not isinstance(kb.store, DocumentCatalog):
        kb.close()
        raise ConfigError(
            f"store.backend {config.store.backend!r} is not a document catalog (see "
            "kbcli.protocols.DocumentCatalog): kb needs one to list, delete and ingest"
        )
    return kb


def _resolve_source(path: Path) -> str:
    """A source path as ingest records it: absolute, symlinks resolved."""
    return str(path.expanduser().resolve())


# --- commands ---------------------------------------------------------------------------------


@app.command(
    cls=KBCommand,
    epilog=_example(
        "kb ingest ~/notes docs/manual.pdf --ext .md,.pdf --meta project=apollo",
        "kb ingest ~/notes --prune --json",
    ),
)
def ingest(
    ctx: typer.Context,
    paths: Annotated[list[Path], typer.Argument(metavar="PATH...", help="Files or folders.")],
    ext: Annotated[
        str | None,
        typer.Option(
            "--ext",
            metavar=".md,.pdf",
            help="Comma-separated extensions to index [default: .md,.txt,.pdf,.docx].",
        ),
    ] = None,
    recursive: Annotated[
        bool, typer.Option("--recursive/--no-recursive", help="Descend into sub-folders.")
    ] = True,
    meta: MetaOption = None,
    prune: Annotated[
        bool, typer.Option("--prune", help="Remove indexed files that no longer exist under PATH.")
    ] = False,
    include_hidden: Annotated[
        bool, typer.Option("--include-hidden", help="Also index hidden files and folders.")
    ] = False,
    rebuild: Annotated[
        bool,
        typer.Option("--rebuild", help="Re-read and re-embed every file, even unchanged ones."),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            metavar="SECONDS",
            min=0,
            help="How long to wait while another kb process writes to the database.",
        ),
    ] = 60.0,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON object.")
    ] = False,
) -> None:
    """Index files and folders (only new and changed files are read again)."""
    from . import render
    from .filters import parse_meta
    from .sync import DEFAULT_EXTENSIONS, parse_extensions, sync

    state = _state(ctx)
    extensions = parse_extensions(ext) if ext is not None else DEFAULT_EXTENSIONS
    metadata = parse_meta(meta) or None
    kb = _open(ctx, create=True, busy_timeout=wait)
    try:
        show_bar = render.stderr_is_terminal() and not state.quiet
        with render.progress(show_bar) as on_progress:
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
            )
    finally:
        kb.close()
    for failure in report.failed:
        reason = (
            failure.error if failure.path in failure.error else f"{failure.path}: {failure.error}"
        )
        render.message(f"Failed: {reason}")
    if not state.quiet:
        for text in report.warnings:
            render.warning(text)
    if json_out:
        render.print_json(report.to_dict())
    elif not state.quiet:
        for line in render.ingest_summary(report):
            render.result(line)
    if report.failed:
        raise typer.Exit(1)


@app.command(
    cls=KBCommand,
    epilog=_example(
        'kb add "The VPN gateway is vpn.example.com" --meta topic=network',
        "cat note.txt | kb add - --id note-1",
    ),
)
def add(
    ctx: typer.Context,
    text: Annotated[
        str, typer.Argument(metavar="TEXT", help="The text to store; '-' reads standard input.")
    ],
    meta: MetaOption = None,
    id: Annotated[
        str | None,
        typer.Option("--id", help="Store under this id (replacing it) [default: a random id]."),
    ] = None,
) -> None:
    """Store one piece of text as a single chunk and print its id."""
    from . import render
    from .errors import InvalidOptionError
    from .filters import parse_meta

    metadata = parse_meta(meta)
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise InvalidOptionError("Nothing to add: the text is empty")
    kb = _open(ctx, create=True)
    try:
        new_id = kb.add(text, metadata, id=id)
    finally:
        kb.close()
    render.result(new_id)


@app.command(
    cls=KBCommand,
    epilog=_example(
        'kb search "reset password" --mode keyword -k 5',
        'kb search "quarterly revenue" --filter year>=2023 --filter lang=en,de --json',
        'kb search "reset password" --rerank --candidates 50 --min-relevance 0.3',
    ),
)
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to look for.")],
    k: Annotated[int, typer.Option("-k", "--k", metavar="N", min=1, help="How many results.")] = 5,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            "-m",
            metavar="MODE",
            help="keyword, semantic or hybrid (aliases: sparse, vector, dense).",
        ),
    ] = "hybrid",
    filter: FilterOption = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            "--alpha",
            metavar="F",
            min=0.0,
            max=1.0,
            help="Weight of the semantic route in weighted hybrid fusion [default: config].",
        ),
    ] = None,
    fusion: Annotated[
        str, typer.Option("--fusion", metavar="NAME", help="Hybrid fusion: weighted or rrf.")
    ] = "weighted",
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
    rerank: Annotated[
        bool | None,
        typer.Option(
            "--rerank/--no-rerank",
            help="Rerank the candidates with rag.rerank [default: on when configured].",
        ),
    ] = None,
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
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print a JSON array of {id, score, text, metadata}."),
    ] = False,
) -> None:
    """Search the knowledge base."""
    from . import render
    from .filters import parse_filter_expressions
    from .types import SearchOptions

    options = SearchOptions(
        k=k,
        mode=mode,
        alpha=alpha,
        filter=parse_filter_expressions(filter),
        fusion=fusion,
        min_score=min_score,
        explain=explain,
        mmr=mmr,
        rerank=rerank,
        candidates=candidates,
        min_relevance=min_relevance,
        rewrite=rewrite,
    )
    kb = _open(ctx, create=False)
    try:
        results = kb.search_with(query, options)
        terms = kb.analyzer.query_terms(query)
    finally:
        kb.close()
    if json_out:
        render.print_json(render.search_json(results, explain))
    if not results:
        render.message(render.no_results_text(results))
    elif not json_out:
        render.search_table(results, terms, explain)


@app.command(
    cls=KBCommand,
    epilog=_example(
        "kb delete 3f2a9c0d1e8b4a7f9c6d5e4b3a2f1e0d",
        "kb delete --source notes/old-plan.md",
    ),
)
def delete(
    ctx: typer.Context,
    ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="[ID]...", help="Chunk ids (see 'kb list')."),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option("--source", metavar="PATH", help="Delete every chunk of this file."),
    ] = None,
) -> None:
    """Delete chunks by id, or every chunk of a source file."""
    from . import render
    from .errors import NotFoundError

    if not ids and source is None:
        render.error("Give chunk ids or --source PATH (see 'kb list' for ids)")
        raise typer.Exit(2)
    kb = _open(ctx, create=False)
    missing: list[str] = []
    deleted = 0
    try:
        if ids:
            wanted = list(dict.fromkeys(ids))
            known = {doc.id for doc in kb.store.get(wanted)}
            missing = [i for i in wanted if i not in known]
            deleted += kb.store.remove([i for i in wanted if i in known])
        if source is not None:
            path = _resolve_source(source)
            removed = kb.store.delete_source(path)
            if not removed:
                missing.append(f"--source {path}")
            deleted += removed
    finally:
        kb.close()
    if deleted or not missing:
        render.result(f"Deleted {deleted} chunk{'' if deleted == 1 else 's'}.")
    if missing:
        raise NotFoundError(
            f"Nothing indexed under {', '.join(missing)}: see 'kb list' for ids and sources"
        )


@app.command(
    cls=KBCommand,
    name="list",
    epilog=_example(
        "kb list --source notes/setup.md",
        "kb list --filter lang=en --limit 50 --json",
    ),
)
def list_(
    ctx: typer.Context,
    source: Annotated[
        Path | None,
        typer.Option("--source", metavar="PATH", help="Only chunks of this file."),
    ] = None,
    filter: FilterOption = None,
    limit: Annotated[
        int,
        typer.Option("--limit", "-n", metavar="N", min=0, help="At most this many (0: all)."),
    ] = 20,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print a JSON array of {id, text, metadata, created_at}."),
    ] = False,
) -> None:
    """List stored chunks, oldest first."""
    from . import render
    from .filters import parse_filter_expressions

    where = parse_filter_expressions(filter)
    kb = _open(ctx, create=False)
    try:
        docs = list(
            kb.store.iter_documents(
                where,
                source=_resolve_source(source) if source is not None else None,
                limit=limit or None,
            )
        )
    finally:
        kb.close()
    if json_out:
        render.print_json(render.documents_json(docs))
    if not docs:
        render.message("No chunks found.")
    elif not json_out:
        render.documents_table(docs)


@app.command(cls=KBCommand, epilog=_example("kb stats", "kb --db team.db stats --json"))
def stats(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Show what the index holds: chunks, sources, size, embedder, analyzer, last ingest."""
    from . import render

    kb = _open(ctx, create=False)
    try:
        figures = kb.store.stats()
    finally:
        kb.close()
    if json_out:
        render.print_json(figures)
    else:
        render.stats_table(figures)


@app.command(
    "eval",
    cls=KBCommand,
    epilog=_example(
        "kb eval ../shared/eval/scifact --split train --mode keyword",
        "kb eval ./my-beir-set --mode hybrid --db /tmp/eval.db --json",
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
        int, typer.Option("-k", "--k", metavar="N", min=1, help="Cut-off of nDCG, MRR, recall.")
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
    """Measure retrieval quality on a BEIR collection: nDCG, recall, MRR and latency.

    Each document's title and text go through the normal ingest path (chunked like any file);
    documents are ranked by their best chunk; trec_eval conventions.
    """
    from . import render
    from .config import load_config
    from .evaluation import evaluate

    state = _state(ctx)
    extra = {key: v for key, v in (("alpha", alpha), ("fusion", fusion)) if v is not None}
    with render.progress(render.stderr_is_terminal() and not state.quiet) as bar:
        result = evaluate(
            dataset,
            split=split,
            mode=mode,
            k=k,
            db=db,
            config=load_config(state.config),
            progress=bar,
            search_options=extra,
        )
    if json_out:
        render.print_json(result)
    else:
        render.eval_summary(result)


@app.command(
    cls=KBCommand,
    epilog=_example(
        "kb mcp --filter team=ops",
        "kb mcp --http 127.0.0.1:8765 --tokens tokens.yaml",
    ),
)
def mcp(
    ctx: typer.Context,
    filter: FilterOption = None,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            metavar="HOST:PORT",
            help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.",
        ),
    ] = None,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            metavar="FILE",
            help="YAML file mapping bearer tokens to scopes (required with --http).",
        ),
    ] = None,
) -> None:
    """Serve the knowledge base to agents over MCP: knowledge_search, knowledge_get and
    knowledge_stats, limited to the --filter scope (and, over HTTP, each token's scope)."""
    from .errors import InvalidOptionError, require
    from .filters import parse_filter_expressions

    require("mcp", extra="mcp", feature="kb mcp")
    from .mcp_server import KnowledgeMCP, load_tokens, parse_host_port

    scope = parse_filter_expressions(filter)
    if http is None and tokens is not None:
        raise InvalidOptionError("--tokens goes with --http (stdio has no tokens)")
    address = parse_host_port(http) if http is not None else None
    if address is not None and tokens is None:
        raise InvalidOptionError(
            "kb mcp --http needs --tokens FILE: every HTTP request must carry a bearer token"
        )
    identities = load_tokens(tokens) if tokens is not None else {}
    kb = _open(ctx, create=False)
    try:
        server = KnowledgeMCP(kb, scope)
        if address is None:
            server.run_stdio()
        else:
            server.run_http(*address, identities)
    finally:
        kb.close()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``kb`` console script."""
    try:
        app(args=argv, prog_name="kb")
    except KeyboardInterrupt:
        # Interrupted outside a command (while parsing or importing).
        sys.exit(EXIT_INTERRUPTED)

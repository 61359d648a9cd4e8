"""The ``kb`` command: parse options, call the library once, render.

Errors: every :class:`~kbcli.errors.KBError` is turned into one ``Error: ...`` line on stderr
and the exit code the error carries (1 failure, 2 usage, 3 database locked) in one place,
:class:`KBGroup.invoke`. ``--debug`` re-raises instead; other exceptions are bugs and keep their
traceback. Ctrl-C exits 130 without one.

Start-up: module-level imports are typer and the standard library only; the library, Rich and
anything heavy are imported inside the command that needs them.
"""

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from .registry import EMBEDDER_NOTES, STORES  # names only: no backend is imported

EXIT_INTERRUPTED = 130
MAX_K = 1_000_000  # kbcli.types.MAX_K (not imported: kb --help stays light)
MAX_INT64 = 2**63 - 1  # SQLite's integers


FILTER_HELP = (
    "Metadata filter: key=value, key!=value, key=a,b (any of), key>3, key>=3, key<3, key<=3, "
    'key="exact text" (a value starting with = ! < > must be quoted). Repeatable; all must hold.'
)
FilterOption = Annotated[
    list[str] | None, typer.Option("--filter", "-f", metavar="EXPR", help=FILTER_HELP)
]
NullOption = Annotated[
    bool,
    typer.Option(
        "-0",
        "--null",
        help="File names (--format files) each ended by a NUL byte instead of a newline, "
        "exactly as the file system spells them (xargs -0).",
    ),
]
MetaOption = Annotated[
    list[str] | None,
    typer.Option(
        "--meta",
        metavar="KEY=VALUE",
        help="Metadata key=value (repeatable). Numbers (2024, 1.5) and true/false are stored "
        "typed, so --filter \"year>=2024\" works; quote to keep text: 'code=\"2024\"'.",
    ),
]


@dataclass
class State:
    """Global options, kept on the Click context for the commands."""

    db: Path | None = None
    config: Path | None = None
    quiet: bool = False
    debug: bool = False
    store: str | None = None


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
        if self.kind is float and not math.isfinite(number):
            # nan passes every range check (its comparisons are false) and inf overflows timers
            from .errors import InvalidOptionError

            name = max(param.opts, key=len) if param.opts else param.name
            raise InvalidOptionError(f"{name} must be a finite number, got {value!r}")
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


# Global options accepted after the command too: flags, and options taking a value.
GLOBAL_FLAGS = ("-q", "--quiet", "--debug")
GLOBAL_VALUES = ("--db", "--config", "--store")
# Commands with an option of the same name that means something else there.
OWN_OPTIONS = {"eval": ("--db",)}


def hoist_global_options(args: list[str], commands: Any) -> list[str]:
    """Move global options written after the command to before it (``kb search x -q`` is
    ``kb -q search x``), and a ``--json`` written before the command to after it. Nothing
    after ``--`` moves; a command's own option of the same name (``kb eval --db``) stays."""
    index, i = None, 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg in GLOBAL_VALUES:
            i += 2
            continue
        if not arg.startswith("-") and arg in commands:
            index = i
            break
        i += 1
    if index is None:
        return args
    before, name, after = list(args[:index]), args[index], list(args[index + 1 :])
    moved_json = [a for a in before if a == "--json"]
    before = [a for a in before if a != "--json"]
    own = OWN_OPTIONS.get(name, ())
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(after):
        arg = after[i]
        if arg == "--":
            rest.extend(after[i:])
            break
        option = arg.split("=", 1)[0]
        if arg in GLOBAL_FLAGS and arg not in own:
            hoisted.append(arg)
        elif option in GLOBAL_VALUES and option not in own:
            if "=" in arg:
                hoisted.append(arg)
            else:
                hoisted.extend(after[i : i + 2])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return before + hoisted + [name] + moved_json + rest


class KBGroup(TyperGroup):
    """The one place that turns library errors into a message and an exit code."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _PlainCoercion.install(self.get_params(ctx))
        return super().parse_args(ctx, hoist_global_options(list(args), self.commands))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its whole one-line description (Click cuts them at 45 chars)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            text = command.short_help or (command.help or "").strip().split("\n\n")[0]
            rows.append((name, " ".join(text.split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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
        except Exception as exc:
            message = _environment_error(exc)
            if message is None or ctx.params.get("debug"):
                raise
            from . import render

            render.error(message)
            raise typer.Exit(1) from None


def _environment_error(exc: BaseException) -> str | None:
    """One line for errors of the machine rather than of kb (disk full, I/O, permissions),
    or None for anything else (a bug keeps its traceback)."""
    import sqlite3

    if isinstance(exc, OSError):
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return f"{exc.strerror or exc}{where} (run again with --debug for details)"
    if isinstance(exc, sqlite3.OperationalError):
        return f"database error: {' '.join(str(exc).split())} (run again with --debug for details)"
    return None


def _plain_arguments(params: list[Any]) -> None:
    """Show each argument by its metavar alone (``QUERY``, ``PATH...``), not Typer's
    ``{QUERY}`` and ``<list[Path]>`` type names."""
    from typer.core import TyperArgument

    for param in params:
        if not isinstance(param, TyperArgument) or param.metavar is None:
            continue
        metavar = param.metavar

        def usage(metavar: str = metavar) -> str:
            return metavar

        def record(ctx: Any, param: Any = param, metavar: str = metavar) -> tuple[str, str]:
            return metavar, (param.help or "") + ("" if param.required else "  [optional]")

        param._usage_display_name = usage
        param.get_help_record = record


class KBCommand(TyperCommand):
    """A command whose options are converted without Pydantic (see :class:`_PlainCoercion`)
    and whose arguments show their metavars."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        _PlainCoercion.install(params)
        _plain_arguments(params)
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="kb",
    cls=KBGroup,
    help="kb: a knowledge base on SQLite with keyword, semantic and hybrid search.",
    epilog=(
        '\b\nExample:\n  kb ingest ~/notes --embedder local\n  kb search "reset password"\n'
        "\b\nEmbedders (kb ingest --embedder NAME, or $KB_EMBEDDER; the index keeps its own):\n"
        + "\n".join(f"  {name:<7} {note}" for name, note in EMBEDDER_NOTES.items())
    ),
    rich_markup_mode=None,
    add_completion=True,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 160},
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
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="NAME",
            help=f"Store backend: {', '.join(STORES)} [default: store.backend].",
        ),
    ] = None,
) -> None:
    """kb: a knowledge base on SQLite with keyword, semantic and hybrid search."""
    from .config import use_config_file

    use_config_file(config)  # defaults read deep in the library come from this file too
    ctx.obj = State(db=db, config=config, quiet=quiet, debug=debug, store=store)


def _state(ctx: typer.Context) -> State:
    obj = ctx.find_object(State)
    return obj if obj is not None else State()


def _load_config(state: State) -> Any:
    """The configuration, with ``--store`` overriding ``store.backend`` (settings are kept
    when it names the configured backend)."""
    from .config import load_config, with_store

    config = load_config(state.config)
    return with_store(config, state.store) if state.store else config


def _open(
    ctx: typer.Context,
    *,
    create: bool,
    busy_timeout: float | None = None,
    embedder: str | None = None,
) -> Any:
    """The knowledge base named by --db / config. Read-only commands do not create one.
    ``embedder``: ``kb ingest --embedder``, over ``$KB_EMBEDDER`` and the file."""
    from .errors import ConfigError
    from .pipeline import KnowledgeBase

    state = _state(ctx)
    config = _load_config(state)
    if embedder is not None:
        from .config import with_embedder

        config = with_embedder(config, embedder)
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
    """A source path as ingest records it: absolute, symlinks resolved, a name that is not
    UTF-8 escaped (:func:`kbcli.pathnames.source_name`)."""
    from .pathnames import source_name, source_path

    if "\0" in str(path):
        from .errors import InvalidOptionError

        raise InvalidOptionError(f"The path {str(path)[:80]!r} contains a NUL character")
    # the escaped form as printed by kb (bad\xff.md) names the same file as the raw bytes
    return source_name(Path(source_path(str(path))).expanduser().resolve())


def _source_candidates(path: Path) -> list[str]:
    """The paths ingest may have recorded ``path`` under, most likely first: fully resolved
    (a file named on the command line), its folder resolved but not the file itself (a file
    reached through a link with --follow-symlinks), and as written."""
    from .pathnames import source_name

    path = path.expanduser()
    absolute = Path(os.path.abspath(path))
    found = [
        _resolve_source(path),
        source_name(absolute.parent.resolve() / absolute.name),
        source_name(absolute),
    ]
    return list(dict.fromkeys(found))


# --- commands ---------------------------------------------------------------------------------


@app.command(
    cls=KBCommand,
    epilog=_example(
        "kb ingest ~/notes docs/manual.pdf --ext .md,.pdf --meta project=apollo",
        "kb ingest ~/notes --prune --json",
        "kb ingest ~/notes --no-prune",
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
            help="Comma-separated extensions to index [default: .md,.txt,.pdf,.docx]; "
            "images (.png,.jpg,.tif,...) are read by OCR when named here.",
        ),
    ] = None,
    recursive: Annotated[
        bool, typer.Option("--recursive/--no-recursive", help="Descend into sub-folders.")
    ] = True,
    meta: MetaOption = None,
    prune: Annotated[
        bool | None,
        typer.Option(
            "--prune/--no-prune",
            help="--prune: also remove indexed files under PATH that still exist but are no "
            "longer picked (--ext, .kbignore, hidden); --no-prune: keep even those deleted "
            "[default: remove the deleted ones].",
        ),
    ] = None,
    allow_mass_delete: Annotated[
        bool,
        typer.Option(
            "--allow-mass-delete",
            help="Let a run empty a folder's index or remove more than half of its files "
            "(refused otherwise: an unmounted or emptied folder looks the same).",
        ),
    ] = False,
    follow_symlinks: Annotated[
        bool,
        typer.Option(
            "--follow-symlinks",
            help="Follow symbolic links that stay inside PATH (never outside; each file once).",
        ),
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
        bool, typer.Option("--json", help="Print the report as one JSON line.")
    ] = False,
    embedder: Annotated[
        str | None,
        typer.Option(
            "--embedder",
            metavar="NAME",
            help=f"Embed with NAME: {', '.join(EMBEDDER_NOTES)} (kb --help says what each is); "
            "recorded in the index, so later commands use it [default: $KB_EMBEDDER, "
            "rag.embedding.provider, the index's own, else by API keys, else simple].",
        ),
    ] = None,
) -> None:
    """Index files and folders (only new and changed files are read again; files deleted
    from PATH leave the index). Files are searchable by keyword as soon as they are written;
    their vectors follow in the same run (or the next one, if it was stopped)."""
    from . import render
    from .filters import parse_meta
    from .signals import exit_code, interrupt_on_termination, signal_name
    from .sync import DEFAULT_EXTENSIONS, SyncReport, parse_extensions, sync

    state = _state(ctx)
    extensions = parse_extensions(ext) if ext is not None else DEFAULT_EXTENSIONS
    metadata = parse_meta(meta) or None
    from .errors import KBError
    from .pipeline import LazyEmbedder
    from .sync import SyncInterrupted

    try:
        # SIGTERM and SIGHUP (cron, systemd, timeout, a closed terminal) stop it as Ctrl-C does
        with interrupt_on_termination():
            kb = _open(ctx, create=True, busy_timeout=wait, embedder=embedder)
            try:
                terminal = render.stderr_is_terminal()
                show_bar = terminal and not state.quiet
                if show_bar and isinstance(kb.embedder, LazyEmbedder):
                    _ = kb.embedder.resolved  # its note (if any) goes out before the bar starts
                lines = not terminal and not state.quiet
                with render.progress(show_bar, lines=lines) as on_progress:
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
        partial = getattr(exc, "report", None)
        if json_out and partial is not None:
            render.print_json({**partial.to_dict(), "error": str(exc)}, one_line=True)
        raise
    for failure in report.failed:
        reason = (
            failure.error if failure.path in failure.error else f"{failure.path}: {failure.error}"
        )
        render.message(f"Failed: {reason}")
    if not state.quiet:
        for text in report.warnings:
            render.warning(text)
    if json_out:
        render.print_json(report.to_dict(), one_line=True)
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
        'kb search "revenue" --filter "year>=2023" --filter "lang=en,de" --json',
        'kb search \'"reset link" password -sms\' --by chunk --format csv',
        'kb search "install" --in docs --format files',
        'kb search -- "-v flag"',
        'kb search "reset password" --rerank --candidates 50 --min-relevance 0.3',
    ),
)
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
    chunk lists every matching chunk."""
    from . import render
    from .filters import parse_filter_expressions
    from .hints import unknown_keys
    from .query import search as run_search
    from .types import SearchOptions

    fmt = _files_format(_format(fmt, json_out, render.SEARCH_FORMATS), null)
    unit = _unit(by)
    options = SearchOptions(
        k=k,
        mode=mode,
        alpha=alpha,
        filter=_search_filter(parse_filter_expressions(filter), in_),
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
        hits = run_search(kb, query, options, by=unit)
        terms = kb.analyzer.query_terms(query)
        unindexed = _unindexed_folders(kb, in_) if not hits and in_ else []
        unknown = unknown_keys(kb.store, options.filter) if not hits and not unindexed else []
    finally:
        kb.close()
    if fmt != "table":
        render.search_output(hits, fmt, unit, explain, null)
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


EXIT_NO_KNOWLEDGE = 5  # kb ask refused: no evidence good enough (no request was made)
ASK_FORMATS = ("text", "md", "json")


@app.command(
    cls=KBCommand,
    epilog=_example(
        'kb ask "How do I reset the password?"',
        'kb ask "How do I install the tool?" --in notes --json',
        'kb ask "What does the manual say about the password?" --format md --strict',
        'kb ask "How do I reset the password?" --mode keyword -k 4 --show-prompt',
    ),
)
def ask(
    ctx: typer.Context,
    question: Annotated[
        str, typer.Argument(metavar="QUESTION", help="The question, in any language.")
    ],
    k: Annotated[
        int,
        typer.Option(
            "-k", "--k", metavar="N", min=1, max=MAX_K, help="Passages searched for evidence."
        ),
    ] = 8,
    mode: Annotated[
        str, typer.Option("--mode", "-m", metavar="MODE", help="keyword, semantic or hybrid.")
    ] = "hybrid",
    in_: Annotated[
        list[Path] | None,
        typer.Option(
            "--in", metavar="DIR", help="Only files under this folder (repeatable: any of them)."
        ),
    ] = None,
    filter: FilterOption = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            "--alpha", metavar="F", min=0.0, max=1.0, help="Hybrid dense weight [default: config]."
        ),
    ] = None,
    fusion: Annotated[
        str, typer.Option("--fusion", metavar="NAME", help="Hybrid fusion: weighted or rrf.")
    ] = "weighted",
    rerank: Annotated[
        bool | None,
        typer.Option(
            "--rerank/--no-rerank",
            help="Rerank the candidates with rag.rerank [default: on when configured].",
        ),
    ] = None,
    candidates: Annotated[
        int | None,
        typer.Option("--candidates", metavar="N", min=1, help="Candidates for the reranker."),
    ] = None,
    min_relevance: Annotated[
        float | None,
        typer.Option(
            "--min-relevance",
            metavar="F",
            help="With a reranker: the evidence floor (its relevance) [default: config].",
        ),
    ] = None,
    min_coverage: Annotated[
        float | None,
        typer.Option(
            "--min-coverage",
            metavar="F",
            min=0.0,
            max=1.0,
            help="Without min_relevance: the share of the question's terms (weighted by "
            "rarity) a passage must hold [default: rag.answer.min_coverage, 0.3].",
        ),
    ] = None,
    rewrite: Annotated[
        str | None,
        typer.Option(
            "--rewrite", metavar="MODE", help="Query rewriting: none, hyde, expand or both."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", metavar="NAME", help="The chat model [default: rag.answer.model]."),
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option(
            "--prompt-file",
            metavar="FILE",
            dir_okay=False,
            help="The instruction to send instead of the built-in one; a file holding "
            "{evidence} and {question} is the whole prompt.",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="An answer citing none of the sources is a refusal (exit 5)."
        ),
    ] = False,
    stream: Annotated[
        bool | None,
        typer.Option(
            "--stream/--no-stream",
            help="Print the answer as it arrives [default: on a terminal, text format].",
        ),
    ] = None,
    show_prompt: Annotated[
        bool,
        typer.Option("--show-prompt", help="Print the prompt that would be sent; send nothing."),
    ] = False,
    fmt: Annotated[
        str, typer.Option("--format", metavar="FORMAT", help="text, md or json.")
    ] = "text",
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One object: {answer, citations, unknown_citations, refused, reason, model}.",
        ),
    ] = False,
) -> None:
    """Answer a question from the knowledge base, citing its sources, or refuse.

    The best passages (searched as kb search does) go to a chat model (rag.answer: any
    OpenAI-compatible server, OPENAI_API_KEY / OPENAI_BASE_URL, or Gemini) told to answer only
    from them and cite them as [n]; the sources it cited follow as [n] path:line. A citation
    naming no source is flagged. When no passage is good enough, kb says "No relevant
    knowledge found" and exits 5 without calling the model."""
    from . import render
    from .filters import parse_filter_expressions

    if json_out and fmt.strip().lower() not in ("text", "json"):
        raise typer.BadParameter("--json is --format json: give one of them", param_hint="'--json'")
    fmt = _format("json" if json_out else fmt, False, ASK_FORMATS)
    if stream and (fmt == "json" or strict):
        raise typer.BadParameter(
            "--json and --strict need the whole answer first: drop --stream",
            param_hint="'--stream'",
        )
    if stream is None:
        stream = fmt == "text" and not strict and not show_prompt and sys.stdout.isatty()
    prompt = _read_prompt(prompt_file) if prompt_file is not None else None
    where = _search_filter(parse_filter_expressions(filter), in_)
    streamed: list[str] = []

    def show(piece: str) -> None:
        streamed.append(piece)
        sys.stdout.write(piece)
        sys.stdout.flush()

    kb = _open(ctx, create=False)
    try:
        answer = kb.ask(
            question,
            k,
            mode,
            where,
            model=model,
            prompt=prompt,
            strict=strict,
            min_coverage=min_coverage,
            on_text=show if stream else None,
            dry_run=show_prompt,
            alpha=alpha,
            fusion=fusion,
            rerank=rerank,
            candidates=candidates,
            min_relevance=min_relevance,
            rewrite=rewrite,
        )
    except BaseException:
        if streamed:  # end the half-shown answer's line before the error (or Ctrl-C) follows
            sys.stdout.write("\n")
            sys.stdout.flush()
        raise
    finally:
        kb.close()
    if fmt == "json" and not show_prompt:
        render.print_json(answer.to_dict())
    elif show_prompt and not answer.refused:
        render.prompt_output(answer, as_json=fmt == "json")
    elif not answer.refused:
        render.answer_output(answer, fmt, streamed=bool(streamed))
    if answer.refused:
        render.message(answer.message)
        raise typer.Exit(EXIT_NO_KNOWLEDGE)


def _read_prompt(path: Path) -> str:
    from .errors import InvalidOptionError

    try:
        return path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InvalidOptionError(f"Cannot read --prompt-file {path}: {reason}") from None


def _format(fmt: str, json_out: bool, allowed: tuple[str, ...]) -> str:
    """The output format: ``--json`` is ``--format json``."""
    fmt = fmt.strip().lower()
    if fmt not in allowed:
        raise typer.BadParameter(
            f"{fmt!r} is not one of {', '.join(allowed)}.", param_hint="'--format'"
        )
    if json_out:
        if fmt not in ("table", "json"):
            raise typer.BadParameter(
                "--json is --format json: give one of them", param_hint="'--json'"
            )
        return "json"
    return fmt


def _files_format(fmt: str, null: bool) -> str:
    """``-0`` is ``--format files`` with NUL bytes between the names."""
    if not null or fmt == "files":
        return fmt
    if fmt == "table":
        return "files"
    from .errors import InvalidOptionError

    raise InvalidOptionError(f"-0 prints file names (--format files), not {fmt}: drop one")


def _unit(by: str) -> str:
    unit = by.strip().lower()
    if unit in ("files", "file"):
        return "file"
    if unit in ("chunks", "chunk"):
        return "chunk"
    raise typer.BadParameter(f"{by!r} is not file or chunk.", param_hint="'--by'")


def _unindexed_folders(kb: Any, folders: list[Path]) -> list[Path]:
    """The ``--in`` folders no indexed file lies under (a mistyped path finds nothing)."""
    from .filters import under_folders
    from .hints import unindexed

    return unindexed(kb.store, [(f, under_folders([_resolve_source(f)])) for f in folders])


def _search_filter(where: dict[str, Any] | None, folders: list[Path] | None) -> Any:
    """The ``--filter`` expressions (``source`` values resolved as paths too) ANDed with the
    ``--in`` folders."""
    from .errors import InvalidOptionError
    from .filters import MAX_FILTER_CONDITIONS, under_folders, validate_filter, with_source_paths

    where = with_source_paths(where, lambda value: _resolve_source(Path(value)))
    scope = under_folders([_resolve_source(folder) for folder in folders or []])
    distinct = len(scope.get("$or", [scope])) if scope else 0
    if distinct > MAX_FILTER_CONDITIONS:
        raise InvalidOptionError(
            f"--in was given {distinct} folders (none inside another): at most "
            f"{MAX_FILTER_CONDITIONS}; give the folders that hold them instead"
        )
    parts = [part for part in (where, scope) if part]
    if not parts:
        return None
    return validate_filter(parts[0] if len(parts) == 1 else {"$and": parts})


@app.command(
    cls=KBCommand,
    epilog=_example(
        "kb delete 3f2a9c0d1e8b4a7f9c6d5e4b3a2f1e0d",
        "kb delete --source notes/old-plan.md",
        "kb delete --source notes/archive --yes",
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
    from . import render
    from .errors import NotFoundError

    if not ids and source is None:
        render.error("Give chunk ids or --source PATH (see 'kb list' for ids)")
        raise typer.Exit(2)
    kb = _open(ctx, create=False)
    missing: list[str] = []
    deleted = 0
    files = 0
    try:
        if ids:
            wanted = list(dict.fromkeys(ids))
            known = {doc.id for doc in kb.store.get(wanted)}
            missing = [i for i in wanted if i not in known]
            deleted += kb.store.remove([i for i in wanted if i in known])
        if source is not None:
            candidates = _source_candidates(source)
            removed = 0
            for path in candidates:
                removed = kb.store.delete_source(path)
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
                    with kb.store.transaction():
                        for name, _count in under:
                            deleted += kb.store.delete_source(name)
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


def _sources_under(kb: Any, folder: str) -> list[tuple[str, int]]:
    """Indexed sources below ``folder`` (an absolute path), with their chunk counts."""
    prefix = folder if folder.endswith(os.sep) else folder + os.sep
    return [(name, count) for name, count in kb.store.sources() if name.startswith(prefix)]


def _confirm_folder(folder: str, under: list[tuple[str, int]]) -> bool:
    chunks = sum(count for _, count in under)
    return typer.confirm(
        f"Delete {len(under)} file{'' if len(under) == 1 else 's'} ({chunks} chunk"
        f"{'' if chunks == 1 else 's'}) under {folder}?",
        default=False,
        err=True,
    )


@app.command(
    cls=KBCommand,
    epilog=_example(
        "kb get docs/guide.md",
        "kb get docs/guide.md:40:10",
        "kb get 3f2a9c0d1e8b4a7f9c6d5e4b3a2f1e0d",
    ),
)
def get(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="PATH[:LINE[:COUNT]]|ID",
            help="An indexed file (optionally from LINE, COUNT lines) or a chunk id.",
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show a file's indexed text with line numbers, or one chunk by id."""
    from . import render
    from .reading import read_target

    kb = _open(ctx, create=False)
    try:
        shown = read_target(kb, target)
    finally:
        kb.close()
    if json_out:
        render.print_json(shown.to_dict())
        return
    for note in shown.notes:
        render.message(note)
    render.numbered(shown)


@app.command(
    cls=KBCommand,
    name="list",
    epilog=_example(
        "kb list --source notes/setup.md",
        "kb list --filter lang=en --limit 50 --json",
        "kb list --limit 0 --format files",
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
        typer.Option(
            "--limit", "-n", metavar="N", min=0, max=MAX_INT64, help="At most this many (0: all)."
        ),
    ] = 20,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="table, json, jsonl, csv, md, or files (each source once; a name holding a "
            "newline or control character is shell-quoted: $'a\\nb.md').",
        ),
    ] = "table",
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Same as --format json: {id, text, metadata, created_at}."),
    ] = False,
    null: NullOption = False,
) -> None:
    """List stored chunks, oldest first."""
    from . import render
    from .filters import parse_filter_expressions

    fmt = _files_format(_format(fmt, json_out, render.SEARCH_FORMATS), null)
    where = _search_filter(parse_filter_expressions(filter), None)
    kb = _open(ctx, create=False)
    try:
        docs: list[Any] = []
        for candidate in _source_candidates(source) if source is not None else [None]:
            docs = list(kb.store.iter_documents(where, source=candidate, limit=limit or None))
            if docs:
                break
    finally:
        kb.close()
    if fmt != "table":
        render.documents_output(docs, fmt, null)
    if not docs:
        render.message("No chunks found.")
    elif fmt == "table":
        render.documents_table(docs)


@app.command(cls=KBCommand, epilog=_example("kb stats", "kb --db team.db stats --json"))
def stats(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Show what the index holds: files, chunks, embedder, last ingest."""
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
    cls=KBCommand,
    epilog=_example("kb doctor", "kb doctor --repair", "kb --db team.db doctor --json"),
)
def doctor(
    ctx: typer.Context,
    repair: Annotated[
        bool, typer.Option("--repair", help="Rebuild what drifted from the catalog.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for a running ingest (--repair).")
    ] = 60.0,
) -> None:
    """Check the keyword index and the vector caches against the catalog.

    Each check prints ok or drift with its reason; exit 1 when something drifted and was not
    repaired. --repair rebuilds the drifted keyword tables and deletes or rebuilds drifted
    derived files (keyword pack, vector cache, FAISS file, Chroma collection).
    """
    from contextlib import nullcontext

    from . import render
    from .errors import ConfigError
    from .protocols import Doctor, FileLedger

    kb = _open(ctx, create=False)
    try:
        store = kb.store
        if not isinstance(store, Doctor):
            raise ConfigError(
                f"The {type(store).__name__} store has no checks (see kbcli.protocols.Doctor)"
            )
        lock = store.writer_lock(wait) if repair and isinstance(store, FileLedger) else None
        with lock if lock is not None else nullcontext():
            findings = store.doctor(repair=repair)
    finally:
        kb.close()
    drift = [f for f in findings if not f.ok]
    if json_out:
        render.print_json(
            {"ok": not drift, "repair": repair, "checks": [f.as_dict() for f in findings]}
        )
    elif not findings:
        render.message(f"Nothing to check: the {type(store).__name__} keeps nothing derived.")
    else:
        render.doctor_lines(findings)
    if drift:
        raise typer.Exit(1)


@app.command(cls=KBCommand, epilog=_example("kb init", "kb init ~/.config/kbcli --force"))
def init(
    path: Annotated[
        Path,
        typer.Argument(metavar="[PATH]", help="File or folder to write jianmu.yaml to."),
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Write a commented jianmu.yaml listing every setting with its default."""
    from . import render
    from .config_report import write_template

    target = write_template(path, force=force)
    render.result(f"Wrote {target}; edit it, then run: kb config")


@app.command(
    "config", cls=KBCommand, epilog=_example("kb config", "kb --config team.yaml config --json")
)
def config_(
    ctx: typer.Context,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print a JSON array of {key, value, origin}.")
    ] = False,
) -> None:
    """Show the effective configuration and where each value came from."""
    from . import render
    from .config_report import effective

    state = _state(ctx)
    rows = effective(state.config, state.db)
    if json_out:
        render.print_json(rows)
    else:
        render.config_table(rows)


@app.command(
    cls=KBCommand,
    epilog=_example("kb trust", "kb trust ~/src/team-wiki", "kb trust --list", "kb trust --revoke"),
)
def trust(
    path: Annotated[
        Path | None,
        typer.Argument(
            metavar="[PATH]", help="The jianmu.yaml, or its folder [default: ./jianmu.yaml]."
        ),
    ] = None,
    revoke: Annotated[
        bool, typer.Option("--revoke", help="Forget the trust of PATH instead.")
    ] = False,
    list_: Annotated[
        bool, typer.Option("--list", help="List the trusted files: trusted, changed or missing.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON (with --list).")] = False,
) -> None:
    """Let kb use the code, servers and models a folder's jianmu.yaml names (as it is now).

    A ./jianmu.yaml found in the working directory (a cloned repository, an unpacked archive)
    that names a class path, a server URL or DSN, a locally run model or a database outside its
    folder is refused until you trust it; an edited file needs trusting again. Files named with
    --config or $KB_CONFIG, and ~/.config/kbcli/jianmu.yaml, need no trust.
    """
    from . import render
    from . import trust as records

    if list_:
        rows = records.listing()
        if json_out:
            render.print_json(rows)
        elif not rows:
            render.message("No trusted jianmu.yaml: kb trust PATH adds one")
        for row in [] if json_out else rows:
            render.result(f"{row['state']:8} {row['path']}  (trusted {row['trusted_at']})")
        return
    if revoke:
        file = records.config_path(path)
        done = records.revoke(file)
        render.result(f"No longer trusted: {file}" if done else f"{file} was not trusted")
        return
    file, digest, risks = records.trust_config(path)
    allows = "; ".join(str(r) for r in risks) or "nothing that needs trust today"
    render.result(
        f"Trusted {file} as it is now (sha256 {digest[:12]}): kb may use {allows}. "
        "After an edit, run kb trust again."
    )


@app.command(
    "eval",
    cls=KBCommand,
    epilog=_example(
        "kb eval examples/eval/it-helpdesk --mode keyword",
        "kb eval ./my-beir-set --mode hybrid --db eval.db --json",
        "kb eval --queries questions.jsonl --compare keyword,hybrid --report eval.html",
    ),
)
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
            "-k", "--k", metavar="N", min=1, max=MAX_K, help="Cut-off of nDCG, MRR, recall."
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

    BEIR: each document's title and text go through the normal ingest path (chunked like any
    file); documents are ranked by their best chunk; trec_eval conventions.
    """
    from . import render
    from .errors import InvalidOptionError

    state = _state(ctx)
    extra = {key: v for key, v in (("alpha", alpha), ("fusion", fusion)) if v is not None}
    if queries is None:
        if dataset is None:
            raise InvalidOptionError(
                "kb eval needs a BEIR folder (DATASET_DIR) or --queries FILE with your "
                "questions: see kb eval --help"
            )
        if compare or report:
            raise InvalidOptionError("--compare and --report go with --queries FILE")
        from .evaluation import evaluate

        with render.progress(render.stderr_is_terminal() and not state.quiet) as bar:
            result = evaluate(
                dataset,
                split=split,
                mode=mode,
                k=k,
                db=db,
                config=_load_config(state),
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
            "Give either a BEIR folder or --queries FILE, not both (--queries searches your "
            "index)"
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
    from . import render
    from .eval_report import summary_lines, write_html
    from .evaluation import evaluate_questions, load_questions
    from .types import normalize_mode

    state = _state(ctx)
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    for name in chosen:
        normalize_mode(name)  # an unknown mode is one line, exit 2
    questions = load_questions(queries)
    if db is not None:
        state.db = db
    kb = _open(ctx, create=False)
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
    if report is not None:
        written = write_html(result, report, title=f"kb eval {queries.name}")
        if not state.quiet:
            render.message(f"Report written to {written}")
    if json_out:
        render.print_json(result)
    else:
        for line in summary_lines(result):
            render.result(line)


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
    """Serve the knowledge base to agents over MCP (stdio or HTTP).

    Tools: knowledge_search, knowledge_get and knowledge_stats, limited to the --filter scope
    (and, over HTTP, each token's scope). Over HTTP a request must arrive whole within 10 s and
    at most 1,000 connections are open (the longest-waiting makes room); an address that cannot
    be listened on (a port in use) exits 4."""
    from .errors import InvalidOptionError, require
    from .filters import parse_filter_expressions

    require("mcp", extra="mcp", feature="kb mcp")
    from .mcp_server import KnowledgeMCP, load_tokens, parse_host_port

    scope = _search_filter(parse_filter_expressions(filter), None)
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


@app.command(
    cls=KBCommand,
    epilog=_example(
        "kb copy --to faiss --to-db ~/kb/team-faiss.db",
        "kb --store faiss --db ~/kb/team-faiss.db copy --to sqlite --to-db ~/kb/back.db",
        "kb copy --to chroma --to-db ~/kb/c.db --to-set path=~/kb/chroma --json",
    ),
)
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
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Copy the whole index (chunks, vectors, file records) into another, empty store without
    re-embedding, then check it: counts, and a sample of searches give the same results."""
    from . import render
    from .config import load_config, target_store_config
    from .errors import InvalidOptionError, StoreError
    from .stores import build_store
    from .transfer import copy_index

    state = _state(ctx)
    kb = _open(ctx, create=False)
    try:
        # the target takes jianmu.yaml's store settings when the file names the same backend
        config = target_store_config(load_config(state.config), to, to_set or [])
        files = ("sqlite", "faiss", "chroma")  # the stores kept in a database file
        if to_db is None and config.store.backend in files:
            raise InvalidOptionError("kb copy needs --to-db PATH for the target database")
        source = _load_config(state)
        source_db = Path(state.db or source.paths.knowledge_db).expanduser().resolve()
        same_file = to_db is not None and Path(to_db).expanduser().resolve() == source_db
        if same_file and source.store.backend in files and config.store.backend in files:
            raise InvalidOptionError("--to-db is the source database: give another path")
        target = build_store(config, db=to_db)
        try:
            report = copy_index(kb.store, target)
        finally:
            target.close()
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


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``kb`` console script."""
    try:
        app(args=argv, prog_name="kb")
    except KeyboardInterrupt:
        # Interrupted outside a command (while parsing or importing).
        sys.exit(EXIT_INTERRUPTED)

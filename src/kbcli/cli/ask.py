"""``kb ask``: answer a question from the knowledge base, citing its sources, or refuse."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import open_kb, search_filter
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import (
    MAX_K,
    FilterOption,
    FusionOption,
    RerankOption,
    example,
    output_format,
    words,
)
from kbcli.cli.state import global_options
from kbcli.errors import InvalidOptionError
from kbcli.filters.syntax import parse_filter_expressions

EXIT_NO_KNOWLEDGE = 5  # kb ask refused: no evidence good enough (no request was made)
ASK_FORMATS = ("text", "md", "json")


app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        'kb ask "How do I reset the password?"',
        'kb ask "How do I install the tool?" --in notes --json',
        'kb ask "What does the manual say about the password?" --format md --strict',
        'kb ask "How do I reset the password?" --mode keyword -k 4 --show-prompt',
    ),
)
@global_options()
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
    fusion: FusionOption = "weighted",
    rerank: RerankOption = None,
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

    question = words(question, "question", "ask it in words, as in kb ask 'how do I reset it?'")
    if json_out and fmt.strip().lower() not in ("text", "json"):
        raise typer.BadParameter("--json is --format json: give one of them", param_hint="'--json'")
    fmt = output_format("json" if json_out else fmt, False, ASK_FORMATS)
    if stream and (fmt == "json" or strict):
        raise typer.BadParameter(
            "--json and --strict need the whole answer first: drop --stream",
            param_hint="'--stream'",
        )
    if stream is None:
        stream = fmt == "text" and not strict and not show_prompt and sys.stdout.isatty()
    prompt = _read_prompt(prompt_file) if prompt_file is not None else None
    where = search_filter(parse_filter_expressions(filter), in_)
    streamed: list[str] = []

    def show(piece: str) -> None:
        streamed.append(piece)
        sys.stdout.write(piece)
        sys.stdout.flush()

    kb = open_kb(ctx, create=False)
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
    try:
        return path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InvalidOptionError(f"Cannot read --prompt-file {path}: {reason}") from None

"""What several commands share: option types, limits, examples and output formats."""

from __future__ import annotations

from typing import Annotated

import typer

from kbcli.errors import InvalidOptionError

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
FusionOption = Annotated[
    str, typer.Option("--fusion", metavar="NAME", help="Hybrid fusion: weighted or rrf.")
]
RerankOption = Annotated[
    bool | None,
    typer.Option(
        "--rerank/--no-rerank",
        help="Rerank the candidates with rag.rerank [default: on when configured].",
    ),
]
MetaOption = Annotated[
    list[str] | None,
    typer.Option(
        "--meta",
        metavar="KEY=VALUE",
        help="Metadata key=value (repeatable). Numbers (2024, 1.5) and true/false are stored "
        'typed, so --filter "year>=2024" works; quote to keep text: \'code="2024"\'.',
    ),
]


def example(*lines: str) -> str:
    # "\b" keeps Click from re-wrapping the example lines.
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)


def output_format(fmt: str, json_out: bool, allowed: tuple[str, ...]) -> str:
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


def files_format(fmt: str, null: bool) -> str:
    """``-0`` is ``--format files`` with NUL bytes between the names."""
    if not null or fmt == "files":
        return fmt
    if fmt == "table":
        return "files"

    raise InvalidOptionError(f"-0 prints file names (--format files), not {fmt}: drop one")


def words(text: str, what: str, fix: str) -> str:
    """``text`` when it holds more than white space; else a usage error (exit 2): ``The
    {what} is empty: {fix}``."""
    if text.strip():
        return text

    raise InvalidOptionError(f"The {what} is empty: {fix}")

"""Messages on stderr, results and JSON on stdout, and the Rich console the tables draw on."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import typer


def error(message: str) -> None:
    """One ``Error: ...`` line on stderr."""
    typer.secho("Error: ", fg="red", bold=True, err=True, nl=False)
    typer.echo(message, err=True)


def warning(message: str) -> None:
    """One ``Warning: ...`` line on stderr."""
    typer.secho("Warning: ", fg="yellow", err=True, nl=False)
    typer.echo(message, err=True)


def message(text: str) -> None:
    """An informational line on stderr (notes, "nothing found")."""
    typer.echo(text, err=True)


def result(text: str) -> None:
    """A plain result line on stdout."""
    typer.echo(text)


def print_json(data: Any, *, one_line: bool = False) -> None:
    """``data`` as JSON on stdout (the only thing ``--json`` writes there); ``one_line`` for
    logs that take one line per run."""
    indent = None if one_line else 2
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=indent, default=str) + "\n")
    sys.stdout.flush()


def print_jsonl(items: Sequence[Any]) -> None:
    """One JSON object per line on stdout."""
    for item in items:
        sys.stdout.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def rich_console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def stderr_is_terminal() -> bool:
    """True when stderr is an interactive terminal (progress bars are drawn only then)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def plural(n: int) -> str:
    return "" if n == 1 else "s"

"""``kb init``: write a commented ``jianmu.yaml``."""

from pathlib import Path
from typing import Annotated

import typer

from .group import KBCommand
from .options import example
from .root import app


@app.command(cls=KBCommand, epilog=example("kb init", "kb init ~/.config/kbcli --force"))
def init(
    path: Annotated[
        Path,
        typer.Argument(metavar="[PATH]", help="File or folder to write jianmu.yaml to."),
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Write a commented jianmu.yaml listing every setting with its default."""
    from .. import render
    from ..config_report import write_template

    target = write_template(path, force=force)
    render.result(f"Wrote {target}; edit it, then run: kb config")

"""``kb init``: write a commented ``jianmu.yaml``."""

from pathlib import Path
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import global_options
from kbcli.config.report import write_template

app = command_app()


@app.command(cls=KBCommand, epilog=example("kb init", "kb init ~/.config/kbcli --force"))
@global_options()
def init(
    path: Annotated[
        Path,
        typer.Argument(metavar="[PATH]", help="File or folder to write jianmu.yaml to."),
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Write a commented jianmu.yaml listing every setting with its default."""

    target = write_template(path, force=force)
    render.result(f"Wrote {target}; edit it, then run: kb config")

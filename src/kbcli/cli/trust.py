"""``kb trust``: let kb use what a folder's ``jianmu.yaml`` names."""

from pathlib import Path
from typing import Annotated

import typer

import kbcli.config.trust as records
from kbcli.cli import render
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import global_options

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example("kb trust", "kb trust ~/src/team-wiki", "kb trust --list", "kb trust --revoke"),
)
@global_options()
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
    that would send your texts or keys to a model or server (a provider, model, base URL, key
    variable or database server), run code (a class path, a local model) or write outside its
    folder is refused until you trust it; an edited file needs trusting again. Files named
    with --config or $KB_CONFIG, and ~/.config/kbcli/jianmu.yaml, need no trust.
    """

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

"""``kb config``: the effective configuration and where each value came from."""

from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import get_state, global_options
from kbcli.config.report import effective

app = command_app()


@app.command(
    "config", cls=KBCommand, epilog=example("kb config", "kb --config team.yaml config --json")
)
@global_options()
def config_(
    ctx: typer.Context,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print a JSON array of {key, value, origin}.")
    ] = False,
) -> None:
    """Show the effective configuration and where each value came from."""

    state = get_state(ctx)
    rows = effective(state.config, state.db)
    if json_out:
        render.print_json(rows)
    else:
        render.config_table(rows)

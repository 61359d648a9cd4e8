"""``kb doctor``: the derived structures checked against the catalog, repaired on request."""

from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import global_options
from kbcli.errors import ConfigError
from kbcli.protocols import Doctor, FileLedger, supports

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example("kb doctor", "kb doctor --repair", "kb --db team.db doctor --json"),
)
@global_options()
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

    kb = open_kb(ctx, create=False)
    try:
        store = kb.store
        if not supports(store, Doctor):
            raise ConfigError(
                f"The {type(store).__name__} store has no checks (see kbcli.protocols.Doctor)"
            )
        lock = store.writer_lock(wait) if repair and supports(store, FileLedger) else None
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

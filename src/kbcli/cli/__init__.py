"""The ``kb`` command: parse options, call the library once, render.

One module per command (its options, its run and its output), over what they share: the
application and its global options (:mod:`.root`), the group that turns errors into exit codes
(:mod:`.group`), option conversion without Pydantic (:mod:`.coercion`), option types and output
formats (:mod:`.options`), and opening the knowledge base (:mod:`.context`); the drawing itself
is :mod:`kbcli.cli.render`.

Errors: every :class:`~kbcli.errors.KBError` is turned into one ``Error: ...`` line on stderr
and the exit code the error carries (1 failure, 2 usage, 3 database locked) in one place,
:meth:`.group.KBGroup.invoke`. ``--debug`` re-raises instead; other exceptions are bugs and keep
their traceback. Ctrl-C exits 130 without one.

Start-up: importing this package is free; :data:`app` (typer and every command module) loads
on first use, and ``kb --help`` is printed without it (:mod:`.help_cache`). The command
modules import typer and the standard library only at module level; the library, Rich and
anything heavy are imported inside the command that needs them.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing for kb --help
if TYPE_CHECKING:
    from typing import Any


#: Each command and the module that registers it on import, in ``kb --help``'s order.
COMMANDS = {
    "ingest": "ingest", "add": "add", "search": "search", "ask": "ask", "delete": "delete",
    "get": "get", "list": "list_", "stats": "stats", "doctor": "doctor", "init": "init",
    "config": "config_", "trust": "trust", "eval": "eval_", "mcp": "mcp", "copy": "copy_",
    "watch": "watch",
}  # fmt: skip


def _load(only: str | None = None) -> Any:
    """:mod:`.root` with every command registered on its application, or with command
    ``only`` at least (typer builds each registered command at every run: a command alone
    skips the others' imports and builds)."""
    from kbcli.cli import root

    for name, module in COMMANDS.items():
        if only is None or name == only:
            # __import__, not importlib.import_module: ``python -X importtime`` (the tests, the
            # benchmark) sees only imports made by the import statement's machinery
            __import__(f"{__name__}.{module}")
    order = {f"{__name__}.{module}": i for i, module in enumerate(COMMANDS.values())}
    root.app.registered_commands.sort(key=lambda info: order.get(info.callback.__module__, 0))
    return root


def _command_only(argv: list[str]) -> str | None:
    """The command ``argv`` runs when nothing before it but global options could need the
    other commands (a help, a misspelt command's suggestions, shell completion), else None."""
    import os

    from kbcli.cli.group import GLOBAL_FLAGS, GLOBAL_VALUES

    if "_KB_COMPLETE" in os.environ:
        return None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in GLOBAL_VALUES:
            i += 2
        elif arg in GLOBAL_FLAGS or arg == "--json" or arg.split("=", 1)[0] in GLOBAL_VALUES:
            i += 1
        else:
            return arg if arg in COMMANDS else None
    return None


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load().app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``kb`` console script (:func:`.root.main`); ``kb --help`` and a bare
    ``kb`` print the help from :mod:`.help_cache` when its stored text is current, without
    importing typer."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or (len(args) == 1 and args[0] in ("--help", "-h")):  # help_cache.HELP_ARGS
        from kbcli.cli.help_cache import print_root_help

        code = print_root_help(args)
        if code is not None:
            raise SystemExit(code)  # what click's --help and no_args_is_help do
    _load(_command_only(args)).main(argv)


__all__ = ["app", "main"]

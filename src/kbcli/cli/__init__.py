"""The ``kb`` command: parse options, call the library once, render.

One module per command (its options, its run and its output), over what they share: the
application and its global options (:mod:`.root`), the group that turns errors into exit codes
(:mod:`.group`), option conversion without Pydantic (:mod:`.coercion`), option types and output
formats (:mod:`.options`), and opening the knowledge base (:mod:`.context`); the drawing itself
is :mod:`kbcli.render`.

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


def _load() -> Any:
    """:mod:`.root` with every command registered on its application."""
    from . import root

    # Each command module registers its command on import; ``kb --help`` lists them in this
    # order.
    # isort: off
    from . import ingest, add, search, ask, delete, get, list_, stats, doctor  # noqa: F401
    from . import init, config_, trust, eval_, mcp, copy_, watch  # noqa: F401
    # isort: on
    return root


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load().app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``kb`` console script (:func:`.root.main`); ``kb --help`` is printed
    from :mod:`.help_cache` when its stored text is current, without importing typer."""
    from .help_cache import print_root_help

    if print_root_help(sys.argv[1:] if argv is None else list(argv)):
        raise SystemExit(0)  # what click's --help does
    _load().main(argv)


__all__ = ["app", "main"]

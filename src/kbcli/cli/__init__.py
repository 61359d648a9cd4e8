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

Start-up: module-level imports are typer and the standard library only; the library, Rich and
anything heavy are imported inside the command that needs them.
"""

from .root import app, main

# Each command module registers its command on import; ``kb --help`` lists them in this order.
# isort: off
from . import ingest, add, search, ask, delete, get, list_, stats, doctor  # noqa: E402, F401
from . import init, config_, trust, eval_, mcp, copy_, watch  # noqa: E402, F401
# isort: on

__all__ = ["app", "main"]

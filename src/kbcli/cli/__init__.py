"""The ``kb`` command: parse options, call the library once, render.

One module per command (its options, its run and its output), over what they share: the
application and its global options (:mod:`.root`), the group that loads a command's module
when it is named and turns errors into exit codes (:mod:`.group`), the parameters converted
without Pydantic (:mod:`.params`), option types and output formats (:mod:`.options`), and
opening the knowledge base (:mod:`.context`); the drawing itself is :mod:`kbcli.cli.render`.

Errors: every :class:`~kbcli.errors.KBError` is turned into one ``Error: ...`` line on stderr
and the exit code the error carries (1 failure, 2 usage, 3 database locked) in one place,
:meth:`.group.KBGroup.invoke`. ``--debug`` re-raises instead; other exceptions are bugs and keep
their traceback. Ctrl-C exits 130 without one.

Start-up: ``kb COMMAND`` imports that command's module only (click's lazy group,
:meth:`.group.KBGroup.get_command`); ``kb --help`` imports them all for their descriptions.
The library and anything heavy are imported when a command runs.
"""

from kbcli.cli.root import app, main

__all__ = ["app", "main"]

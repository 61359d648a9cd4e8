"""``kb --help`` (and a bare ``kb``) without importing typer: the root help exactly as typer
renders it.

Importing typer and building the application from every command module costs more CPU than
the rest of ``kb --help`` (docs/benchmarks.md, "Whole commands as CPU time"). So the root help
is rendered ahead, for every content width click can choose (its formatter takes the terminal's
columns minus 2, between :data:`MIN_WIDTH` and :data:`MAX_WIDTH`), into :data:`STORE` with a
fingerprint of what it was rendered from: the sources of :mod:`kbcli.cli` and
:mod:`kbcli.config.registry`, typer's version file and Python's version. The stored text is printed
only while that fingerprint matches; otherwise (an edited source, another typer, missing
sources) ``kb --help`` goes through typer as before. ``python -m kbcli.cli.help_store`` writes
the store again; ``tests/test_cli_startup.py`` fails while it is out of date.
"""

from __future__ import annotations

import os
import sys
import zlib

# os.path, not pathlib: pathlib's import costs more than the rest of this module
HERE = os.path.dirname(os.path.abspath(__file__))
STORE = os.path.join(HERE, "root_help.zlib")
# click: HelpFormatter(max_width=context_settings["max_content_width"]) -> the width is
# max(min(columns, max_width) - 2, 50); kb sets max_content_width to 160 (cli/root.py).
MIN_WIDTH = 50
MAX_WIDTH = 158
HELP_ARGS = (["--help"], ["-h"])
COMPLETE_VAR = "_KB_COMPLETE"  # typer's shell completion: never answered from the store


def sources() -> list[str]:
    """kb's files the root help is rendered from: :mod:`kbcli.cli` and
    :mod:`kbcli.config.registry`."""
    files = sorted(os.path.join(HERE, n) for n in os.listdir(HERE) if n.endswith(".py"))
    files.append(os.path.join(os.path.dirname(HERE), "config", "registry.py"))
    return files


def renderer() -> list[str]:
    """What renders it: typer's ``__init__.py`` (it holds typer's version)."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("typer")
    if spec is None or spec.origin is None:
        raise OSError("typer not found")
    return [spec.origin]


def _checksum(paths: list[str], seed: int = 0) -> str:
    crc = seed
    for path in paths:
        with open(path, "rb") as file:
            crc = zlib.crc32(os.path.basename(path).encode() + b"\0" + file.read(), crc)
    return f"{crc:08x}"


def fingerprint() -> str:
    """``SOURCES-RENDERER``: a checksum of :func:`sources`, and one of :func:`renderer` and
    Python's version (OSError when a file cannot be read). The store is used only when both
    match; the first alone says whether the committed store is current for kb's own files (a
    machine with another typer or Python falls back to typer, correct and slower)."""
    env = _checksum(renderer(), zlib.crc32(repr(sys.version_info[:2]).encode()))
    return f"{_checksum(sources())}-{env}"


def stored_fingerprint() -> str | None:
    """The fingerprint the store was written with (None when it cannot be read)."""
    try:
        with open(STORE, "rb") as file:
            return zlib.decompress(file.read()).decode("utf-8").split("\0", 1)[0]
    except (OSError, ValueError, zlib.error):
        return None


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, which click's formatter asks, without importing
    shutil (it imports bz2 and lzma): ``$COLUMNS`` when a positive number, else the terminal's
    columns, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def content_width() -> int:
    """The width click's help formatter takes for this terminal (see :data:`MAX_WIDTH`)."""
    return max(min(terminal_columns(), MAX_WIDTH + 2) - 2, MIN_WIDTH)


def stored_help(width: int) -> str | None:
    """The stored root help at ``width``, or None when the store is missing or out of date."""
    try:
        with open(STORE, "rb") as file:
            blob = zlib.decompress(file.read()).decode("utf-8")
        mark, index, *texts = blob.split("\0")
        if mark != fingerprint():
            return None
        return texts[int(index.split(",")[width - MIN_WIDTH])]
    except (OSError, ValueError, IndexError, zlib.error):
        return None


def print_root_help(argv: list[str]) -> int | None:
    """Print the root help as ``kb --help`` (stdout, exit code 0) or a bare ``kb`` (stderr,
    exit code 2) would and return that exit code, if ``argv`` is one of those and the stored
    text is current; else None (the caller runs typer)."""
    if (argv not in HELP_ARGS and argv != []) or COMPLETE_VAR in os.environ:
        return None
    text = stored_help(content_width())
    if text is None:
        return None
    stream, code = (sys.stdout, 0) if argv else (sys.stderr, 2)
    try:
        stream.write(text)  # click.echo(ctx.get_help()): the text and a newline, flushed
        stream.flush()
    except BrokenPipeError:
        # a reader that went away (kb --help | head) ends kb quietly, with the code it would
        # have had, as every command (render.messages.silence: no typer imported here); the
        # stream goes to /dev/null so that the interpreter's last flush does not complain
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    return code

"""File names and sizes as a user reads and types them: relative paths, shortened sources,
shell-quoted names, ``--format files``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kbcli.cli.render.messages import plural, result, warning
from kbcli.search.place import location_suffix
from kbcli.types import note_label


def human_size(n: int | float) -> str:
    """``1536`` -> ``"1.5 KB"`` (powers of 1024)."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"  # pragma: no cover


def shorten_source(source: str | Path | None, width: int = 48) -> str:
    """A source path as the user would type it: relative to the current folder, or ``~/...``;
    long paths keep their tail (``.../folder/file.md``)."""
    if source is None or source == "":
        return "-"
    text = _as_typed(str(source))
    if len(text) <= width:
        return text
    parts = Path(text).parts
    tail = str(Path(*parts[-2:])) if len(parts) >= 2 else parts[-1]
    if len(tail) + 4 > width:
        return "…" + text[-(width - 1) :]
    return "…/" + tail


def display_path(source: str | Path | None) -> str:
    """A source as the user would type it, whole: relative to the current folder or ``~/...``
    (both open in a shell), never cut, and shell-quoted by :func:`quote_name` when it holds a
    newline or another control character."""
    if source is None or source == "":
        return "-"
    return quote_name(_as_typed(str(source)))


def chunk_location(
    meta: dict[str, Any],
    line: int | str | None = None,
    path: Callable[[Any], str] = display_path,
    page: int | None = None,
) -> str:
    """Where a chunk is, as every listing shows it: ``docs/a.md:12`` (the source through
    ``path``, then ``line`` when given; ``docs/a.pdf#page=3`` with ``page``, see
    :func:`kbcli.search.place.location`), ``-`` without a source; an agent's note is ``note by
    acme``
    (``note by acme: docs/topic.md``), never a file's line."""

    note = note_label(meta)
    source = meta.get("source")
    if source is None or source == "":
        return "-" if note is None else note
    if note is not None:
        return f"{note}: {path(source)}"
    return path(source) + location_suffix(line, page)


def _as_typed(text: str) -> str:
    """An absolute path relative to the current folder, else to ``~/``; anything else as is."""
    path = Path(text)
    if path.is_absolute():
        for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
            try:
                return prefix + str(path.relative_to(base))
            except ValueError:
                continue
    return text


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b", "\f": "\\f",
            "\v": "\\v", "\x1b": "\\e", "'": "\\'", "\\": "\\\\"}  # fmt: skip


def needs_quoting(name: str) -> bool:
    """True when ``name`` would not read back as itself one per line: it holds a newline, a
    control or other unprintable character, a byte that is not UTF-8, or starts like a
    quoted name (``$'``)."""
    return not name.isprintable() or name.startswith("$'")


def quote_name(name: str) -> str:
    """``name`` as is, or, when :func:`needs_quoting`, in the shell's ANSI-C quoting
    (``$'docs/a\\nb.md'``, read back by bash, zsh and ksh): ``\\n \\t \\e``..., and ``\\xHH``
    for each byte of another unprintable character or of a byte that is not UTF-8, as the file
    system holds it. Like ``ls --quoting-style=shell-escape``, only for such names."""
    if not needs_quoting(name):
        return name
    out = []
    for ch in name:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:  # its bytes: the same in every locale (what \u gives depends on the shell's)
            try:
                raw = ch.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a lone surrogate no file system name holds
                out.append(f"\\u{code:04x}")
                continue
            out.extend(f"\\x{byte:02x}" for byte in raw)
    return "$'" + "".join(out) + "'"


def file_names(sources: Sequence[str], null: bool = False) -> None:
    """``--format files``: each source once per line (quoted by :func:`quote_name` where a
    line could not hold it, with a warning once), or with ``null`` each followed by a NUL byte
    as the file system spells it (``find -print0``, ``xargs -0``)."""
    names = list(dict.fromkeys(sources))
    if null:
        out = sys.stdout.buffer
        for name in names:
            try:
                raw = os.fsencode(name)  # the bytes of the file's name
            except UnicodeEncodeError:  # not a file system name (a lone surrogate)
                raw = name.encode("utf-8", "backslashreplace")
            out.write(raw + b"\0")
        out.flush()
        return
    quoted = 0
    for name in names:
        quoted += needs_quoting(name)
        result(quote_name(name))
    if quoted:
        warning(
            f"{quoted} file name{plural(quoted)} hold{'s' if quoted == 1 else ''} a newline or "
            "another control character: shown shell-quoted as $'...'; -0 prints exact names "
            "separated by NUL bytes (xargs -0)"
        )

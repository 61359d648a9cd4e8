"""File names as kb records them: text every store, JSON and terminal accepts, and back.

A POSIX file name is bytes. Python hands one that is not valid UTF-8 over as a ``str`` with
lone surrogates (``os.fsdecode``'s ``surrogateescape``: the byte 0xff becomes U+DCFF), which
SQLite, PostgreSQL, JSON output and a UTF-8 terminal all refuse. kb records such a name with
each undecodable byte written ``\\xHH`` (``bad\\xff\\xfe.md``, as ``ls -b`` and Python's
``repr`` show it), and turns that back into the bytes when it opens the file. A name that is
valid UTF-8 is recorded as it is, so indexes written before keep their sources.

The escape is reversible except for one case: a file whose valid name literally contains
``\\xff`` (a backslash, an ``x`` and two hex digits of 80-ff) next to one whose name has that
byte. :func:`source_path` then prefers the literal name, and ``kb ingest`` reports the other
file as failed (rename one of them).
"""

from __future__ import annotations

import os
import re

_ESCAPED = re.compile(r"\\x([89a-f][0-9a-f])")


def source_name(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """``path`` as kb records and prints it: unchanged when it is valid UTF-8, else with each
    undecodable byte written ``\\xHH``. Works on any text holding such a path (a message)."""
    text = os.fsdecode(path)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that no byte stands for: show its code point
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def source_path(source: str) -> str:
    """The file system path (a ``str`` as ``os`` functions take it) of a recorded ``source``:
    the inverse of :func:`source_name`."""
    if "\\x" not in source:
        return source
    raw = _ESCAPED.sub(lambda m: chr(0xDC00 + int(m[1], 16)), source)
    if raw == source or source_name(raw) != source or os.path.lexists(source):
        return source  # a valid name with a literal backslash
    return raw


def normal_source(source: str) -> str:
    """``source`` with its ``.`` and ``..`` steps and repeated separators taken out, read as
    text (the file system is never asked, so symlinks are not followed): ``/docs/beta/./b.md``
    and ``/docs/alpha/../beta/b.md`` are ``/docs/beta/b.md``. A trailing separator (a folder
    prefix, ``/docs/beta/``) is kept; ``..`` above the root stays at the root; a relative
    source stays relative; a URL (``scheme://...``) or an empty text is unchanged. The one
    lexical canonicaliser of every scope and path check: views and scopes (their ``source``
    conditions), notes (``knowledge_add``/``knowledge_delete``, ``kb add``), and the forms
    ``kb get``, ``kb delete --source`` and ``knowledge_get`` look a path up under."""
    if not source or "://" in source:
        return source
    folder = source.endswith((os.sep, os.sep + ".", os.sep + "..")) or source in (".", "..")
    text = os.path.normpath(source)
    if text.startswith(os.sep * 2):  # POSIX keeps a leading "//"; kb never records one
        text = os.sep + text.lstrip(os.sep)
    if folder and not text.endswith(os.sep) and text != ".":
        text += os.sep
    return text


def canonical_source(path: str | os.PathLike[str]) -> str:
    """The source kb records for a file named by ``path``: ``~`` expanded, absolute, symlinks
    resolved, an undecodable name escaped; the escaped form kb prints (``bad\\xff.md``) names
    the same file as the raw bytes. The one canonicaliser of ingest, ``kb get``/``delete``,
    ``knowledge_get`` and ``file_text``."""
    from pathlib import Path

    return source_name(Path(source_path(os.fspath(path))).expanduser().resolve())


def source_forms(path: str | os.PathLike[str]) -> list[str]:
    """The sources an indexed file named by ``path`` may be recorded under, most likely first:
    canonical (a file named on the command line), its folder resolved but not the file (a file
    reached through a link with ``--follow-symlinks``), absolute, as given without its ``.``
    and ``..`` steps (:func:`normal_source`; a ``source`` set by hand, a note's) and as given."""
    given = os.fspath(path)
    absolute = os.path.abspath(os.path.expanduser(source_path(given)))
    forms = []
    try:
        forms.append(canonical_source(given))
        head, name = os.path.split(absolute)
        forms.append(source_name(os.path.join(os.path.realpath(head), name)))
    except (OSError, RuntimeError, ValueError):
        pass  # a path that cannot be resolved (a loop): the plain forms below
    forms += [source_name(absolute), source_name(normal_source(given)), source_name(given)]
    return list(dict.fromkeys(forms))

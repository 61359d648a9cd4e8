"""The command-line syntax of filters and metadata: ``--filter key=value`` expressions
(``!=``, ``a,b`` for any of, ``>``, ``>=``, ``<``, ``<=``, quoted exact text), ``--meta``
values, and the source filters of ``--in DIR`` and paths (:func:`under_folders`,
:func:`with_source_paths`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from kbcli.errors import FilterError, InvalidOptionError
from kbcli.filters.model import (
    INT64_MAX,
    INT64_MIN,
    LOGICAL_OPERATORS,
    CheckedFilter,
    _kind,
    validate_filter,
)
from kbcli.filters.sql import minimal_prefixes

# --- the command-line syntax: key=value, key!=value, key>=3 ... ------------------------------

FILTER_SYNTAX = (
    'key=value, key!=value, key=a,b (any of), key>3, key>=3, key<3, key<=3, key="exact text"'
)
# The operator is the first of = == != > >= < <= after the key; a value may contain any of
# these characters (title=a>b) but not start with one (year>>3, year=<3), unless quoted.
_EXPRESSION = re.compile(r"^\s*([^=!<>\s][^=!<>]*?)\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$", re.DOTALL)
_OPERATOR_CHARS = "=!<>"
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
_WORDS = {"true": True, "false": False, "null": None}
_ORDERING = {">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}
# What a run of operator characters was most likely meant to be, by the characters in it.
_MEANT = {
    frozenset("<"): "<",
    frozenset(">"): ">",
    frozenset("<="): "<=",
    frozenset(">="): ">=",
    frozenset("="): "=",
    frozenset("<>"): "!=",
    frozenset("!"): "!=",
    frozenset("!="): "!=",
}


def _typed(text: str) -> Any:
    """``true``/``false``/``null``, an int or a float when it looks like one; else the string.

    Integers outside 64 bits and floats that overflow to infinity stay strings (SQLite
    cannot compare them as numbers)."""
    lowered = text.lower()
    if lowered in _WORDS:
        return _WORDS[lowered]
    if _INT.match(text):
        number = int(text)
        return number if INT64_MIN <= number <= INT64_MAX else text
    if _FLOAT.match(text):
        value = float(text)
        return value if math.isfinite(value) else text
    return text


def _forms(text: str) -> list[Any]:
    """The values ``text`` may be stored as: typed (``--meta page=3``, a loader's page) and as
    a string (``--meta 'page="3"'``, or indexes written before --meta values were typed)."""
    value = _typed(text)
    return [value] if isinstance(value, str) else [value, text]


def _quoted(raw: str) -> str | None:
    """The text between matching double or single quotes around ``raw``; else None."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    return None


def _malformed_operator(expr: str, key: str, op: str, raw: str) -> FilterError:
    """The error for a value that starts with operator characters (``year>>3``)."""
    rest = raw.lstrip(_OPERATOR_CHARS + " \t")
    run = op + "".join(raw[: len(raw) - len(rest)].split())
    meant = _MEANT.get(frozenset(run))
    hint = f", did you mean {key + meant + rest!r}?" if meant and rest else ""
    quoted = f'{key}{op}"{raw}"'
    return FilterError(
        f"Cannot read filter {expr!r}: {run!r} is not an operator{hint} (operators: "
        f"= != > >= < <=; quote a value that starts with one: {quoted!r})"
    )


def _parse_one(expr: str) -> dict[str, Any]:
    match = _EXPRESSION.match(expr)
    if not match or not match.group(3):
        # year!3: a "!" is only ever part of "!=" (a key cannot contain one)
        meant = _EXPRESSION.match(expr.replace("!", "!=", 1)) if "!" in expr else None
        hint = f" (did you mean {expr.replace('!', '!=', 1)!r}?)" if meant and meant[3] else ""
        raise FilterError(f"Cannot read filter {expr!r}{hint}: use {FILTER_SYNTAX}")
    key, written, raw = match.groups()
    op = "=" if written == "==" else written
    text = _quoted(raw)
    if text is not None:  # exactly this text: not typed, not split at commas
        if op in ("=", "!="):
            return {key: text} if op == "=" else {key: {"$ne": text}}
        return {key: {_ORDERING[op]: text}}
    if raw[0] in _OPERATOR_CHARS:
        raise _malformed_operator(expr, key, written, raw)
    if op in ("=", "!="):
        values: list[Any] = []
        seen: set[tuple[str, Any]] = set()
        for part in raw.split(","):
            part = part.strip()
            if not part:
                raise FilterError(f"Empty value in filter {expr!r}: use {FILTER_SYNTAX}")
            values.extend(_new_values(_forms(part), seen))
        if len(values) == 1:
            return {key: values[0]} if op == "=" else {key: {"$ne": values[0]}}
        return {key: {"$in" if op == "=" else "$nin": values}}
    value = _typed(raw)
    if value is None or isinstance(value, bool):
        raise FilterError(
            f"Filter {expr!r} compares with {raw!r}: {op} needs a number or a text value"
        )
    if isinstance(value, str) and _FLOAT.match(raw):
        raise FilterError(
            f"Filter {expr!r}: {raw} is too large to compare as a number (64-bit integers, "
            "finite decimals)"
        )
    return {key: {_ORDERING[op]: value}}


def _new_values(values: list[Any], seen: set[tuple[str, Any]]) -> list[Any]:
    """The ``values`` not ``seen`` yet (equal and of one kind: ``1`` is ``1.0``, not ``"1"``
    or ``True``), which are added to ``seen``; a set, so thousands of values stay linear."""
    out = []
    for value in values:
        key = (_kind(value), value)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out


def parse_filter_expressions(
    exprs: list[str] | tuple[str, ...] | None,
) -> CheckedFilter | None:
    """Turn repeated ``--filter`` expressions into one checked filter (all must hold); None for
    none.

    Accepted: ``key=value`` (``key==value`` alike), ``key!=value``, ``key=a,b`` (any of),
    ``key>3``, ``key>=3``, ``key<3``, ``key<=3``. ``true``, ``false``, ``null``, ints and
    floats are typed, anything else is a string. ``=`` and ``!=`` with a typed value also
    match its string form, so ``page=3`` finds ``{"page": 3}`` and ``{"page": "3"}``. A value
    in double or single quotes is exactly the text between them (``code="2024"``,
    ``title="a,b"``). An unquoted value may not start with ``= ! < >``: ``year>>3`` or
    ``year=<3`` is a mistyped operator, refused. Raises :class:`FilterError`.
    """
    filters = [_parse_one(expr) for expr in exprs or ()]
    if not filters:
        return None
    return validate_filter(filters[0] if len(filters) == 1 else {"$and": filters})


_JSON_NUMBER = re.compile(r"^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$")


def meta_value(text: str) -> Any:
    """A ``--meta`` value: a JSON number (``2024``, ``-1.5``, not ``007`` or ``+3``) becomes
    an int or float, ``true``/``false`` a bool; a value in double or single quotes is the text
    between them; anything else stays text. Integers beyond 64 bits stay text."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    if _JSON_NUMBER.match(text):
        if _INT.match(text):
            number = int(text)
            return number if INT64_MIN <= number <= INT64_MAX else text
        value = float(text)
        return value if math.isfinite(value) else text
    return text


def parse_meta(exprs: list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    """Turn repeated ``--meta key=value`` options into a dict, typing values by
    :func:`meta_value` (``year=2024`` is the number 2024, ``'year="2024"'`` the text).

    Raises :class:`InvalidOptionError` for an expression without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for expr in exprs or ():
        key, sep, value = expr.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidOptionError(f"Cannot read --meta {expr!r}: use key=value, e.g. lang=en")
        if '"' in key or any(ord(c) < 32 for c in key):
            raise InvalidOptionError(f"--meta key {key!r} may not contain quotes or control codes")
        out[key] = meta_value(value)
    return out


def with_source_paths(
    filter: dict[str, Any] | None, resolve: Callable[[str], str]
) -> dict[str, Any] | None:
    """``filter`` where every text value compared with ``source`` (``=``, ``!=``, any of,
    none of) also matches ``resolve(value)``: ``source=docs/a.md`` finds the file that ingest
    recorded as ``/home/me/docs/a.md``, as ``kb list --source docs/a.md`` does. A value that
    resolves to itself (an absolute path, or a non-path source such as ``chat``) is unchanged;
    when nothing is, ``filter`` itself is returned.
    """
    if not filter:
        return filter

    def forms(value: Any) -> list[Any]:
        if not isinstance(value, str) or not value:
            return [value]
        resolved = resolve(value)
        return [value] if resolved == value else [value, resolved]

    def widen(values: list[Any]) -> list[Any]:
        out: list[Any] = []
        seen: set[tuple[str, Any]] = set()
        for value in values:
            out.extend(_new_values(forms(value), seen))
        return out

    def walk(node: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in LOGICAL_OPERATORS:
                out[key] = [walk(sub) for sub in value]
            elif key != "source":
                out[key] = value
            elif not isinstance(value, dict):
                values = widen([value])
                out[key] = values[0] if len(values) == 1 else {"$in": values}
            else:
                ops: dict[str, Any] = {}
                for op, operand in value.items():
                    if op in ("$eq", "$ne"):
                        values = widen([operand])
                        if len(values) == 1:
                            ops[op] = operand
                        else:
                            ops["$in" if op == "$eq" else "$nin"] = values
                    elif op in ("$in", "$nin"):
                        ops[op] = widen(list(operand))
                    else:
                        ops[op] = operand
                out[key] = ops
        return out

    changed = walk(filter)
    return filter if changed == filter else changed  # a checked filter stays checked


def under_folders(folders: list[str]) -> dict[str, Any] | None:
    """A filter for documents whose ``source`` lies under any of ``folders`` (absolute paths):
    ``$prefix`` with a trailing separator, so ``/docs/a`` never matches ``/docs/ab/x.md``."""
    import os

    given = [folder if folder.endswith(os.sep) else folder + os.sep for folder in folders]
    kept = set(minimal_prefixes(given))  # a folder inside another adds nothing
    prefixes = [p for p in dict.fromkeys(given) if p in kept]
    if not prefixes:
        return None
    parts = [{"source": {"$prefix": p}} for p in prefixes]
    return parts[0] if len(parts) == 1 else {"$or": parts}

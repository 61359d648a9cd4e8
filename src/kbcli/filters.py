"""Metadata filters: validation, matching in Python, and compilation to SQL.

A filter is a dict. ``{"lang": "en", "year": 2024}`` means every key equals its value.
Operators (Chroma style) go in a nested dict or at the top::

    {"year": {"$gte": 2020, "$lt": 2025}}
    {"$or": [{"lang": "en"}, {"lang": {"$in": ["zh", "ja"]}}]}
    {"draft": {"$exists": False}}

Operators: ``$eq $ne $in $nin $gt $gte $lt $lte $exists $prefix`` on a key; ``$and $or`` over a
list of filters. Equality is typed: ``1`` does not equal ``"1"``; ``True`` only equals
``True``. ``$ne`` and ``$nin`` match documents that lack the key. Ordering operators compare
numbers with numbers and strings with strings; other documents do not match. Keys are bound as
SQL parameters, never spliced into SQL text.

A text value in the metadata is compared up to its first NUL character, if it has one, on
every store (SQLite's JSON functions read it that far; PostgreSQL refuses NUL altogether).

``$prefix`` (``{"source": {"$prefix": "/docs/guide/"}}``) matches text values that start with the
operand, compared character by character and case-sensitively (no wildcards: ``%`` and ``_``
are ordinary characters); a non-text value or a missing key does not match. The operand is a
non-empty string. ``kb search --in DIR`` uses it on ``source`` with the folder's absolute path
and a trailing separator, so ``/docs/a`` does not match ``/docs/ab/x.md``. In SQL it is
``substr(value, 1, length(?)) = ?`` with the operand bound (never ``LIKE``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from .errors import FilterError

KEY_OPERATORS = (
    "$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$prefix",
)  # fmt: skip
LOGICAL_OPERATORS = ("$and", "$or")
_ORDER = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_MISSING = object()
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Scalar = (str, int, float, bool, type(None))


# What one filter may hold. A statement binds about three parameters per condition, and
# PostgreSQL takes at most 65,535 per statement (SQLite's default build 32,766); each
# condition is also tested on every row a filter cannot narrow by an index.
MAX_FILTER_CONDITIONS = 5000
MAX_FILTER_DEPTH = 32  # nested $and/$or levels


def and_filters(*filters: dict[str, Any] | None) -> dict[str, Any] | None:
    """The conjunction of the non-empty ``filters`` (None when there are none; a filter given
    twice counts once)."""
    present: list[dict[str, Any]] = []
    for f in filters:
        if f and f not in present:
            present.append(f)
    if not present:
        return None
    return present[0] if len(present) == 1 else {"$and": present}


def validate_filter(filter: Any) -> dict[str, Any] | None:
    """Return ``filter`` if well formed (None and {} mean no filter); else raise FilterError.

    A filter holds at most :data:`MAX_FILTER_CONDITIONS` conditions (each value of an ``$in``
    or ``$nin`` list counts as one) and nests ``$and``/``$or`` at most
    :data:`MAX_FILTER_DEPTH` deep."""
    if filter is None:
        return None
    if not isinstance(filter, dict):
        raise FilterError(f"A filter must be a dict like {{'source': 'a.md'}}, got {filter!r}")
    conditions = _check(filter, 1)
    if conditions > MAX_FILTER_CONDITIONS:
        raise FilterError(
            f"The filter holds {conditions} conditions (each $in/$nin value counts as one): at "
            f"most {MAX_FILTER_CONDITIONS}; match what they share instead (a folder with "
            "$prefix, a metadata key)"
        )
    return filter or None


def _check(filter: dict[str, Any], depth: int) -> int:
    """Check one level of a filter; returns how many conditions it holds."""
    if depth > MAX_FILTER_DEPTH:
        raise FilterError(
            f"The filter nests $and/$or more than {MAX_FILTER_DEPTH} levels deep: flatten it"
        )
    conditions = 0
    for key, value in filter.items():
        if not isinstance(key, str) or not key:
            raise FilterError(f"Filter keys must be non-empty strings, got {key!r}")
        if key in LOGICAL_OPERATORS:
            if not isinstance(value, list) or not value:
                raise FilterError(f"{key} needs a non-empty list of filters, got {value!r}")
            for sub in value:
                if not isinstance(sub, dict):
                    raise FilterError(f"{key} items must be filters (dicts), got {sub!r}")
                conditions += _check(sub, depth + 1)
        elif key.startswith("$"):
            known = ", ".join(KEY_OPERATORS + LOGICAL_OPERATORS)
            raise FilterError(f"Unknown filter operator {key!r}: use one of {known}")
        else:
            _check_key(key)
            if isinstance(value, dict):
                if not value:
                    raise FilterError(f"Filter on {key!r} has no operator")
                for op, operand in value.items():
                    _check_operator(key, op, operand)
                    conditions += len(operand) if op in ("$in", "$nin") else 1
            else:
                _check_operand(key, "$eq", value)
                conditions += 1
    return conditions


def _check_key(key: str) -> None:
    if '"' in key or any(ord(c) < 32 for c in key):
        raise FilterError(f"Filter key {key!r} may not contain quotes or control characters")
    _check_unicode(f"Filter key {key!r}", key)


def _check_unicode(what: str, text: str) -> None:
    """A lone surrogate (``\\udcff``: Python's stand-in for a byte of a non-UTF-8 argument)
    cannot be sent to a database: refuse it rather than fail while binding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FilterError(
            f"{what} is not valid UTF-8 text (undecodable bytes or a lone surrogate)"
        ) from None


def _check_operator(key: str, op: str, operand: Any) -> None:
    if op not in KEY_OPERATORS:
        raise FilterError(
            f"Unknown filter operator {op!r} on {key!r}: use one of {', '.join(KEY_OPERATORS)}"
        )
    if op in ("$in", "$nin"):
        if not isinstance(operand, (list, tuple)) or not operand:
            raise FilterError(f"{op} on {key!r} needs a non-empty list, got {operand!r}")
        for item in operand:
            _check_operand(key, op, item)
    elif op == "$exists":
        if not isinstance(operand, bool):
            raise FilterError(f"$exists on {key!r} needs true or false, got {operand!r}")
    elif op == "$prefix":
        if not isinstance(operand, str) or not operand:
            raise FilterError(f"$prefix on {key!r} needs a non-empty string, got {operand!r}")
        _check_range(key, op, operand)
    elif op in _ORDER:
        if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
            raise FilterError(f"{op} on {key!r} needs a number or a string, got {operand!r}")
        _check_range(key, op, operand)
    else:
        _check_operand(key, op, operand)


def _check_operand(key: str, op: str, operand: Any) -> None:
    if not isinstance(operand, Scalar):
        raise FilterError(
            f"{op} on {key!r} needs a string, number, boolean or null, got {operand!r}"
        )
    _check_range(key, op, operand)


def _check_range(key: str, op: str, operand: Any) -> None:
    """SQLite integers are 64-bit, JSON has no NaN or infinity, and SQLite's JSON functions
    end a string at a NUL character (so it could never match): refuse what cannot bind."""
    if isinstance(operand, bool):
        return
    if isinstance(operand, str) and "\0" in operand:
        raise FilterError(f"{op} on {key!r}: filter values may not contain NUL characters")
    if isinstance(operand, str):
        _check_unicode(f"{op} on {key!r}: the value {operand!r}", operand)
    if isinstance(operand, int) and not INT64_MIN <= operand <= INT64_MAX:
        raise FilterError(
            f"{op} on {key!r}: {operand} is outside the 64-bit integer range "
            f"({INT64_MIN} to {INT64_MAX})"
        )
    if isinstance(operand, float) and not math.isfinite(operand):
        raise FilterError(f"{op} on {key!r} needs a finite number, got {operand!r}")


# --- matching in Python ---------------------------------------------------------------------


def matches(metadata: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """True when ``metadata`` passes ``filter`` (None or {} passes everything)."""
    if not filter:
        return True
    for key, value in filter.items():
        if key == "$and":
            if not all(matches(metadata, sub) for sub in value):
                return False
        elif key == "$or":
            if not any(matches(metadata, sub) for sub in value):
                return False
        else:
            actual = metadata.get(key, _MISSING)
            if isinstance(actual, str) and "\0" in actual:
                actual = actual[: actual.index("\0")]  # as SQLite's JSON functions read it
            ops = value if isinstance(value, dict) else {"$eq": value}
            if not all(_apply(op, actual, operand) for op, operand in ops.items()):
                return False
    return True


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    return "other"


def _equal(actual: Any, expected: Any) -> bool:
    return actual is not _MISSING and _kind(actual) == _kind(expected) and actual == expected


def _apply(op: str, actual: Any, operand: Any) -> bool:
    if op == "$eq":
        return _equal(actual, operand)
    if op == "$ne":
        return not _equal(actual, operand)
    if op == "$in":
        return any(_equal(actual, item) for item in operand)
    if op == "$nin":
        return not any(_equal(actual, item) for item in operand)
    if op == "$exists":
        return (actual is not _MISSING) == operand
    if op == "$prefix":
        return isinstance(actual, str) and actual.startswith(operand)
    kind = _kind(operand)
    if actual is _MISSING or _kind(actual) != kind:
        return False
    if op == "$gt":
        return actual > operand
    if op == "$gte":
        return actual >= operand
    if op == "$lt":
        return actual < operand
    return actual <= operand


def text_prefixes(filter: dict[str, Any] | None, key: str) -> list[str] | None:
    """Text prefixes one of which every document passing ``filter`` has in ``key`` (a value
    or a prefix it is pinned to by ``$eq``, ``$in`` or ``$prefix``, through ``$and`` and
    ``$or``), or None when ``filter`` does not pin ``key`` to text. Lets a store narrow a
    scan by an index on ``key`` before testing the filter itself. Of several pins ANDed (an
    access scope's folder and the caller's subfolder) the narrowest is given."""
    if not filter:
        return None
    pins: list[list[str]] = []
    for name, value in filter.items():
        if name == "$and":
            pins.extend(found for sub in value if (found := text_prefixes(sub, key)))
        elif name == "$or":
            branches = [text_prefixes(sub, key) for sub in value]
            if branches and all(b is not None for b in branches):
                pins.append([p for b in branches for p in b])  # type: ignore[union-attr]
        elif name == key:
            for op, operand in (value if isinstance(value, dict) else {"$eq": value}).items():
                if op in ("$eq", "$prefix") and isinstance(operand, str) and operand:
                    pins.append([operand])
                elif op == "$in" and operand and all(isinstance(v, str) and v for v in operand):
                    pins.append(list(operand))
    for pin in pins:  # one that lies within every other, if any
        if all(other is pin or _within(pin, other) for other in pins):
            return pin
    return pins[0] if pins else None


def minimal_prefixes(prefixes: list[str]) -> list[str]:
    """The distinct ``prefixes`` that do not start with another of them, sorted: the same
    strings start with one of them (``/docs/`` covers ``/docs/admin/``)."""
    kept: list[str] = []
    for prefix in sorted(set(prefixes)):
        # sorted, every string starting with a kept prefix follows it directly
        if not kept or not prefix.startswith(kept[-1]):
            kept.append(prefix)
    return kept


def _within(pin: list[str], other: list[str]) -> bool:
    """True when each string of ``pin`` starts with one of ``other`` (n log n: in a sorted
    prefix-free list, a prefix of ``p`` is the greatest entry not above ``p``)."""
    import bisect

    cover = minimal_prefixes(other)
    for p in pin:
        at = bisect.bisect_right(cover, p) - 1
        if at < 0 or not p.startswith(cover[at]):
            return False
    return True


def filter_keys(filter: dict[str, Any] | None) -> list[str]:
    """The metadata keys ``filter`` tests, in order of first use, through ``$and``/``$or``."""
    keys: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if key in LOGICAL_OPERATORS:
                for sub in value:
                    walk(sub)
            elif key not in keys:
                keys.append(key)

    walk(filter or {})
    return keys


def after_prefix(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (code point
    order, which is UTF-8 byte order), or None when there is none."""
    for cut in range(len(prefix) - 1, -1, -1):
        point = ord(prefix[cut]) + 1
        if 0xD800 <= point <= 0xDFFF:  # surrogates cannot be encoded: skip past them
            point = 0xE000
        if point <= 0x10FFFF:
            return prefix[:cut] + chr(point)
    return None


MAX_SOURCE_RANGES = 64  # past this many pinned sources a filter is tested on every row


def source_ranges(
    filter: dict[str, Any] | None, column: str, mark: str
) -> tuple[str, list[Any]] | None:
    """``(sql, params)``: ranges on an indexed ``column`` of sources covering every text value
    and prefix ``filter`` pins ``source`` to (:func:`text_prefixes`, bounded by
    :func:`after_prefix`), ORed, with ``mark`` the dialect's placeholder; None when it pins
    none or more than :data:`MAX_SOURCE_RANGES`. A statement leads with it and still tests the
    whole filter on each row it reads."""
    prefixes = text_prefixes(filter, "source")
    if not prefixes or len(prefixes) > MAX_SOURCE_RANGES:
        return None
    ranges: list[str] = []
    bounds: list[Any] = []
    for prefix in dict.fromkeys(prefixes):
        end = after_prefix(prefix)
        if end is None:
            ranges.append(f"{column} >= {mark}")
            bounds.append(prefix)
        else:
            ranges.append(f"({column} >= {mark} AND {column} < {mark})")
            bounds.extend((prefix, end))
    return f"({' OR '.join(ranges)})", bounds


# --- compilation to SQL: one tree walker; the SQLite operators over a JSON column --------


SQL_FAN = 64  # terms per parenthesised group of a long AND/OR (see balanced)


def balanced(parts: list[str], joiner: str) -> str:
    """``parts`` joined by ``joiner`` (`` OR ``, `` AND ``), in parenthesised groups of at
    most :data:`SQL_FAN` when there are more (the caller brackets the whole). SQLite refuses
    an expression deeper than 1000 and a chain of N ORs is N deep (``--in`` given 1,000 times
    failed); grouped, 10,000 terms are 3 x 64 deep. Terms stay in order, so bound parameters
    keep their positions; parentheses are spent only where needed, since SQLite's parser
    also has a small stack for nesting."""
    while len(parts) > SQL_FAN:
        parts = [
            "(" + joiner.join(parts[i : i + SQL_FAN]) + ")" for i in range(0, len(parts), SQL_FAN)
        ]
    return joiner.join(parts)


def compile_tree(
    filter: dict[str, Any], condition: Callable[[str, str, Any, list[Any]], str], true: str
) -> tuple[str, list[Any]]:
    """``(sql, params)`` for a validated ``filter``: ``$and``/``$or`` joined, each key's
    operators ANDed, and ``condition(key, op, operand, params)`` writing one operator's SQL
    (appending its bound values to ``params``). ``true`` is the dialect's always-true SQL."""
    params: list[Any] = []

    def walk(node: dict[str, Any]) -> str:
        parts: list[str] = []
        for key, value in node.items():
            if key in LOGICAL_OPERATORS:
                joiner = " AND " if key == "$and" else " OR "
                parts.append("(" + balanced([walk(sub) for sub in value], joiner) + ")")
                continue
            ops = value if isinstance(value, dict) else {"$eq": value}
            parts.extend(condition(key, op, operand, params) for op, operand in ops.items())
        if len(parts) == 1:  # a condition or a bracketed $and/$or: whole already
            return parts[0]
        return "(" + balanced(parts, " AND ") + ")" if parts else true

    return walk(filter), params


def compile_sql(filter: dict[str, Any] | None, column: str = "metadata") -> tuple[str, list[Any]]:
    """Return ``(sql, params)``: a boolean SQL expression equivalent to :func:`matches`.

    ``column`` is a trusted column name chosen by the caller, never user input.
    """
    if not filter:
        return "1", []
    return compile_tree(
        filter, lambda key, op, operand, params: _compile_op(column, key, op, operand, params), "1"
    )


def _path(key: str) -> str:
    # SQLite matches a quoted path label against the key as JSON spells it: a backslash is
    # stored escaped (keys with quotes or control characters are refused earlier).
    return '$."' + key.replace("\\", "\\\\") + '"'


def _typed_equal(column: str, key: str, value: Any, params: list[Any]) -> str:
    # coalesce: a missing key yields NULL, and NOT NULL would drop it from $ne / $nin.
    return f"coalesce({_typed_equal_raw(column, key, value, params)}, 0)"


def _typed_equal_raw(column: str, key: str, value: Any, params: list[Any]) -> str:
    kind = _kind(value)
    if kind == "null":
        params.append(_path(key))
        return f"json_type({column}, ?) = 'null'"
    if kind == "bool":
        params.append(_path(key))
        return f"json_type({column}, ?) = '{'true' if value else 'false'}'"
    if kind == "number":
        params.extend([_path(key), _path(key), value])
        return f"(json_type({column}, ?) IN ('integer', 'real') AND json_extract({column}, ?) = ?)"
    params.extend([_path(key), _path(key), value])
    return f"(json_type({column}, ?) = 'text' AND json_extract({column}, ?) = ?)"


def _typed_any(column: str, key: str, values: Any, params: list[Any]) -> str:
    """Typed equality with any of ``values``: the text values in one ``IN`` list, the numbers
    in another (SQLite tests a list in log time; an OR per value made every row pay for
    every value), true, false and null each on their own."""
    parts = []
    for kind, types in (("text", "= 'text'"), ("number", "IN ('integer', 'real')")):
        same = [v for v in values if _kind(v) == kind]  # kept as given: the SQL's shape
        # depends on the number of values, never on what they are
        if same:
            params.extend([_path(key), _path(key), *same])
            marks = ", ".join("?" * len(same))
            parts.append(
                f"coalesce(json_type({column}, ?) {types}"
                f" AND json_extract({column}, ?) IN ({marks}), 0)"
            )
    for value in values:
        if _kind(value) not in ("text", "number"):
            parts.append(_typed_equal(column, key, value, params))
    return "(" + balanced(parts, " OR ") + ")"


def _compile_op(column: str, key: str, op: str, operand: Any, params: list[Any]) -> str:
    if op == "$eq":
        return _typed_equal(column, key, operand, params)
    if op == "$ne":
        return "NOT " + _typed_equal(column, key, operand, params)
    if op in ("$in", "$nin"):
        inner = _typed_any(column, key, operand, params)
        return inner if op == "$in" else f"NOT {inner}"
    if op == "$exists":
        params.append(_path(key))
        return f"(json_type({column}, ?) IS {'NOT ' if operand else ''}NULL)"
    if op == "$prefix":
        params.extend([_path(key), _path(key), operand, operand])
        return (
            f"coalesce(json_type({column}, ?) = 'text'"
            f" AND substr(json_extract({column}, ?), 1, length(?)) = ?, 0)"
        )
    types = "('integer', 'real')" if _kind(operand) == "number" else "('text')"
    params.extend([_path(key), _path(key), operand])
    return (
        f"coalesce(json_type({column}, ?) IN {types} AND json_extract({column}, ?) {_ORDER[op]} ?,"
        " 0)"
    )


def dumps_metadata(metadata: dict[str, Any]) -> str:
    """JSON for a metadata dict (non-JSON values are stored as their string form)."""
    return json.dumps(metadata, ensure_ascii=False, default=str, separators=(",", ":"))


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


def parse_filter_expressions(exprs: list[str] | tuple[str, ...] | None) -> dict[str, Any] | None:
    """Turn repeated ``--filter`` expressions into one filter (all must hold); None for none.

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
    result = filters[0] if len(filters) == 1 else {"$and": filters}
    return validate_filter(result)


_JSON_NUMBER = re.compile(r"^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$")
META_TYPES_HELP = (
    "Values that are JSON numbers (2024, -3, 1.5) or true/false are stored typed, so "
    "--filter year>=2024 compares numbers; quote a value to keep it text: 'code=\"2024\"'."
)


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
    from .errors import InvalidOptionError

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


def with_source_paths(filter: dict[str, Any] | None, resolve: Any) -> dict[str, Any] | None:
    """``filter`` where every text value compared with ``source`` (``=``, ``!=``, any of,
    none of) also matches ``resolve(value)``: ``source=docs/a.md`` finds the file that ingest
    recorded as ``/home/me/docs/a.md``, as ``kb list --source docs/a.md`` does. A value that
    resolves to itself (an absolute path, or a non-path source such as ``chat``) is unchanged.
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

    return walk(filter)


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

"""Metadata filters compiled to SQLite SQL over a JSON ``metadata`` column, and what a store
needs to narrow a filtered scan first (the text prefixes a filter pins a key to, source
ranges). Keys and values are bound as parameters, never spliced into SQL text; the semantics
are :func:`kbcli.filters.model.matches`'s (a differential test holds every store to them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from kbcli.filters.model import _ORDER, LOGICAL_OPERATORS, _kind


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


def _typed_any(column: str, key: str, values: Sequence[Any], params: list[Any]) -> str:
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

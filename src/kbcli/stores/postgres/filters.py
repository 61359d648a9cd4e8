"""Metadata filters compiled to PostgreSQL over a JSONB column, equivalent to
:func:`kbcli.filters.model.matches`.

Every key and value is a bound parameter (``%s``); only the trusted column name is written into
the SQL. Equality is jsonb equality, which is typed (``1`` is not ``"1"``, ``true`` is not
``1``; ``1`` equals ``1.0`` as in Python); a missing key makes ``->`` return SQL NULL, which the
``coalesce`` turns into "no match", so ``$ne`` and ``$nin`` match documents without the key.
Ordering compares numbers with numbers (jsonb numeric order) and strings with strings in code
point order (``COLLATE "C"`` on UTF-8 bytes), guarded by ``CASE`` so that no other value is
compared or cast. ``$prefix`` is ``starts_with`` on string values (code points, no wildcards).
A filter this module does not know fails closed with :class:`FilterError`.

:func:`scan_filter` is the form for a statement that would otherwise read every chunk: when the
filter pins ``source`` to text (``kb search --in``, an access scope, a value or ``$in`` of
values), a range on the chunk table's ``source`` column leads it, so PostgreSQL reads only those
sources' rows through its index; the whole filter is still tested on each. The column and its
index are ``COLLATE "C"`` (code point order, which is what ``after_prefix`` bounds): under a
locale collation a range would miss rows, and an index of another collation is not used.
"""

from __future__ import annotations

import json
import math
from typing import Any

from kbcli.errors import FilterError
from kbcli.filters.model import ensure_checked
from kbcli.filters.sql import compile_tree, source_ranges

_ORDER = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def compile_filter(
    filter: dict[str, Any] | None, column: str = "metadata"
) -> tuple[str, list[Any]]:
    """``(sql, params)``: a boolean expression over the JSONB ``column``; ``TRUE`` for none."""
    filter = ensure_checked(filter)
    if not filter:
        return "TRUE", []
    return compile_tree(
        filter,
        lambda key, op, operand, params: _compile_op(column, key, op, operand, params),
        "TRUE",
    )


def scan_filter(filter: dict[str, Any] | None, alias: str = "c.") -> tuple[str, list[Any]]:
    """``(sql, params)``: :func:`compile_filter` on ``{alias}metadata``, led by a range on the
    indexed ``{alias}source`` when ``filter`` pins ``source`` to text values or prefixes."""
    where, params = compile_filter(filter, f"{alias}metadata")
    ranges = source_ranges(ensure_checked(filter), f'{alias}source COLLATE "C"', "%s::text")
    if ranges is None:
        return where, params
    return f"{ranges[0]} AND {where}", [*ranges[1], *params]


def _scalar(value: Any) -> str:
    if not isinstance(value, (str, int, float, bool, type(None))) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise FilterError(f"Unsupported filter value {value!r}: use a finite number or a string")
    return json.dumps(value)


def _equal(column: str, key: str, value: Any, params: list[Any]) -> str:
    params.extend([key, _scalar(value)])
    return f"coalesce(({column} -> %s::text) = %s::jsonb, FALSE)"


def _compile_op(column: str, key: str, op: str, operand: Any, params: list[Any]) -> str:
    if op == "$eq":
        return _equal(column, key, operand, params)
    if op == "$ne":
        return "NOT " + _equal(column, key, operand, params)
    if op in ("$in", "$nin"):
        inner = " OR ".join(_equal(column, key, item, params) for item in operand)
        return f"({inner})" if op == "$in" else f"NOT ({inner})"
    if op == "$exists":
        params.append(key)
        return f"(({column} -> %s::text) IS {'NOT ' if operand else ''}NULL)"
    if op == "$prefix":
        if not isinstance(operand, str):
            raise FilterError(f"$prefix on {key!r} needs a string, got {operand!r}")
        params.extend([key, key, operand])
        return (
            f"(CASE WHEN jsonb_typeof({column} -> %s::text) = 'string' THEN"
            f" starts_with({column} ->> %s::text, %s::text) ELSE FALSE END)"
        )
    if op in _ORDER:
        sign = _ORDER[op]
        if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
            raise FilterError(f"{op} on {key!r} needs a number or a string, got {operand!r}")
        if isinstance(operand, str):
            params.extend([key, key, operand])
            return (
                f"(CASE WHEN jsonb_typeof({column} -> %s::text) = 'string' THEN"
                f' ({column} ->> %s::text) COLLATE "C" {sign} %s::text COLLATE "C"'
                " ELSE FALSE END)"
            )
        params.extend([key, key, _scalar(operand)])
        return (
            f"(CASE WHEN jsonb_typeof({column} -> %s::text) = 'number' THEN"
            f" ({column} -> %s::text) {sign} %s::jsonb ELSE FALSE END)"
        )
    raise FilterError(f"Unsupported filter operator {op!r} on {key!r}")

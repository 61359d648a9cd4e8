"""Metadata filters compiled to a Chroma ``where``, and the metadata Chroma can hold.

:func:`compile_where` raises :class:`~kbcli.errors.FilterError` for what ``where`` cannot
express exactly; the Chroma store then scans the allowed chunks' vectors from the catalog
instead, so a filter never means something else there.
"""

from __future__ import annotations

from typing import Any

from kbcli.errors import FilterError
from kbcli.filters.model import ensure_checked


def compile_where(filter: dict[str, Any] | None) -> dict[str, Any] | None:
    """A Chroma ``where`` equivalent to the kbcli ``filter`` (see :mod:`kbcli.filters.model`).

    Covers ``$eq $ne $in $nin $gt $gte $lt $lte`` on strings, numbers and booleans and
    ``$and``/``$or``; raises :class:`FilterError` for what Chroma cannot express (``$exists``,
    ``$prefix``, ``null`` operands, ranges over strings, numbers Chroma does not compare
    exactly (fractions, beyond 2**53), keys it cannot store), so a caller
    never runs a filter that means something else.
    """
    filter = ensure_checked(filter)
    if not filter:
        return None
    where = _conjunction([_clause(key, value) for key, value in filter.items()])
    if _conditions(where) > MAX_WHERE_CONDITIONS:
        raise FilterError(f"Chroma cannot run more than {MAX_WHERE_CONDITIONS} conditions")
    return where


# Chroma turns each condition of a ``where`` into an SQLite expression of its own and refuses a
# tree deeper than SQLite's 1,000 (an $or of 1,000 values): bigger filters are scanned exactly.
MAX_WHERE_CONDITIONS = 500


def _conditions(where: dict[str, Any]) -> int:
    """How many ``{key: {op: operand}}`` conditions a compiled ``where`` holds."""
    return sum(
        sum(_conditions(sub) for sub in value) if key in ("$and", "$or") else 1
        for key, value in where.items()
    )


def _conjunction(parts: list[dict[str, Any]], op: str = "$and") -> dict[str, Any]:
    return parts[0] if len(parts) == 1 else {op: parts}


def _clause(key: str, value: Any) -> dict[str, Any]:
    if key in ("$and", "$or"):
        subs = [_conjunction([_clause(k, v) for k, v in sub.items()]) for sub in value]
        return _conjunction(subs, key)
    ops = value if isinstance(value, dict) else {"$eq": value}
    return _conjunction([_operator(key, op, operand) for op, operand in ops.items()])


def _operator(key: str, op: str, operand: Any) -> dict[str, Any]:
    if not _storable_key(key):
        raise FilterError(f"Chroma cannot store or filter on the key {key[:40]!r}")
    if op == "$exists":
        raise FilterError(f"Chroma cannot filter on whether {key!r} exists")
    if op == "$prefix":
        raise FilterError(f"Chroma cannot filter on a prefix of {key!r}")
    items = operand if op in ("$in", "$nin") else [operand]
    for item in items:
        if item is None:
            raise FilterError(f"Chroma cannot compare {key!r} with null")
    if op in ("$gt", "$gte", "$lt", "$lte") and isinstance(operand, str):
        raise FilterError(f"Chroma cannot order strings ({op} on {key!r})")
    if not all(_exact_in_chroma(item) for item in items):
        raise FilterError(f"Chroma cannot compare {key!r} exactly with {operand!r}")
    if op in ("$in", "$nin"):
        # Chroma wants one type per list: split by type ($in: any group, $nin: every group)
        groups: dict[type, list[Any]] = {}
        for item in items:
            groups.setdefault(type(item), []).append(item)
        parts = [{key: {op: group}} for group in groups.values()]
        return _conjunction(parts, "$or" if op == "$in" else "$and")
    return {key: {op: operand}}


def _exact_in_chroma(value: Any) -> bool:
    """Chroma converts a number to the type of the value it meets: 0.5 equals 0 and 1e300
    equals 2**63 - 1 against whole numbers, and integers beyond 2**53 round against floats.
    Whole numbers up to 2**53 (int or float) compare exactly."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return float(value).is_integer() and abs(value) <= 2**53


def chroma_metadata(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The scalar part of a chunk's metadata (what Chroma can store and ``where`` can test);
    None when nothing is left (Chroma refuses empty metadata)."""
    out = {
        k: v
        for k, v in metadata.items()
        if isinstance(v, (str, int, float, bool)) and _storable_key(k)
    }
    return out or None


def _storable_key(key: str) -> bool:
    """Chroma refuses empty keys and keys starting with ``#`` or ``$`` (its own names); such
    keys stay in the catalog, and a filter on them runs as an exact scan over it."""
    return bool(key) and not key.startswith(("#", "$"))

"""Metadata filters: what one is (validation) and what passes it (matching in Python).

Compilation to SQL is :mod:`kbcli.filters.sql`; the command-line syntax (``key=value``,
``--meta``, ``--in``) is :mod:`kbcli.filters.syntax`.

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

import math
from typing import Any, NoReturn

from kbcli.errors import FilterError
from kbcli.system.paths import normal_source

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


class CheckedFilter(dict[str, Any]):
    """A filter :func:`validate_filter` has accepted, frozen: made once where a filter enters
    kb (the CLI, a tool, MCP, the library) and passed down, so the layers below (views,
    retrievers, stores) take it as it is instead of checking it again. Read it like any dict;
    changing it raises TypeError (build a new filter instead)."""

    __slots__ = ()

    def _frozen(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a checked filter cannot be changed: build a new filter dict")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _frozen
    __ior__ = _frozen

    def __reduce__(self) -> tuple[type[CheckedFilter], tuple[dict[str, Any]]]:
        return (CheckedFilter, (dict(self),))


def _copied(value: Any) -> Any:
    """``value`` with every dict and list in it copied (the caller keeps its own objects)."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


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


def ensure_checked(filter: Any) -> CheckedFilter | None:
    """``filter`` itself when it is a :class:`CheckedFilter` (an empty one is None), else
    :func:`validate_filter` of it: what a public seam taking either (a store) calls, so a
    filter checked where it entered kb is never checked again."""
    if filter is None:
        return None
    if type(filter) is CheckedFilter:
        return filter or None
    return validate_filter(filter)


def validate_filter(filter: Any) -> CheckedFilter | None:
    """``filter`` as a :class:`CheckedFilter` if well formed (None and {} mean no filter: None);
    else raise FilterError. A :class:`CheckedFilter` is returned as it is, unchecked.

    A filter holds at most :data:`MAX_FILTER_CONDITIONS` conditions (each value of an ``$in``
    or ``$nin`` list counts as one) and nests ``$and``/``$or`` at most
    :data:`MAX_FILTER_DEPTH` deep."""
    if filter is None:
        return None
    if type(filter) is CheckedFilter:
        return filter or None
    if not isinstance(filter, dict):
        raise FilterError(f"A filter must be a dict like {{'source': 'a.md'}}, got {filter!r}")
    conditions = _check(filter, 1)
    if conditions > MAX_FILTER_CONDITIONS:
        raise FilterError(
            f"The filter holds {conditions} conditions (each $in/$nin value counts as one): at "
            f"most {MAX_FILTER_CONDITIONS}; match what they share instead (a folder with "
            "$prefix, a metadata key)"
        )
    return CheckedFilter(_copied(filter)) if filter else None


PATH_KEYS = ("source",)  # keys whose text values are paths (compared in their canonical form)


def canonical_paths(filter: CheckedFilter | None) -> CheckedFilter | None:
    """A checked ``filter`` with every text it compares with a path key (``source``: a value,
    ``$eq``, ``$ne``, ``$in``, ``$nin``, ``$prefix``) in its canonical form
    (:func:`kbcli.system.paths.normal_source`: ``/docs/beta/./b.md`` is ``/docs/beta/b.md``), so a
    scope or a caller's condition means the path it names, as the index records it. Returns
    ``filter`` itself when nothing changes."""
    if not filter:
        return filter or None

    def path(value: Any) -> Any:
        return normal_source(value) if isinstance(value, str) else value

    def walk(node: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in LOGICAL_OPERATORS:
                out[key] = [walk(sub) for sub in value]
            elif key not in PATH_KEYS:
                out[key] = value
            elif isinstance(value, dict):
                out[key] = {
                    op: [path(v) for v in operand] if isinstance(operand, list) else path(operand)
                    for op, operand in value.items()
                }
            else:
                out[key] = path(value)
        return out

    changed = walk(filter)
    return filter if changed == filter else CheckedFilter(changed)


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
    return actual is not _MISSING and _kind(actual) == _kind(expected) and bool(actual == expected)


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
        return bool((actual is not _MISSING) == operand)
    if op == "$prefix":
        return isinstance(actual, str) and actual.startswith(operand)
    kind = _kind(operand)
    if actual is _MISSING or _kind(actual) != kind:
        return False
    if op == "$gt":
        return bool(actual > operand)
    if op == "$gte":
        return bool(actual >= operand)
    if op == "$lt":
        return bool(actual < operand)
    return bool(actual <= operand)


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

"""Why a search found nothing, when its filter is the likely cause: a folder or file nothing is
indexed under, or a metadata key no chunk has (``kb search`` and ``knowledge_search`` say so).

The checks read through a *view*: a :class:`~kbcli.protocols.DocumentCatalog` store (the whole
index, as ``kb search`` sees it) or a :class:`~kbcli.views.KnowledgeView` over one (a scope: what
an agent tool's caller may see), so a scoped caller's answer depends only on chunks inside its
scope. A source costs one count (in SQLite a range on the source index); a key, a scan that stops
at the first chunk having it. Callers run them only after a search came back empty.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypeVar

from kbcli.filters.model import LOGICAL_OPERATORS, filter_keys
from kbcli.protocols import DocumentCatalog, supports
from kbcli.types import Document
from kbcli.views import KnowledgeView

Label = TypeVar("Label")


class Readable(Protocol):
    """What the checks read: counts and documents passing a filter."""

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """How many chunks pass ``filter``."""
        ...

    def iter_documents(
        self,
        filter: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Document]:
        """The chunks passing ``filter``, at most ``limit``."""
        ...


def _readable(view: object) -> Readable | None:
    """What the checks read: ``view`` when it is a ``DocumentCatalog`` store or a scoped view
    over one; None otherwise (a plugin store may only search, and reading all of its
    ``list_all`` to explain an empty answer would cost more than the search did)."""
    if isinstance(view, KnowledgeView):
        return view if supports(view.kb.store, DocumentCatalog) else None
    return view if supports(view, DocumentCatalog) else None


def unindexed(view: object, wheres: Sequence[tuple[Label, dict[str, Any] | None]]) -> list[Label]:
    """The labels of ``(label, filter)`` pairs whose filter no chunk in ``view`` passes (each a
    folder or file, e.g. :func:`~kbcli.filters.syntax.under_folders`); [] when ``view`` cannot
    tell."""
    found = _readable(view)
    if found is None:
        return []
    return [label for label, where in wheres if not found.count(where)]


def unknown_keys(view: object, filter: dict[str, Any] | None, most: int | None = None) -> list[str]:
    """The keys ``filter`` tests (the first ``most`` of them, when given) that no chunk in
    ``view`` has; [] when ``view`` cannot tell. An unknown key reads every chunk in ``view``."""
    found = _readable(view)
    if found is None:
        return []

    def used(key: str) -> bool:  # stops at the first chunk that has it
        return any(True for _ in found.iter_documents({key: {"$exists": True}}, limit=1))

    return [key for key in filter_keys(filter)[:most] if not used(key)]


def source_pins(filter: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The files and folders ``filter`` names, anywhere in its ``$and``/``$or`` tree, as
    ``("at '/docs/a.md'", {"source": "/docs/a.md"})`` for a value it equals (``$eq``, ``$in``)
    and ``("under '/docs/'", {"source": {"$prefix": "/docs/"}})`` for a ``$prefix``."""
    pins: list[tuple[str, dict[str, Any]]] = []

    def add(label: str, where: dict[str, Any]) -> None:
        if (label, where) not in pins:
            pins.append((label, where))

    def walk(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if key in LOGICAL_OPERATORS:
                for sub in value:
                    walk(sub)
            elif key == "source":
                tests = value if isinstance(value, dict) else {"$eq": value}
                for op, operand in tests.items():
                    values = operand if op == "$in" and isinstance(operand, list) else [operand]
                    for text in values:
                        if not isinstance(text, str) or not text:
                            continue
                        if op in ("$eq", "$in"):
                            add(f"at {quoted(text)}", {"source": text})
                        elif op == "$prefix":
                            add(f"under {quoted(text)}", {"source": {"$prefix": text}})

    walk(filter or {})
    return pins


def listed(parts: Sequence[str], most: int = 3) -> str:
    """``a, b, c and 2 more``: at most ``most`` of ``parts`` on one line."""
    more = f" and {len(parts) - most} more" if len(parts) > most else ""
    return ", ".join(parts[:most]) + more


def quoted(value: str, width: int = 80) -> str:
    """``value`` quoted on one line (control characters escaped, a long one cut), for a
    message that lands in a model's context."""
    return repr(value if len(value) <= width else value[: width - 1] + "…")

"""Access scopes: ``KnowledgeBase.scoped(filter)`` returns a :class:`ScopedKnowledgeBase`, a
read-only view (:class:`~kbcli.views.KnowledgeView`) that only ever sees the documents passing
one filter, on every search route, listing, count and lookup, and that can answer questions
and become an agent tool inside it.

The view's reads are :mod:`kbcli.views`; this module adds what is built on views (``ask``,
``as_tool``), for scopes and for the knowledge base alike (:class:`ViewEntryPoints`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kbcli.types import SearchOptions
from kbcli.views import KnowledgeView, and_filters, as_view, file_text, join_chunks

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.agent.answer import Answer
    from kbcli.agent.tools.read import KnowledgeSearchTool

__all__ = [
    "KnowledgeView", "ScopedKnowledgeBase", "ViewEntryPoints", "and_filters", "as_view",
    "file_text", "join_chunks",
]  # fmt: skip


class ViewEntryPoints:
    """``ask`` and ``as_tool`` over ``self`` (a :class:`~kbcli.pipeline.KnowledgeBase` or a
    :class:`ScopedKnowledgeBase`): the answer and tool layers, built on views, reached from the
    objects users hold. ``self.scoped(filter)`` narrows."""

    if TYPE_CHECKING:  # each class using it has its own

        def scoped(self, filter: dict[str, Any]) -> Any: ...

    def ask(
        self,
        question: str,
        k: int = 8,
        mode: str = "hybrid",
        filter: dict[str, Any] | None = None,
        *,
        model: str | None = None,
        prompt: str | None = None,
        strict: bool = False,
        min_coverage: float | None = None,
        on_text: Callable[[str], None] | None = None,
        chat: Any = None,
        dry_run: bool = False,
        **options: Any,
    ) -> Answer:
        """Answer ``question`` from the best ``k`` passages, citing them as ``[n]``, or refuse
        without calling the model when none is good enough (``rag.answer``; see
        :func:`kbcli.agent.answer.ask`). In a scope only passages inside it count (the search, the
        term weights and a refusal's hints read nothing outside it; ``filter`` only narrows).
        Extra keyword arguments are :class:`~kbcli.types.SearchOptions` fields. Returns a
        :class:`~kbcli.agent.answer.Answer`."""
        from kbcli.agent.answer import ask

        return ask(
            as_view(self),
            question,
            SearchOptions(k=k, mode=mode, filter=filter, **options),
            model=model,
            prompt=prompt,
            strict=strict,
            min_coverage=min_coverage,
            on_text=on_text,
            chat=chat,
            dry_run=dry_run,
        )

    def as_tool(self, filter: dict[str, Any] | None = None, **options: Any) -> KnowledgeSearchTool:
        """This knowledge base or view as a :class:`~kbcli.agent.tools.read.KnowledgeSearchTool` for
        agents; with ``filter`` the tool reads through :meth:`scoped` and no argument can widen
        it."""
        from kbcli.agent.tools.read import KnowledgeSearchTool

        return KnowledgeSearchTool(self.scoped(filter) if filter else as_view(self), **options)


class ScopedKnowledgeBase(KnowledgeView, ViewEntryPoints):
    """A read-only view of ``kb`` restricted to the documents that pass ``filter`` (see
    :class:`~kbcli.views.KnowledgeView`), with ``ask`` and ``as_tool`` inside it.

    Every method takes the same arguments as its counterpart on the knowledge base (or its
    store) and applies the scope first. A hidden document is indistinguishable from one that
    does not exist. Writes are not offered: a scope is for readers (agents, tenants).
    :meth:`KnowledgeBase.scoped` insists on a non-empty filter.
    """

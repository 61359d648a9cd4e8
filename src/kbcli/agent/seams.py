"""What the agent surfaces (tools, ``kb get``, ``kb ask``, MCP) need of a knowledge base, as
protocols: they read through a :class:`~kbcli.views.KnowledgeView`, and know the knowledge
base under it only by these few members, so nothing here imports the
:class:`~kbcli.pipeline.KnowledgeBase` facade."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from kbcli.ingest.pipeline import Loader
from kbcli.views import KnowledgeView


@runtime_checkable
class NoteBase(Protocol):
    """A knowledge base an agent may write notes to (``knowledge_add``/``knowledge_delete``)."""

    def add(self, text: str, metadata: dict[str, Any] | None = None, id: str | None = None) -> str:
        """Store ``text`` as one document (not chunked); its id."""
        ...

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id; True when at least one existed."""
        ...


@runtime_checkable
class FileSource(Protocol):
    """A knowledge base whose files can be read again as ingest read them (``kb get``)."""

    @property
    def loader(self) -> Loader:
        """What loads its files: the loader ingest uses (a reader builds no ingest pipeline)."""
        ...


def note_base(view: KnowledgeView) -> NoteBase:
    """The knowledge base under ``view``, to write to (TypeError when it takes no notes)."""
    kb = view.kb
    if not isinstance(kb, NoteBase):
        raise TypeError(f"{type(kb).__name__} takes no notes (it has no add and delete)")
    return kb

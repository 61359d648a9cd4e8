"""What every agent tool shares (:mod:`kbcli.agent.tools.read`, :mod:`kbcli.agent.tools.write`): the
:class:`KnowledgeTool` base (schema forms, argument checks, the never-raising ``call``), its
:class:`ToolResult` and :class:`Citation`, and the argument checks."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from kbcli.errors import InvalidOptionError, KBError
from kbcli.search.freshness import state_words
from kbcli.search.place import hit_line, location
from kbcli.types import Freshness, SearchResult, note_author
from kbcli.views import KnowledgeView, Reader, as_view

MAX_QUERY_CHARS = 2000
MAX_ID_CHARS = 200

logger = logging.getLogger("kbcli.agent.tools.read")


class ToolArgumentError(InvalidOptionError):
    """A tool was called with arguments its schema does not allow."""


@dataclass
class Citation:
    """Where one hit comes from: its number in the answer, chunk id, source, page, heading,
    the line it is for (``line``: its best-matching line, as ``kb search`` shows it) and the
    lines of the file its passage covers (``line_start``-``line_end``): the numbers of
    ``kb get`` and of knowledge_get's ``start_line``; for an agent's note (``note_by``: its
    writer) only the note, its writer and source, never a place in a file."""

    number: int
    id: str
    text: str
    source: str | None = None
    page: Any = None  # the chunk's metadata value: an int from the loaders, else as given
    heading: str | None = None
    score: float | None = None
    line: int | None = None
    line_end: int | None = None
    note_by: str | None = None
    line_start: int | None = None
    freshness: Freshness | None = None

    @classmethod
    def from_result(cls, number: int, hit: SearchResult) -> Citation:
        meta = hit.document.metadata
        source = meta.get("source")
        heading = meta.get("heading")
        start, line_end = meta.get("line"), meta.get("line_end")
        author = note_author(meta)
        if author is not None:  # a note is not a place in a file, whatever it claims
            return cls(
                number=number,
                id=hit.document.id,
                text=hit.document.text,
                source=str(source) if source is not None else None,
                score=hit.score,
                note_by=author,
                freshness=hit.freshness,
            )
        line = hit_line(hit)
        return cls(
            number=number,
            id=hit.document.id,
            text=hit.document.text,
            source=str(source) if source is not None else None,
            page=meta.get("page"),
            heading=str(heading) if heading else None,
            score=hit.score,
            line=line if _line_number(line) else None,
            line_end=line_end if _line_number(line_end) else None,
            line_start=start if _line_number(start) else None,
            freshness=hit.freshness,
        )

    @property
    def state_words(self) -> str | None:
        """What the citation's freshness says beside its source (:func:`state_words`)."""
        return state_words(self.freshness)

    @property
    def location(self) -> str | None:
        """``path:line`` or ``path#page=N``, as ``kb search`` shows the hit; ``note by NAME:
        source`` for a note (None: no source)."""
        note = None if self.note_by is None else f"note by {self.note_by}"
        if self.source is None:
            return note
        page = self.page if _line_number(self.page) else None
        return location(self.source, self.line, page, note)

    def label(self) -> str:
        """``source: /docs/a.md, line 14 (lines 12-18), page 2, heading: Install > Linux; id:
        3f2a...``: the line the hit is for, then the lines its passage covers (``lines 12-18``
        alone when the hit is for the passage's first line); for a note ``note by acme,
        source: /docs/a-topic; id: 3f2a...``."""
        where = []
        if self.note_by is not None:
            where.append(f"note by {self.note_by}")
        if self.source:
            words = self.state_words
            where.append(f"source: {self.source}" + (f" ({words})" if words else ""))
            if self.line is not None:
                start = self.line if self.line_start is None else self.line_start
                end = self.line if self.line_end is None else max(self.line_end, self.line)
                span = f"lines {start}-{end}" if end > start else f"line {start}"
                where.append(span if start == self.line else f"line {self.line} ({span})")
        if self.page is not None and self.page != "":
            where.append(f"page {self.page}")
        if self.heading:
            where.append(f"heading: {self.heading}")
        return "; ".join(part for part in (", ".join(where), f"id: {self.id}") if part)

    def to_dict(self) -> dict[str, Any]:
        """The citation as JSON-ready data; ``freshness`` (``{state, indexed_at}``) only when
        the passage may not be what its file says now (changed, missing, vector pending)."""
        return {
            "number": self.number,
            "id": self.id,
            "source": self.source,
            "location": self.location,
            "page": self.page,
            "heading": self.heading,
            "line": self.line,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "note_by": self.note_by,
            **(
                {"freshness": self.freshness.as_json()}
                if self.freshness and self.state_words
                else {}
            ),
        }


@dataclass
class ToolResult:
    """What a tool call gives back: the text for the model, the citations behind it, and
    whether it is an error text."""

    text: str
    citations: list[Citation] = field(default_factory=list)
    is_error: bool = False


def _line_number(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def error_result(message: str) -> ToolResult:
    return ToolResult(message if message.startswith("Error:") else f"Error: {message}", [], True)


def reader_of(view: Reader) -> KnowledgeView:
    """``view`` itself when it is a view (a scope), else an unrestricted view of the knowledge
    base."""
    return as_view(view)


def whole_number(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolArgumentError(
            f"{name} must be a whole number from {low} to {high}, got {value!r}"
        )
    return value


def text_argument(name: str, value: object, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolArgumentError(f"{name} must be a non-empty string, got {value!r}"[:200])
    if len(value) > limit:
        raise ToolArgumentError(f"{name} is too long ({len(value)} characters; at most {limit})")
    return value


class KnowledgeTool:
    """What every knowledge tool shares: schema forms, argument checks and the error path.

    Subclasses set ``name``, ``description``, :attr:`input_schema` and implement
    ``_call(arguments) -> ToolResult``.
    """

    name = "knowledge_tool"
    description = ""

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the tool's arguments."""
        return {"type": "object", "properties": {}, "additionalProperties": False}

    @property
    def parameters(self) -> dict[str, Any]:
        """Alias of :attr:`input_schema` (the name some agent frameworks use)."""
        return self.input_schema

    @property
    def accepted(self) -> tuple[str, ...]:
        """Argument names the tool takes."""
        return tuple(self.input_schema["properties"])

    def json_schema(self) -> dict[str, Any]:
        """A standalone JSON Schema (draft 2020-12) of the arguments, titled with the tool's
        name and carrying its description."""
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": self.name,
            "description": self.description,
            **self.input_schema,
        }

    def to_openai_tool(self) -> dict[str, Any]:
        """The OpenAI function-calling definition (``tools=[...]`` of chat completions)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }

    def check_keys(self, arguments: dict[str, Any], aliases: tuple[str, ...] = ()) -> None:
        """Refuse argument names the schema does not list."""
        unknown = sorted(str(key) for key in arguments if key not in self.accepted + aliases)
        if unknown:
            names = ", ".join(repr(u[:40]) for u in unknown[:5])
            raise ToolArgumentError(
                f"Unknown argument {names}: {self.name} takes {', '.join(self.accepted)}"
            )

    def call(self, arguments: dict[str, Any] | str | None = None) -> ToolResult:
        """Run the tool with a dict of arguments (or their JSON text, as function calling
        delivers them). Never raises: errors are a :class:`ToolResult` with ``is_error``."""
        try:
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    raise ToolArgumentError("arguments are not valid JSON") from None
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise ToolArgumentError(
                    f"arguments must be an object, got {type(arguments).__name__}"
                )
            return self._call(arguments)
        except KBError as exc:
            return error_result(str(exc))
        except Exception as exc:  # the agent loop must go on; the details go to the log
            logger.exception("%s failed", self.name)
            return error_result(
                f"{self.name} failed unexpectedly ({type(exc).__name__}); see the server log"
            )

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        raise NotImplementedError

    def run_sync(self, **arguments: Any) -> str:
        """Blocking call with keyword arguments; returns the text for the model."""
        return self.call(arguments).text

    async def run(self, **arguments: Any) -> str:
        """Call the tool off the event loop; returns the text for the model."""
        import asyncio

        return await asyncio.to_thread(self.run_sync, **arguments)

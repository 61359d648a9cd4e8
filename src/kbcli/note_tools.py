"""The agent tools that write: ``knowledge_add`` (a note) and ``knowledge_delete`` (a note
by id), offered only on request (``knowledge_tools(..., allow_write=True)``,
``kb mcp --allow-write``). Both act inside the caller's scope: its metadata is forced onto a
note, and only a note the scope can see is deleted."""

from __future__ import annotations

import json
from typing import Any

from .tool_base import (
    MAX_ID_CHARS,
    MAX_QUERY_CHARS,
    KnowledgeTool,
    ToolArgumentError,
    ToolResult,
    error_result,
    reader_of,
    text_argument,
)

NO_NOTE = "Error: No note with that id in this knowledge base (knowledge_search gives ids)"
MAX_NOTE_CHARS = 100_000  # characters of one knowledge_add note
MAX_NOTE_KEYS = 32  # metadata keys of one note


def scope_metadata(filter: dict[str, Any] | None) -> dict[str, Any]:
    """The metadata every document inside ``filter`` must carry: its equality conditions
    (``{tenant: acme}``, ``{tenant: {$eq: acme}}``, those inside ``$and``)."""
    forced: dict[str, Any] = {}
    for key, value in (filter or {}).items():
        if key == "$and":
            for sub in value:
                forced.update(scope_metadata(sub))
        elif key.startswith("$"):
            continue
        elif isinstance(value, dict):
            if set(value) == {"$eq"}:
                forced[key] = value["$eq"]
        else:
            forced[key] = value
    return forced


class KnowledgeAddTool(KnowledgeTool):
    """``knowledge_add``: store a note (one chunk, searchable by the next call). The scope's
    metadata is forced onto it (:func:`scope_metadata`); a note that would still fall outside
    the scope, or that claims another value for a scope key, is refused. Answers the id."""

    name = "knowledge_add"
    description = (
        "Store a note in the knowledge base (a fact, a decision, something you learned) so "
        "later searches find it; answers its id. metadata: optional key/value labels (text, "
        'numbers, true/false), e.g. {"topic": "network"}.'
    )

    def __init__(self, view: Any, max_chars: int = MAX_NOTE_CHARS):
        self.view = reader_of(view)
        self.max_chars = max_chars

    @property
    def input_schema(self) -> dict[str, Any]:
        scalar = {"type": ["string", "number", "boolean"]}
        return {
            "type": "object",
            "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": self.max_chars},
                "metadata": {
                    "type": "object",
                    "additionalProperties": scalar,
                    "maxProperties": MAX_NOTE_KEYS,
                },
            },
            "required": ["text"],
            "additionalProperties": False,
        }

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        self.check_keys(arguments)
        text = text_argument("text", arguments.get("text"), self.max_chars)
        metadata = _note_metadata(arguments.get("metadata"))
        forced = scope_metadata(self.view.filter)
        for key, value in forced.items():
            if key in metadata and metadata[key] != value:
                raise ToolArgumentError(
                    f"metadata {key}={metadata[key]!r} is outside your scope ({key}={value!r}): "
                    f"leave {key} out, it is set for you"
                )
        metadata.update(forced)
        from .filters import matches

        if not matches(metadata, self.view.filter):
            raise ToolArgumentError(
                "this note would fall outside your scope: give the metadata your scope "
                f"requires ({json.dumps(self.view.filter, default=str)[:300]})"
            )
        indexed = _indexed_files(self.view.kb.store)
        if metadata.get("source") in indexed:
            raise ToolArgumentError(
                "metadata source names an indexed file: a note cannot join a file's chunks"
            )
        new_id = self.view.kb.add(text, metadata)
        return ToolResult(f"Added note {new_id} (searchable now).")


class KnowledgeDeleteTool(KnowledgeTool):
    """``knowledge_delete``: delete a note by id. Only a note the scope can see, never a chunk
    of an indexed file (those leave with their file); a hidden id reads as an unknown one."""

    name = "knowledge_delete"
    description = (
        "Delete a note by its id (as knowledge_add or knowledge_search gave it). Chunks of "
        "indexed files cannot be deleted here: they leave the index with their file."
    )

    def __init__(self, view: Any):
        self.view = reader_of(view)

    @property
    def input_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"id": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS}},
            "required": ["id"],
            "additionalProperties": False,
        }

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        self.check_keys(arguments)
        chunk_id = text_argument("id", arguments.get("id"), MAX_ID_CHARS)
        found = self.view.get([chunk_id])
        if not found:
            return error_result(NO_NOTE)
        source = found[0].metadata.get("source")
        if source is not None and source in _indexed_files(self.view.kb.store):
            return error_result(
                f"{chunk_id} is a chunk of the indexed file {source}: it leaves the index when "
                "the file is deleted (kb ingest, kb watch), not here"
            )
        self.view.kb.delete([chunk_id])
        return ToolResult(f"Deleted note {chunk_id}.")


def _note_metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolArgumentError(f"metadata must be an object, got {type(value).__name__}")
    if len(value) > MAX_NOTE_KEYS:
        raise ToolArgumentError(f"metadata has {len(value)} keys; at most {MAX_NOTE_KEYS}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_ID_CHARS:
            raise ToolArgumentError(f"metadata key {str(key)[:40]!r} must be a short text")
        if key.startswith("$") or any(ord(c) < 32 for c in key):
            raise ToolArgumentError(f"metadata key {key[:40]!r} may not start with $")
        if item is None or not isinstance(item, (str, int, float, bool)):
            raise ToolArgumentError(
                f"metadata {key[:40]!r} must be text, a number or true/false, got "
                f"{type(item).__name__}"
            )
        if isinstance(item, str) and len(item) > MAX_QUERY_CHARS:
            raise ToolArgumentError(f"metadata {key[:40]!r} is too long")
        out[key] = item
    return out


def _indexed_files(store: Any) -> Any:
    """The sources recorded as indexed files (a store without a file ledger has none)."""
    from .protocols import FileLedger, supports

    return store.file_records() if supports(store, FileLedger) else {}

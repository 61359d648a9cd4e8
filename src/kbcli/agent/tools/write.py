"""The agent tools that write: ``knowledge_add`` (a note) and ``knowledge_delete`` (a note
by id), offered only on request (``knowledge_tools(..., allow_write=True)``,
``kb mcp --allow-write``). Both act inside the caller's scope: its metadata is forced onto a
note, and only a note the scope can see is deleted.

A note is marked as one (``note_by``: its writer's name, :data:`~kbcli.types.NOTE_BY`) and
every surface shows it as ``note by NAME``, never as a place in a file: it may not set what
presents a chunk as one (``line``, ``page``, ``heading``, ``title``, chunk offsets:
:data:`~kbcli.types.LOCATION_KEYS`) nor take the ``source`` of an indexed file (of any chunk
that is not a note). Its ``source``, if any, is kept in canonical form
(:func:`~kbcli.system.paths.normal_source`, read as text), so ``/docs/beta/./b.md`` is the
indexed ``/docs/beta/b.md`` and ``..`` cannot climb out of the scope.

Each writer (:class:`NoteWriter`: a token's name, ``stdio``) adds under :class:`WriteLimits`:
notes per minute (a sliding window), bytes per note, and bytes its notes hold in the index
(counted from the index, so a restart does not reset it). A refusal names the limit and its
value; the index is left as it was.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from kbcli.agent.seams import note_base
from kbcli.agent.tools.base import (
    MAX_ID_CHARS,
    MAX_QUERY_CHARS,
    KnowledgeTool,
    ToolArgumentError,
    ToolResult,
    error_result,
    reader_of,
    text_argument,
)
from kbcli.embedders.base import embedder_info
from kbcli.errors import InvalidOptionError, KBError
from kbcli.filters.model import matches
from kbcli.ingest.pipeline import IngestPipeline, new_id
from kbcli.protocols import (
    DocumentCatalog,
    EmbedderProtocol,
    FileLedger,
    VectorStoreProtocol,
    VectorWriter,
    supports,
)
from kbcli.system.paths import normal_source
from kbcli.types import LOCATION_KEYS, NOTE_BY, Document, note_author
from kbcli.views import KnowledgeView, Reader

NO_NOTE = "Error: No note with that id in this knowledge base (knowledge_search gives ids)"
MAX_NOTE_CHARS = 100_000  # characters of one knowledge_add note
MAX_NOTE_KEYS = 32  # metadata keys of one note
WINDOW = 60.0  # seconds of the notes_per_minute window
RECOUNT_EVERY = 60.0  # seconds a writer's count of its bytes in the index is trusted
VECTOR_WAIT = 2.0  # seconds knowledge_add waits for a note's vector before saying "pending"
MAX_WAITING_VECTORS = 1000  # notes of one writer waiting for their vectors, at most

logger = logging.getLogger("kbcli.agent.tools.write")


class WriteLimitError(KBError):
    """A note was refused by one of its writer's :class:`WriteLimits`."""


@dataclass(frozen=True)
class WriteLimits:
    """What one writer of notes may add: ``notes_per_minute`` (any 60 seconds),
    ``note_bytes`` (one note's text and metadata, UTF-8) and ``total_bytes`` (what all of the
    writer's notes in the index hold). The defaults are those of a token file entry without
    ``write_limits`` and of ``kb mcp --allow-write`` over stdio."""

    notes_per_minute: int = 30
    note_bytes: int = 32_768
    total_bytes: int = 5_000_000

    def with_values(self, values: Mapping[str, Any]) -> WriteLimits:
        """These limits with ``values`` (names of the fields, whole numbers from 1) put in;
        raises InvalidOptionError naming the unknown key or the bad value."""
        changed: dict[str, int] = {}
        for key, value in values.items():
            if key not in LIMIT_BOUNDS:
                raise InvalidOptionError(
                    f"unknown write limit {str(key)[:40]!r}: use {', '.join(LIMIT_BOUNDS)}"
                )
            highest = LIMIT_BOUNDS[key]
            if isinstance(value, str) and value.strip().replace("_", "").isdigit():
                value = int(value.strip().replace("_", ""))
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= highest:
                raise InvalidOptionError(
                    f"write limit {key} must be a whole number from 1 to {highest:,}, got "
                    f"{str(value)[:40]!r}"
                )
            changed[key] = value
        return replace(self, **changed)


# The largest value each limit takes (a limit is never unlimited).
LIMIT_BOUNDS = {"notes_per_minute": 10_000, "note_bytes": 1_000_000, "total_bytes": 10**12}


def note_size(text: str, metadata: Mapping[str, Any]) -> int:
    """Bytes a note counts for: its text and its metadata's JSON, in UTF-8."""
    meta = json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(text.encode("utf-8", "surrogatepass")) + len(meta.encode("utf-8", "surrogatepass"))


class NoteWriter:
    """One writer of notes (``name``: a token's name, ``stdio``) and its :class:`WriteLimits`.

    :meth:`add` stores a note when every limit allows it, one note of the writer at a time (so
    two calls at once cannot both take the last bytes). The notes of the last minute are
    counted here. The bytes the writer's notes hold are counted in the index (a restart
    forgets nothing) at its first note, after it deleted one, and at least every
    :data:`RECOUNT_EVERY` seconds; in between its own notes are added to that count (a read of
    every chunk's metadata per note would cost about 180 ms at 100,000 chunks).

    A note is written first without its vector (searchable by keyword when :meth:`add`
    returns), then embedded by the writer's :class:`NoteVectors`; :meth:`write` waits up to
    ``vector_wait`` seconds for the vector and says whether it is still pending (an embedder
    that is slow or down never holds a note back)."""

    def __init__(
        self,
        name: str,
        limits: WriteLimits | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        vector_wait: float = VECTOR_WAIT,
    ):
        self.name = name
        self.limits = limits or WriteLimits()
        self._clock = clock
        self._recent: deque[float] = deque()  # when the notes of the last WINDOW were added
        self._held: int | None = None  # bytes in the index, as last counted plus notes since
        self._counted_at = 0.0
        self._lock = threading.Lock()
        self._vectors = NoteVectors()
        self.vector_wait = vector_wait

    def held(self, view: KnowledgeView) -> int:
        """Bytes the writer's notes hold in the whole index under ``view`` (every scope)."""
        whole = KnowledgeView(view.kb, None)
        notes = whole.iter_documents({NOTE_BY: self.name})
        return sum(note_size(d.text, d.metadata) for d in notes)

    def add(self, view: KnowledgeView, text: str, metadata: dict[str, Any]) -> str:
        """Store the note ``text`` with ``metadata`` (its writer set) through ``view``'s
        knowledge base; returns its id. Raises :class:`WriteLimitError` naming the limit."""
        return self.write(view, text, metadata)[0]

    def write(self, view: KnowledgeView, text: str, metadata: dict[str, Any]) -> tuple[str, bool]:
        """:meth:`add`, returning ``(id, vector_pending)``: whether the note's vector was
        still not stored ``vector_wait`` seconds after the note was (keyword search finds it
        either way)."""
        limits = self.limits
        metadata = {**metadata, NOTE_BY: self.name}
        size = note_size(text, metadata)
        if size > limits.note_bytes:
            raise WriteLimitError(
                f"write limit note_bytes ({limits.note_bytes:,}) reached: this note is "
                f"{size:,} bytes (its text and metadata in UTF-8); shorten it"
            )
        with self._lock:
            now = self._clock()
            while self._recent and self._recent[0] <= now - WINDOW:
                self._recent.popleft()
            if len(self._recent) >= limits.notes_per_minute:
                wait = max(1, math.ceil(self._recent[0] + WINDOW - now))
                raise WriteLimitError(
                    f"write limit notes_per_minute ({limits.notes_per_minute:,}) reached: "
                    f"{self.name} added {len(self._recent):,} notes in the last minute; the "
                    f"next is allowed in {wait} s"
                )
            if self._held is None or now - self._counted_at >= RECOUNT_EVERY:
                self._held, self._counted_at = self.held(view), now
            held = self._held
            if held + size > limits.total_bytes:
                raise WriteLimitError(
                    f"write limit total_bytes ({limits.total_bytes:,}) reached: the notes of "
                    f"{self.name} hold {held:,} bytes and this one is {size:,}; delete notes "
                    "(knowledge_delete) or ask for a larger total_bytes"
                )
            new_id, written = _keyword_first(view, text, metadata)
            self._recent.append(now)
            self._held = held + size
        if written is None:  # written with its vector (a knowledge base without the seam)
            return new_id, False
        # its vector follows: wait a little for it, not longer
        return new_id, not self._vectors.fill(written, new_id, text, self.vector_wait)

    def recount(self) -> None:
        """Count the writer's bytes in the index again at its next note (after a delete)."""
        with self._lock:
            self._held = None


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


@runtime_checkable
class Embeds(Protocol):
    """A knowledge base a note can be written to keyword-first: its store, the ingest steps
    that embed (with the embedding cache) and its embedder (the write path's
    :class:`~kbcli.ingest.writes.Indexable`, checked at run time here)."""

    @property
    def store(self) -> VectorStoreProtocol: ...

    @property
    def ingestor(self) -> IngestPipeline: ...

    @property
    def embedder(self) -> EmbedderProtocol: ...


def _keyword_first(
    view: KnowledgeView, text: str, metadata: dict[str, Any]
) -> tuple[str, Embeds | None]:
    """Write a note without its vector, in one transaction: searchable by keyword once this
    returns. Returns its id and the knowledge base its vector is to be filled in (None: a
    knowledge base that cannot take vectors afterwards, which added the note whole)."""
    kb = view.kb
    if not isinstance(kb, Embeds):
        return note_base(view).add(text, metadata), None
    store = kb.store
    if not (supports(store, DocumentCatalog) and supports(store, VectorWriter)):
        return note_base(view).add(text, metadata), None
    kb.ingestor.check_embedder()  # an index of another embedder refuses the note now
    doc = Document(new_id(), text, dict(metadata))
    return store.add([doc])[0], kb


class NoteVectors:
    """The vectors of a writer's notes, filled after the notes were written: one daemon
    thread embeds the notes waiting (in one call, through the embedding cache) and stores
    their vectors (``set_vectors``: rows and keyword postings untouched). An embedding that
    fails is logged and tried again with the writer's next note; at most
    :data:`MAX_WAITING_VECTORS` wait (the oldest dropped: keyword-searchable, no vector). A
    daemon thread, so a server that stops does not wait for a stuck embedder; the notes it
    leaves without a vector are counted as pending (``kb status``, ``knowledge_status``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: dict[str, tuple[Embeds, str]] = {}
        self._stored: dict[str, threading.Event] = {}
        self._failed: dict[str, tuple[Embeds, str]] = {}
        self._thread: threading.Thread | None = None

    def fill(self, kb: Embeds, note_id: str, text: str, wait: float) -> bool:
        """Queue ``note_id``'s vector; True when it was stored within ``wait`` seconds."""
        stored = threading.Event()
        with self._cond:
            self._waiting.update(self._failed)
            self._failed.clear()
            self._waiting[note_id] = (kb, text)
            self._stored[note_id] = stored
            while len(self._waiting) > MAX_WAITING_VECTORS:
                dropped = next(iter(self._waiting))
                del self._waiting[dropped]
                self._stored.pop(dropped, None)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kb-note-vectors", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return stored.wait(wait)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting:
                    self._cond.wait()
                batch, self._waiting = self._waiting, {}
            kb = next(iter(batch.values()))[0]
            mine = {i: t for i, (k, t) in batch.items() if k is kb}
            with self._cond:  # another knowledge base's notes: the next round
                self._waiting.update({i: v for i, v in batch.items() if i not in mine})
            try:
                texts = list(dict.fromkeys(mine.values()))
                vectors = dict(zip(texts, kb.ingestor.embed(texts)))
                store = kb.store
                assert supports(store, VectorWriter)
                store.set_vectors(
                    {i: vectors[t] for i, t in mine.items()}, embedder=embedder_info(kb.embedder)
                )
            except Exception:
                logger.warning("a note's vector could not be made; tried again", exc_info=True)
                with self._cond:
                    self._failed.update({i: (kb, t) for i, t in mine.items()})
                continue
            with self._cond:
                for note_id in mine:
                    event = self._stored.pop(note_id, None)
                    if event is not None:
                        event.set()


class KnowledgeAddTool(KnowledgeTool):
    """``knowledge_add``: store a note (one chunk, searchable by the next call) for ``writer``
    (a :class:`NoteWriter`; default one named ``agent`` with the default limits). The scope's
    metadata is forced onto it (:func:`scope_metadata`); a note that would still fall outside
    the scope, claims another value for a scope key, sets a file location key or takes an
    indexed file's source is refused, and so is one over a write limit. Answers the id."""

    name = "knowledge_add"
    description = (
        "Store a note in the knowledge base (a fact, a decision, something you learned) so "
        "later searches find it; answers its id. metadata: optional key/value labels (text, "
        'numbers, true/false), e.g. {"topic": "network"}. A note is shown as a note, not as '
        "part of a file: it cannot set line, page, heading or title, nor take the source of "
        "an indexed file."
    )

    def __init__(
        self, view: Reader, max_chars: int = MAX_NOTE_CHARS, writer: NoteWriter | None = None
    ):
        self.view = reader_of(view)
        self.writer = writer or NoteWriter("agent")
        self.max_chars = max_chars

    @property
    def input_schema(self) -> dict[str, Any]:
        scalar = {"type": ["string", "number", "boolean"]}
        return {
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": min(self.max_chars, self.writer.limits.note_bytes),
                },
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
        given = metadata.get("source")
        if given is not None:
            if not isinstance(given, str) or not given.strip():
                raise ToolArgumentError("metadata source must be a path (text)")
            metadata["source"] = normal_source(given)
        forced = scope_metadata(self.view.filter)
        for key, value in forced.items():
            if key in metadata and metadata[key] != value:
                raise ToolArgumentError(
                    f"metadata {key}={metadata[key]!r} is outside your scope ({key}={value!r}): "
                    f"leave {key} out, it is set for you"
                )
        metadata.update(forced)

        if not matches(metadata, self.view.filter):
            if given is not None and metadata.get("source") != given:
                raise ToolArgumentError(
                    f"metadata source {given[:200]!r} is {metadata['source'][:200]!r}, which is "
                    "outside your scope"
                )
            raise ToolArgumentError(
                "this note would fall outside your scope: give the metadata your scope "
                f"requires ({json.dumps(self.view.filter, default=str)[:300]})"
            )
        if metadata.get("source") is not None and _holds_text(self.view, metadata["source"]):
            raise ToolArgumentError(
                f"metadata source {metadata['source'][:200]!r} is an indexed file: a note "
                "cannot pose as a file's chunk; leave source out or name another path"
            )
        new_id, pending = self.writer.write(self.view, text, metadata)
        if pending:
            return ToolResult(
                f"Added note {new_id} (searchable by keyword now; its vector is pending: "
                "semantic search finds it once the embedder has answered, knowledge_status "
                "counts pending vectors)."
            )
        return ToolResult(f"Added note {new_id} (searchable now, by keyword and by meaning).")


class KnowledgeDeleteTool(KnowledgeTool):
    """``knowledge_delete``: delete a note by id. Only a note the scope can see, never a chunk
    of an indexed file (those leave with their file); a hidden id reads as an unknown one."""

    name = "knowledge_delete"
    description = (
        "Delete a note by its id (as knowledge_add or knowledge_search gave it). Chunks of "
        "indexed files cannot be deleted here: they leave the index with their file."
    )

    def __init__(self, view: Reader, writer: NoteWriter | None = None):
        self.view = reader_of(view)
        self.writer = writer  # whose count of bytes a delete makes stale

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
        note = note_author(found[0].metadata) is not None
        if not note and isinstance(source, str) and _is_indexed(self.view, source):
            return error_result(
                f"{chunk_id} is a chunk of the indexed file {source}: it leaves the index when "
                "the file is deleted (kb ingest, kb watch), not here"
            )
        note_base(self.view).delete([chunk_id])
        if self.writer is not None:
            self.writer.recount()
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
        if key in LOCATION_KEYS or key == NOTE_BY:
            raise ToolArgumentError(
                f"metadata {key!r} is set by kb, not by a note (a note is not part of a file: "
                f"it cannot set {', '.join(sorted(LOCATION_KEYS | {NOTE_BY}))})"
            )
        if item is None or not isinstance(item, (str, int, float, bool)):
            raise ToolArgumentError(
                f"metadata {key[:40]!r} must be text, a number or true/false, got "
                f"{type(item).__name__}"
            )
        if isinstance(item, str) and len(item) > MAX_QUERY_CHARS:
            raise ToolArgumentError(f"metadata {key[:40]!r} is too long")
        out[key] = item
    return out


def _holds_text(view: KnowledgeView, source: str) -> bool:
    """True when a chunk that is not a note has ``source`` (or its canonical form), in any
    scope: an indexed file's chunks (or text added with that source). A lookup by source, so
    it costs the same whatever the size of the index or of the file ledger."""
    whole = KnowledgeView(view.kb, None)
    not_a_note = {NOTE_BY: {"$exists": False}}
    for candidate in dict.fromkeys([normal_source(source), source]):
        if next(whole.iter_documents(not_a_note, source=candidate, limit=1), None) is not None:
            return True
    return False


def _is_indexed(view: KnowledgeView, source: str) -> bool:
    """True when ``source`` (or its canonical form) is an indexed file's: one with a file
    ledger record (a store without a ledger has none), in any scope."""
    store = view.kb.store
    if not supports(store, FileLedger):
        return False
    records = store.file_records()
    return source in records or normal_source(source) in records

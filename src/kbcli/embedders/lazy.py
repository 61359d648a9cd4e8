"""The configured embedder, resolved on first use (keyword-only work never needs an API key or a
model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kbcli.config.lookup import defaults
from kbcli.embedders.base import (
    EmbedderCapabilities,
    EmbedderInfo,
    capabilities_of,
    embed_queries,
    embedder_info,
)
from kbcli.embedders.provider_settings import first_env
from kbcli.embedders.resolve import AUTO_ORDER, KEY_ENV, choose_embedder, remembered_choice
from kbcli.protocols import EmbedderProtocol
from kbcli.stores.capabilities import IndexMetadata

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.config.schema import Config

DEFAULT_BATCH = 64  # texts per embedding request when an embedder does not say


class LazyEmbedder:
    """Resolves the configured embedder on first use, so keyword-only work never needs an API
    key or a model.

    With no provider named in the configuration, an index that already records an embedder
    keeps using that one (an API key appearing in the environment later must not switch it);
    otherwise the choice is automatic. ``on_note`` receives a one-line note when the choice was
    automatic and the index records no embedder yet (its first ingest), or when an API key in
    the environment would now choose another embedder than the one the index keeps; an index
    built with a local embedder and no key says nothing.
    """

    def __init__(
        self,
        config: Config | None = None,
        on_note: Callable[[str], None] | None = None,
        recorded: Callable[[], EmbedderInfo | None] | None = None,
    ):
        self._config = config
        self._on_note = on_note
        self._recorded = recorded
        self._embedder: EmbedderProtocol | None = None

    @property
    def resolved(self) -> EmbedderProtocol:
        """The real embedder (resolved now if needed)."""
        if self._embedder is None:
            config = self._config or defaults()
            recorded = self._recorded() if self._recorded is not None else None
            if recorded is not None and not config.rag.embedding.provider_set:
                model = recorded.model if recorded.provider in ("openai", "gemini") else None
                embedder, _ = choose_embedder(config, recorded.provider, model)
                note = None
                automatic = automatic_provider()
                if automatic != recorded.provider and automatic != "simple":
                    # Only when an API key now in the environment would choose another
                    # embedder; an index built with local, static or e5 and no key says
                    # nothing (that note came out on every search).
                    note = f"Using {recorded.describe()}, the embedder this index was built with"
            else:
                embedder, note = choose_embedder(config)
            if note and self._on_note:
                self._on_note(note)
            self._embedder = embedder
        return self._embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages with the resolved embedder."""
        return self.resolved.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed a query with the resolved embedder."""
        return self.resolved.embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several queries with the resolved embedder, batched where it can."""
        return [list(v) for v in embed_queries(self.resolved, texts)]

    @property
    def info(self) -> EmbedderInfo:
        """Identity of the resolved embedder."""
        return embedder_info(self.resolved)

    @property
    def batch_size(self) -> int:
        """Texts the resolved embedder sends per request."""
        return int(getattr(self.resolved, "batch_size", DEFAULT_BATCH) or DEFAULT_BATCH)

    @property
    def capabilities(self) -> EmbedderCapabilities:
        """What the resolved embedder declares about itself."""
        return capabilities_of(self.resolved)


def remembered(store: IndexMetadata) -> EmbedderInfo | None:
    """The embedder an ingest chose for ``store`` before storing any vector."""
    return remembered_choice(store)


def automatic_provider() -> str:
    """The provider an automatic choice would pick now (by API keys), without building it."""
    for candidate in AUTO_ORDER:
        if candidate == "simple" or first_env(*KEY_ENV[candidate])[1]:
            return candidate
    return "simple"

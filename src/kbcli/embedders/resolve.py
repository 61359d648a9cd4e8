"""Pick the embedder: the configured provider, else by the API keys present, else simple.

Order of choice:

1. ``preference`` (argument), else ``rag.embedding.provider`` when the config file set it.
   A named provider is built or fails with its own clear error (no key, missing package):
   an explicit choice never silently falls back.
2. Otherwise (nothing chosen, or ``auto``): ``gemini`` if ``GOOGLE_API_KEY`` or
   ``GEMINI_API_KEY`` is set, else ``openai`` if ``OPENAI_API_KEY`` or ``API_KEY`` is set,
   else the built-in :class:`~kbcli.embedders.simple.SimpleEmbedder`.

``local``, ``static`` and ``e5`` are never picked automatically (they need ``kbcli[local]`` or
``kbcli[multilingual]``, and an index built with one keeps it); choose one by name:
``kb ingest --embedder local``, ``$KB_EMBEDDER`` or ``rag.embedding.provider``.
"""

from __future__ import annotations

from collections.abc import Callable

from kbcli.config.lookup import Config, defaults
from kbcli.config.registry import EMBEDDERS, load_embedder_class
from kbcli.embedders.base import EmbedderInfo, embedder_info
from kbcli.embedders.local import offline_offer
from kbcli.embedders.provider_settings import first_env
from kbcli.errors import EmbedderError, InvalidOptionError, MissingDependencyError
from kbcli.protocols import EmbedderProtocol
from kbcli.stores.capabilities import IndexMetadata

AUTO_ORDER = ("gemini", "openai", "simple")
KEY_ENV = {"gemini": ("GOOGLE_API_KEY", "GEMINI_API_KEY"), "openai": ("OPENAI_API_KEY", "API_KEY")}
LOCAL_DEFAULT_BATCH = 32  # fastest on a 2-core CPU; MODELS.md measured 16-32 best, 64 slower


def provider_choices() -> str:
    """Every name ``rag.embedding.provider`` or ``--embedder`` accepts, for messages."""
    return ", ".join(["auto", *EMBEDDERS])


def _build(name: str, config: Config, model: str | None, base_url: str | None) -> EmbedderProtocol:
    emb = config.rag.embedding
    cls: Callable[..., EmbedderProtocol] = load_embedder_class(name)
    if name in ("openai", "gemini"):
        return cls(
            base_url=base_url,
            model=model,
            dimensions=emb.dimensions,
            batch_size=emb.batch_size,
            max_retries=emb.max_retries,
            timeout=emb.timeout,
            config=config,
        )
    if name == "local":
        default_batch = type(emb)().batch_size
        batch = emb.batch_size if emb.batch_size != default_batch else LOCAL_DEFAULT_BATCH
        return cls(
            model=model or emb.model, batch_size=batch, device=emb.device, threads=emb.threads
        )
    if name == "simple":
        return cls()
    if name == "e5":
        return cls(model=model or emb.model, threads=emb.threads)
    if name == "static":
        return cls(model=model or emb.model)
    kwargs = {k: v for k, v in (("model", model), ("base_url", base_url)) if v is not None}
    return cls(**kwargs)


def choose_embedder(
    config: Config | None = None,
    preference: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
) -> tuple[EmbedderProtocol, str | None]:
    """The embedder to use and a one-line note for stderr when it was chosen automatically.

    The note is None when the provider was named (argument or config file).
    """
    cfg = config if config is not None else defaults()
    emb = cfg.rag.embedding
    name = (preference or "").strip()
    if not name and emb.provider_set:
        name = emb.provider
    if name.lower() in EMBEDDERS:
        name = name.lower()
    if name and name.lower() != "auto":
        if name not in EMBEDDERS and ":" not in name:
            raise InvalidOptionError(
                f"Unknown embedding provider {name!r}: choose from {provider_choices()}, "
                "or give a class path as 'package.module:Class'"
            )
        return _build(name, cfg, model, base_url), None

    for candidate in AUTO_ORDER:
        if candidate == "simple":
            note = (
                "Using the built-in simple embedder, which matches spelling, not meaning (no "
                "OPENAI_API_KEY or GOOGLE_API_KEY set; configure rag.embedding.provider). One "
                f"flag away: {offline_offer()}"
            )
            return _build("simple", cfg, None, None), note
        _value, env_name = first_env(*KEY_ENV[candidate])
        if env_name:
            embedder = _build(candidate, cfg, model, base_url)
            note = (
                f"Using the {candidate} embedder ({embedder_info(embedder).model}, found "
                f"{env_name}; set rag.embedding.provider to choose)"
            )
            return embedder, note
    raise AssertionError("unreachable: AUTO_ORDER ends with simple")


def resolve_embedder(
    preference: str | list[str] | tuple[str, ...] | None = None,
    model: str | None = None,
    base_url: str | None = None,
    *,
    config: Config | None = None,
) -> EmbedderProtocol:
    """The embedder to use (see the module docstring for the order of choice).

    ``preference`` may also be a list of providers, as in the reference
    (``["gemini", "openai", "simple"]``): the first that can be built (its key is set, its
    package installed) wins, and the list always ends at the built-in simple embedder.
    """
    if isinstance(preference, (list, tuple)):
        return _first_buildable(list(preference), model, base_url, config)
    embedder, _note = choose_embedder(config, preference, model, base_url)
    return embedder


def _first_buildable(
    names: list[str], model: str | None, base_url: str | None, config: Config | None
) -> EmbedderProtocol:
    for name in names:
        if str(name).strip().lower() == "auto":
            return choose_embedder(config, None, model, base_url)[0]
        try:
            return choose_embedder(config, name, model, base_url)[0]
        except (EmbedderError, MissingDependencyError):
            continue
    return choose_embedder(config, "simple")[0]


CHOICE_KEY = "embedder_choice"  # index metadata: the embedder an ingest chose, before vectors


def remember_choice(store: IndexMetadata, info: EmbedderInfo) -> None:
    """Record in ``store``'s metadata the embedder an ingest is about to use, so that the next
    command uses it even when no vector was stored yet (an ingest stopped before its vectors:
    files are written first)."""
    import json

    value = json.dumps({"provider": info.provider, "model": info.model})
    if store.get_meta(CHOICE_KEY) != value:
        store.set_meta(CHOICE_KEY, value)


def remembered_choice(store: IndexMetadata) -> EmbedderInfo | None:
    """The embedder recorded by :func:`remember_choice` (an ``EmbedderInfo``), or None."""
    import json

    raw = store.get_meta(CHOICE_KEY)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("provider"), str):
        return None
    return EmbedderInfo(value["provider"], str(value.get("model") or ""), None)

"""Configuration: ``jianmu.yaml`` read into frozen dataclasses and validated.

Lookup order for the file: the explicit path, ``$KB_CONFIG``, ``./jianmu.yaml``, then the user
config dir (``$XDG_CONFIG_HOME/kbcli/jianmu.yaml``, default ``~/.config/kbcli/jianmu.yaml``).
No file at all means the defaults. ``$KB_DB`` overrides ``paths.knowledge_db`` and
``$KB_EMBEDDER`` overrides ``rag.embedding.provider`` (:func:`with_embedder`).

A ``./jianmu.yaml`` found by the lookup (not named by ``--config`` or ``$KB_CONFIG``) may come
with a folder the user did not write: when it sets anything that sends data to a model or server
(a provider, a model name, a base URL, a key variable), runs code (a class path, a locally run
model) or writes outside its folder, it is refused until the user trusts it
(:mod:`kbcli.config.trust`,
``kb trust``).

The sections and their defaults are :mod:`kbcli.config.schema`; reading and validating a file
(relative paths, unknown keys) is :mod:`kbcli.config.parse`. This module finds the file, applies
the environment, checks trust, and keeps the process's configuration; it re-exports the public
names of the other two.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from kbcli.config.parse import (
    build_config,
    parse_evidence_budget,
    read_file,
    target_store_config,
    with_embedder,
    with_store,
)
from kbcli.config.schema import (
    ANALYZER_LANGUAGES,
    CHUNKERS,
    CONFIG_FILENAME,
    EMBEDDING_PROVIDERS,
    LLM_RERANK_METHODS,
    MAX_SECONDS,
    OCR_LANGUAGES,
    STORE_BACKENDS,
    STORE_SETTINGS,
    AnalysisConfig,
    AnswerConfig,
    Config,
    EmbeddingConfig,
    LimitsConfig,
    OcrConfig,
    PathsConfig,
    RAGConfig,
    RerankConfig,
    RewriteConfig,
    StoreConfig,
    default_db_path,
    user_config_dir,
    user_data_dir,
)
from kbcli.errors import ConfigError

#: How a configuration file was found (:func:`locate_config`).
FOUND_OPTION = "--config"
FOUND_ENV = "$KB_CONFIG"
FOUND_CWD = "./jianmu.yaml"  # the only way a file the user did not name is read
FOUND_USER = "user configuration folder"


def locate_config(path: str | os.PathLike[str] | None = None) -> tuple[Path | None, str | None]:
    """The configuration file to read and how it was found (``FOUND_*``), or (None, None)."""
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ConfigError(f"Config file {p} does not exist: fix the path or drop --config")
        return p, FOUND_OPTION
    env = os.environ.get("KB_CONFIG")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(
                f"Config file {p} (from $KB_CONFIG) does not exist: fix or unset KB_CONFIG"
            )
        return p, FOUND_ENV
    user = user_config_dir() / CONFIG_FILENAME
    local = Path.cwd() / CONFIG_FILENAME
    if local.is_file():
        if user.is_file() and os.path.samefile(local, user):
            return user, FOUND_USER  # working in the user's own config folder
        return local, FOUND_CWD
    if user.is_file():
        return user, FOUND_USER
    return None, None


def find_config_file(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Return the configuration file to read, or None when there is none."""
    return locate_config(path)[0]


def load_config(path: str | os.PathLike[str] | None = None, *, check_trust: bool = True) -> Config:
    """Read, validate and return the configuration (see module docstring for the lookup).

    A ``./jianmu.yaml`` found by the lookup that needs trust and has none raises
    :class:`ConfigError` before anything it names is imported; ``check_trust=False`` reads it
    anyway (for ``kb config`` and ``kb trust``, which only show it).
    """
    file, found = locate_config(path)
    if file is None:
        config = build_config({}, None)
    else:
        config, raw = read_file(file)
        if check_trust and found == FOUND_CWD:
            # lazy: trust (hashlib, file locks: ~20 ms) only for ./jianmu.yaml
            from kbcli.config.trust import require

            require(config, raw)
    env_db = os.environ.get("KB_DB")
    if env_db:
        config = replace(config, paths=PathsConfig(knowledge_db=Path(env_db).expanduser()))
    env_embedder = os.environ.get("KB_EMBEDDER", "").strip()
    if env_embedder:
        config = with_embedder(config, env_embedder, origin="KB_EMBEDDER")
    return config


_cached: Config | None = None
_named: Path | None = None  # kb --config: the file every part of the command reads


def get_config() -> Config:
    """The configuration of this process, read once: the file :func:`use_config_file` named,
    else the default lookup."""
    global _cached
    if _cached is None:
        _cached = load_config(_named)
    return _cached


def defaults() -> Config:
    """The configuration that public constructors built without one take their documented
    defaults from (an ``OpenAIEmbedder()`` with no base URL takes ``rag.embedding.base_url``;
    an ``IngestPipeline()`` chunks with ``limits.chunk_size``): the process's
    (:func:`get_config`). The one read of it below the entry points (the CLI,
    ``KnowledgeBase.from_config``), which hand every part the configuration they hold."""
    return get_config()


def use_config_file(path: str | os.PathLike[str] | None) -> None:
    """Make ``path`` (``kb --config``) the file :func:`get_config` reads, so that defaults
    taken deep in the library (search options, retrievers) come from the file the user named;
    None goes back to the default lookup."""
    global _cached, _named
    _named = Path(path) if path is not None else None
    _cached = None


def configured_file() -> Path | None:
    """The file :func:`use_config_file` named (None: the default lookup)."""
    return _named


def reset_config_cache() -> None:
    """Forget the cached configuration and any file named by :func:`use_config_file` (tests,
    or after changing the environment)."""
    global _cached, _named
    _cached = None
    _named = None


__all__ = [
    "ANALYZER_LANGUAGES", "CHUNKERS", "CONFIG_FILENAME", "EMBEDDING_PROVIDERS", "FOUND_CWD",
    "FOUND_ENV", "FOUND_OPTION", "FOUND_USER", "LLM_RERANK_METHODS", "MAX_SECONDS",
    "OCR_LANGUAGES", "STORE_BACKENDS", "STORE_SETTINGS", "AnalysisConfig", "AnswerConfig",
    "Config", "EmbeddingConfig", "LimitsConfig", "OcrConfig", "PathsConfig", "RAGConfig",
    "RerankConfig", "RewriteConfig", "StoreConfig", "configured_file", "default_db_path",
    "defaults", "find_config_file", "get_config", "load_config", "locate_config",
    "parse_evidence_budget", "read_file", "reset_config_cache", "target_store_config",
    "use_config_file", "user_config_dir", "user_data_dir", "with_embedder", "with_store",
]  # fmt: skip

"""A configuration file read into a validated :class:`~kbcli.config.schema.Config`.

Relative paths in the file are taken relative to the folder holding the file. Unknown top-level
sections are ignored (the file may be shared with other jianmu tools); unknown keys inside the
sections kbcli reads are errors, so a typo never silently falls back to a default. Every error
names the key and the file.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from kbcli.config.registry import CHAT_MODELS, RERANKERS, is_class_path
from kbcli.config.schema import (
    ANALYZER_LANGUAGES,
    CHUNKERS,
    EMBEDDING_PROVIDERS,
    LLM_RERANK_METHODS,
    MAX_SECONDS,
    MAX_THREADS,
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
)
from kbcli.config.vocabulary import REWRITE_MODES
from kbcli.errors import ConfigError


def read_file(file: Path) -> tuple[Config, bytes]:
    """The configuration written in ``file`` (validated; no environment override, no trust
    check) and the file's bytes."""
    raw = _read_bytes(file)
    return build_config(parse_yaml(raw, file), file), raw


def _read_bytes(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {file}: {exc}") from None


def parse_yaml(raw: bytes, file: Path) -> dict[str, Any]:
    import yaml

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"Cannot read config file {file}: {exc}") from None
    try:
        data = _load_yaml(yaml, text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"Config file {file} is not valid YAML{where}: fix the syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"Config file {file} must hold a mapping of sections (rag, limits, paths)"
        )
    return data


def _load_yaml(yaml: ModuleType, text: str) -> Any:
    """``yaml.safe_load(text)``, parsed by libyaml when PyYAML has it (about ten times faster
    on a commented file). An error is the pure-Python loader's own, so that its line number is
    the same with or without libyaml (they differ at an unclosed bracket at the end of a file).
    """
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        return yaml.safe_load(text)
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError:
        return yaml.safe_load(text)


class _Reader:
    """Validates one section of the file, naming the key and the file in every error."""

    def __init__(self, file: Path | None):
        self.file = file

    def fail(self, key: str, message: str) -> ConfigError:
        where = f" in {self.file}" if self.file else ""
        return ConfigError(f"Config key {key}{where}: {message}")

    def section(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key.rsplit(".", 1)[-1])
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, got {type(value).__name__}")
        return value

    def check_keys(self, section: dict[str, Any], prefix: str, allowed: list[str]) -> None:
        import difflib

        for key in section:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {near[0]}?" if near else f"known keys: {', '.join(allowed)}"
                raise self.fail(f"{prefix}.{key}", f"unknown key ({hint})")

    def integer(
        self, section: dict[str, Any], prefix: str, key: str, default: int, minimum: int
    ) -> int:
        value = section.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{prefix}.{key}", f"must be a whole number, got {value!r}")
        if value < minimum:
            raise self.fail(f"{prefix}.{key}", f"must be at least {minimum}, got {value}")
        return value

    def number(
        self,
        section: dict[str, Any],
        prefix: str,
        key: str,
        default: float,
        lo: float,
        hi: float | None,
    ) -> float:
        value = section.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"{prefix}.{key}", f"must be a number, got {value!r}")
        if not math.isfinite(value):  # YAML's .nan passes every range check below
            raise self.fail(f"{prefix}.{key}", f"must be a finite number, got {value!r}")
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise self.fail(f"{prefix}.{key}", f"must be {bound}, got {value}")
        return float(value)

    def string(
        self, section: dict[str, Any], prefix: str, key: str, default: str | None
    ) -> str | None:
        value = section.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{prefix}.{key}", f"must be a string, got {value!r}")
        return value or default

    def choice(
        self,
        section: dict[str, Any],
        prefix: str,
        key: str,
        default: str,
        choices: Iterable[str],
        *,
        paths: bool = False,
    ) -> str:
        """A name from ``choices``; with ``paths`` also a ``package.module:Class`` path."""
        value = str(self.string(section, prefix, key, default)).strip()
        if paths and is_class_path(value):
            return value
        value = value.lower()
        if value not in choices:
            extra = " or a class path 'package.module:Class'" if paths else ""
            raise self.fail(
                f"{prefix}.{key}", f"must be one of {', '.join(choices)}{extra}, got {value!r}"
            )
        return value

    def boolean(self, section: dict[str, Any], prefix: str, key: str, default: bool) -> bool:
        value = section.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"{prefix}.{key}", f"must be true or false, got {value!r}")
        return value


def build_config(data: dict[str, Any], file: Path | None) -> Config:
    r = _Reader(file)
    base = file.parent if file is not None else Path.cwd()

    rag = r.section(data, "rag")
    r.check_keys(rag, "rag", ["embedding", "chunker", "rerank", "rewrite", "answer"])
    emb = r.section(rag, "rag.embedding")
    emb_keys = [f.name for f in fields(EmbeddingConfig) if f.name != "provider_set"]
    r.check_keys(emb, "rag.embedding", emb_keys)
    d = EmbeddingConfig()
    dimensions = emb.get("dimensions")
    if dimensions is not None:
        dimensions = r.integer(emb, "rag.embedding", "dimensions", 0, 1)
    threads = emb.get("threads")
    if threads is not None:
        threads = r.integer(emb, "rag.embedding", "threads", 0, 1)
        if threads > MAX_THREADS:
            raise r.fail("rag.embedding.threads", f"must be at most {MAX_THREADS}, got {threads}")
    embedding = EmbeddingConfig(
        provider=r.choice(
            emb, "rag.embedding", "provider", d.provider, EMBEDDING_PROVIDERS, paths=True
        ),
        model=r.string(emb, "rag.embedding", "model", None),
        base_url=r.string(emb, "rag.embedding", "base_url", None),
        dimensions=dimensions,
        batch_size=r.integer(emb, "rag.embedding", "batch_size", d.batch_size, 1),
        max_retries=r.integer(emb, "rag.embedding", "max_retries", d.max_retries, 0),
        timeout=r.number(emb, "rag.embedding", "timeout", d.timeout, 0.001, MAX_SECONDS),
        retry_budget=r.number(
            emb, "rag.embedding", "retry_budget", d.retry_budget, 0.001, MAX_SECONDS
        ),
        device=r.string(emb, "rag.embedding", "device", d.device) or d.device,
        threads=threads,
        provider_set="provider" in emb and emb["provider"] is not None,
    )
    rag_config = RAGConfig(
        embedding=embedding,
        chunker=r.choice(rag, "rag", "chunker", RAGConfig.chunker, CHUNKERS, paths=True),
        rerank=_rerank_section(r, r.section(rag, "rag.rerank"), base),
        rewrite=_rewrite_section(r, r.section(rag, "rag.rewrite")),
        answer=_answer_section(r, r.section(rag, "rag.answer")),
    )

    lim = r.section(data, "limits")
    r.check_keys(lim, "limits", [f.name for f in fields(LimitsConfig)])
    ld = LimitsConfig()
    chunk_size = r.integer(lim, "limits", "chunk_size", ld.chunk_size, 1)
    overlap = r.integer(lim, "limits", "chunk_overlap", ld.chunk_overlap, 0)
    if overlap >= chunk_size:
        raise r.fail(
            "limits.chunk_overlap",
            f"must be smaller than limits.chunk_size ({overlap} >= {chunk_size})",
        )
    limits = LimitsConfig(
        chunk_size=chunk_size,
        chunk_overlap=overlap,
        rerank_alpha=r.number(lim, "limits", "rerank_alpha", ld.rerank_alpha, 0.0, 1.0),
        source_weight=r.number(lim, "limits", "source_weight", ld.source_weight, 0.0, 100.0),
        max_file_mb=r.number(lim, "limits", "max_file_mb", ld.max_file_mb, 0.001, None),
        file_timeout=r.number(lim, "limits", "file_timeout", ld.file_timeout, 0.001, None),
    )

    pth = r.section(data, "paths")
    r.check_keys(pth, "paths", ["knowledge_db"])
    db = r.string(pth, "paths", "knowledge_db", None)
    if db is not None:
        db_path = Path(os.path.expandvars(db)).expanduser()
        paths = PathsConfig(knowledge_db=db_path if db_path.is_absolute() else base / db_path)
    else:
        paths = PathsConfig()

    ana = r.section(data, "analysis")
    r.check_keys(ana, "analysis", [f.name for f in fields(AnalysisConfig)])
    ad = AnalysisConfig()
    analysis = AnalysisConfig(
        language=r.choice(ana, "analysis", "language", ad.language, ANALYZER_LANGUAGES),
        stem=r.boolean(ana, "analysis", "stem", ad.stem),
        stopwords=r.boolean(ana, "analysis", "stopwords", ad.stopwords),
    )
    return Config(
        rag=rag_config,
        store=_store_config(r, data),
        limits=limits,
        paths=paths,
        analysis=analysis,
        ocr=_ocr_section(r, r.section(data, "ocr")),
        source=file,
    )


def _ocr_section(r: _Reader, sec: dict[str, Any]) -> OcrConfig:
    prefix = "ocr"
    r.check_keys(sec, prefix, [f.name for f in fields(OcrConfig)])
    d = OcrConfig()
    languages = sec.get("languages", list(d.languages))
    if isinstance(languages, str):
        languages = [part.strip() for part in languages.split(",")]
    if not isinstance(languages, list) or not languages:
        raise r.fail(f"{prefix}.languages", f"must be a list such as [zh, en], got {languages!r}")
    chosen: list[str] = []
    for item in languages:
        name = str(item).strip().lower()
        if name not in OCR_LANGUAGES:
            raise r.fail(
                f"{prefix}.languages",
                f"the built-in OCR models read {', '.join(OCR_LANGUAGES)}, not {item!r}",
            )
        if name not in chosen:
            chosen.append(name)
    dpi = r.integer(sec, prefix, "dpi", d.dpi, 50)
    if dpi > 600:
        raise r.fail(f"{prefix}.dpi", f"must be at most 600 (more only costs time), got {dpi}")
    return OcrConfig(
        enabled=r.boolean(sec, prefix, "enabled", d.enabled),
        languages=tuple(chosen),
        min_text_per_page=r.integer(sec, prefix, "min_text_per_page", d.min_text_per_page, 0),
        dpi=dpi,
        max_megapixels=r.number(sec, prefix, "max_megapixels", d.max_megapixels, 1.0, 1000.0),
        page_timeout=r.number(sec, prefix, "page_timeout", d.page_timeout, 0.001, MAX_SECONDS),
        max_pages=r.integer(sec, prefix, "max_pages", d.max_pages, 1),
        min_confidence=r.number(sec, prefix, "min_confidence", d.min_confidence, 0.0, 1.0),
    )


def _store_config(r: _Reader, data: dict[str, Any]) -> StoreConfig:
    section = dict(r.section(data, "store"))
    backend = r.choice(section, "store", "backend", "sqlite", STORE_BACKENDS, paths=True)
    section.pop("backend", None)
    allowed = STORE_SETTINGS.get(backend)
    if allowed is None:  # a user's class: its own settings, passed as they are
        return StoreConfig(backend, section)
    r.check_keys(section, "store", ["backend", *allowed])
    settings: dict[str, Any] = {}
    for key, kind in allowed.items():
        if key in section:
            if kind is int:
                settings[key] = r.integer(section, "store", key, 0, 1)
            elif kind is str:
                settings[key] = r.string(section, "store", key, None)
            elif kind is bool:
                settings[key] = r.boolean(section, "store", key, True)
            elif isinstance(kind, tuple):
                settings[key] = r.choice(section, "store", key, kind[0], kind)
            else:
                settings[key] = r.number(section, "store", key, 0.0, 0.0, None)
    return StoreConfig(backend, settings)


def with_embedder(config: Config, name: str, origin: str = "--embedder") -> Config:
    """``config`` with ``rag.embedding.provider`` set to ``name`` (``kb ingest --embedder``,
    ``$KB_EMBEDDER``): a registered name or a ``package.module:Class`` path. The file's
    ``model``, ``base_url`` and ``dimensions`` are kept only when it named the same provider
    (they belong to the provider the file names)."""
    chosen = name.strip()
    if not is_class_path(chosen):
        chosen = chosen.lower()
        if chosen not in EMBEDDING_PROVIDERS:
            raise ConfigError(
                f"Unknown embedder {name!r} (from {origin}): choose from "
                f"{', '.join(EMBEDDING_PROVIDERS)}, or give a class path as 'package.module:Class'"
            )
    emb = config.rag.embedding
    same = emb.provider_set and emb.provider == chosen
    fresh = replace(
        emb,
        provider=chosen,
        provider_set=chosen != "auto",
        model=emb.model if same else None,
        base_url=emb.base_url if same else None,
        dimensions=emb.dimensions if same else None,
    )
    return replace(config, rag=replace(config.rag, embedding=fresh))


def with_store(config: Config, backend: str) -> Config:
    """``config`` with ``store.backend`` set to ``backend`` (``kb --store``): its settings are
    kept when it is the configured backend, else the new backend's defaults apply."""
    name = backend.strip()
    if not is_class_path(name):
        name = name.lower()
        if name not in STORE_BACKENDS:
            raise ConfigError(
                f"Unknown store {backend!r}: choose from {', '.join(STORE_BACKENDS)}, "
                "or give a class path as 'package.module:Class'"
            )
    if name == config.store.backend:
        return config
    return replace(config, store=StoreConfig(name, {}))


def target_store_config(config: Config, backend: str, sets: list[str]) -> Config:
    """``config`` with the store ``backend`` and the ``KEY=VALUE`` settings of ``kb copy
    --to-set``, checked like the ``store:`` section (values are read as YAML scalars)."""
    import yaml

    target = with_store(config, backend)
    section: dict[str, Any] = {"backend": target.store.backend, **target.store.settings}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--to-set needs KEY=VALUE, got {item!r}")
        section[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return replace(target, store=_store_config(_Reader(None), {"store": section}))


def _rerank_section(r: _Reader, sec: dict[str, Any], base: Path) -> RerankConfig:
    prefix = "rag.rerank"
    r.check_keys(sec, prefix, [f.name for f in fields(RerankConfig)])
    d = RerankConfig()
    provider = (r.string(sec, prefix, "provider", d.provider) or d.provider).strip()
    names = ("none", *RERANKERS)
    if not is_class_path(provider):
        provider = provider.lower()
        if provider not in names:
            raise r.fail(
                f"{prefix}.provider",
                f"must be one of {', '.join(names)} or 'package.module:Class', got {provider!r}",
            )
    model = r.string(sec, prefix, "model", None)
    if model is not None and provider == "cross-encoder":
        # A folder relative to this file; a hub-style name ("org/model") stays as written.
        candidate = Path(os.path.expandvars(model)).expanduser()
        if not candidate.is_absolute() and (base / candidate).exists():
            model = str(base / candidate)
        elif candidate.is_absolute() or model.startswith("~"):
            model = str(candidate)
    min_relevance = sec.get("min_relevance")
    if min_relevance is not None:
        if (
            isinstance(min_relevance, bool)
            or not isinstance(min_relevance, (int, float))
            or not math.isfinite(min_relevance)
        ):
            raise r.fail(f"{prefix}.min_relevance", f"must be a number, got {min_relevance!r}")
        min_relevance = float(min_relevance)
    return RerankConfig(
        provider=provider,
        model=model,
        base_url=r.string(sec, prefix, "base_url", None),
        candidates=r.integer(sec, prefix, "candidates", d.candidates, 1),
        min_relevance=min_relevance,
        batch_size=r.integer(sec, prefix, "batch_size", d.batch_size, 1),
        max_documents=r.integer(sec, prefix, "max_documents", d.max_documents, 1),
        method=r.choice(sec, prefix, "method", d.method, LLM_RERANK_METHODS),
        timeout=r.number(sec, prefix, "timeout", d.timeout, 0.001, None),
        max_retries=r.integer(sec, prefix, "max_retries", d.max_retries, 0),
        deadline=r.number(sec, prefix, "deadline", d.deadline, 0.001, MAX_SECONDS),
    )


def _rewrite_section(r: _Reader, sec: dict[str, Any]) -> RewriteConfig:
    prefix = "rag.rewrite"
    r.check_keys(sec, prefix, [f.name for f in fields(RewriteConfig)])
    d = RewriteConfig()
    return RewriteConfig(
        mode=r.choice(sec, prefix, "mode", d.mode, REWRITE_MODES),
        model=r.string(sec, prefix, "model", None),
        base_url=r.string(sec, prefix, "base_url", None),
        deadline=r.number(sec, prefix, "deadline", d.deadline, 0.001, MAX_SECONDS),
    )


ANSWER_KEYS = (
    "provider", "model", "base_url", "api_key_env", "max_evidence", "max_tokens",
    "temperature", "timeout", "max_retries", "min_coverage", "deadline", "max_answer_mb",
)  # fmt: skip
MAX_ANSWER_MB = 100.0  # a bigger cap is a typo: the reply is held in memory up to it
EVIDENCE_UNITS = {"chars": "chars", "characters": "chars", "tokens": "tokens"}


def parse_evidence_budget(value: object) -> tuple[int, str] | None:
    """``6000`` or ``"6000 chars"`` -> ``(6000, "chars")``; ``"1500 tokens"`` ->
    ``(1500, "tokens")``; None when ``value`` is neither (or not positive)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (value, "chars") if value > 0 else None
    if not isinstance(value, str):
        return None
    amount, _, written = value.strip().partition(" ")
    unit = EVIDENCE_UNITS.get(written.strip().lower() or "chars")
    if not amount.isdigit() or unit is None or int(amount) < 1:
        return None
    return int(amount), unit


def _answer_section(r: _Reader, sec: dict[str, Any]) -> AnswerConfig:
    prefix = "rag.answer"
    r.check_keys(sec, prefix, list(ANSWER_KEYS))
    d = AnswerConfig()
    provider = (r.string(sec, prefix, "provider", d.provider) or d.provider).strip()
    if not is_class_path(provider):
        provider = provider.lower()
        if provider not in CHAT_MODELS:
            raise r.fail(
                f"{prefix}.provider",
                f"must be one of {', '.join(CHAT_MODELS)} or 'package.module:Class', "
                f"got {provider!r}",
            )
    key_env = r.string(sec, prefix, "api_key_env", None)
    # Capitals only: a key pasted here by mistake is refused without being echoed.
    if key_env is not None and not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key_env):
        raise r.fail(
            f"{prefix}.api_key_env",
            "must name an environment variable in capitals (like OPENAI_API_KEY); keys "
            "themselves belong in the environment, never in the file",
        )
    budget = parse_evidence_budget(sec.get("max_evidence", d.max_evidence))
    if budget is None:
        raise r.fail(
            f"{prefix}.max_evidence",
            f"must be a positive number of characters (6000) or '<N> tokens', got "
            f"{sec.get('max_evidence')!r}",
        )
    return AnswerConfig(
        provider=provider,
        model=r.string(sec, prefix, "model", None),
        base_url=r.string(sec, prefix, "base_url", None),
        api_key_env=key_env,
        max_evidence=budget[0],
        evidence_unit=budget[1],
        max_tokens=r.integer(sec, prefix, "max_tokens", d.max_tokens, 1),
        temperature=r.number(sec, prefix, "temperature", d.temperature, 0.0, 2.0),
        timeout=r.number(sec, prefix, "timeout", d.timeout, 0.001, MAX_SECONDS),
        max_retries=r.integer(sec, prefix, "max_retries", d.max_retries, 0),
        min_coverage=r.number(sec, prefix, "min_coverage", d.min_coverage, 0.0, 1.0),
        deadline=r.number(sec, prefix, "deadline", d.deadline, 0.001, MAX_SECONDS),
        max_answer_mb=r.number(sec, prefix, "max_answer_mb", d.max_answer_mb, 0.001, MAX_ANSWER_MB),
    )

"""Trust for a ``jianmu.yaml`` that kb found in the working directory.

A folder is not always the user's own: a cloned repository or an unpacked archive can carry a
``jianmu.yaml``, and kb reads ``./jianmu.yaml`` without being asked. Most settings only change
how kb indexes and ranks, and apply from such a file as they are. The others send the user's
texts, queries or API keys to a model or server, run code (a class path, model files) or write
outside the file's folder: :data:`RULES` classifies every key of the file (:data:`SENDS`,
:data:`RUNS`, :data:`PATHS`, or none: harmless), and a ``./jianmu.yaml`` whose values make
any of them do so (:func:`risky_settings`) is refused as a whole (:func:`require`, one line,
exit 2, nothing imported or sent) until the user trusts it:

* ``kb trust [PATH]`` records the file's absolute path and the SHA-256 of its bytes in
  ``$XDG_DATA_HOME/kbcli/trusted.json`` (default ``~/.local/share/kbcli``); an edited file is
  refused again until it is trusted again. ``kb trust --revoke`` forgets it.
* A file the user names (``--config PATH``, ``$KB_CONFIG``) or keeps in their own config folder
  (``~/.config/kbcli/jianmu.yaml``) is theirs and needs no record.

What a setting does is judged from the file alone, never from the environment: a provider
switched on by the file sends data with the address and key the environment holds
(``rag.rerank.provider: llm`` with ``OPENAI_API_KEY`` set), and an environment changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kbcli.config.parse import read_file
from kbcli.config.registry import is_class_path
from kbcli.config.schema import CONFIG_FILENAME, default_db_path, user_data_dir
from kbcli.errors import ConfigError
from kbcli.system.locking import lock_file
from kbcli.system.redaction import redact

if TYPE_CHECKING:
    from kbcli.config.schema import Config

TRUST_FILENAME = "trusted.json"
FORMAT = 1

# What a setting can make kb do, for RULES (a key with none of them is harmless).
SENDS = "sends data"  # the user's texts, queries or keys to a model or server
RUNS = "runs code"  # a class path imported, model files loaded
PATHS = "reads paths"  # files outside the file's folder, read and written

CODE = "code kb would import and run"
ENDPOINT = "a server that would receive your API keys and texts"
MODEL = "model files kb would load and run"
OUTSIDE = "a path outside the file's folder that kb would write"
SECRET = "an environment variable whose value kb would send as an API key"
PROVIDER = "a provider that would receive your texts, with the API key in your environment"
SWITCH = "turns on sending your texts to the server, with the key, in your environment"
RECEIVER = "the model that would receive your texts, with the key in your environment"
DATABASE = "a database server that would receive your documents ($KB_PG_DSN)"

# The values of a provider setting that keep everything on this machine (or are kb's own
# default); any other registered name sends data, so a provider added later is refused
# untrusted until it is listed here.
LOCAL_VALUES: dict[str, tuple[str, ...]] = {
    "rag.embedding.provider": ("auto", "simple", "local", "static", "e5"),
    "rag.rerank.provider": ("none", "passthrough", "cross-encoder"),
    "rag.rewrite.mode": ("none",),
    "rag.answer.provider": ("openai",),  # kb ask's default: the file changes nothing
    "store.backend": ("sqlite", "memory", "faiss", "chroma"),
}
# Embedding providers that ignore rag.embedding.model or accept only their own.
MODEL_UNUSED = ("simple", "static", "e5")

Check = Callable[["Config", str], "tuple[Any, str] | None"]


@dataclass(frozen=True)
class Risk:
    """One setting of a file that needs the user's trust: its key, value and what it does."""

    key: str
    value: str
    why: str

    def __str__(self) -> str:
        return f"{self.key} {redact(self.value)!r} ({self.why})"  # a DSN's password: ***


@dataclass(frozen=True)
class Rule:
    """A key of ``jianmu.yaml``: what it can make kb do (``kinds``, empty: harmless) and
    ``check(config, key)``, which gives the value and why when the file's value does so."""

    key: str
    kinds: frozenset[str] = frozenset()
    check: Check | None = None


def setting_value(config: Config, key: str) -> Any:
    """The value of the dotted ``key`` in ``config`` (``store.*``: the store's settings)."""
    section, _, name = key.partition(".")
    if section == "store" and name != "backend":
        return config.store.settings.get(name)
    node: object = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _set(found: object) -> bool:
    return found is not None and bool(str(found).strip())


def _always(why: str) -> Check:
    """Risky whenever the file sets it."""
    return lambda c, key: (setting_value(c, key), why) if _set(setting_value(c, key)) else None


def _provider(c: Config, key: str) -> tuple[Any, str] | None:
    """A provider-like setting: a class path runs code; a name outside :data:`LOCAL_VALUES`
    sends data."""
    chosen = str(setting_value(c, key))
    if key == "rag.embedding.provider" and not c.rag.embedding.provider_set:
        return None  # not in the file: the keys present choose, as without a file
    if is_class_path(chosen):
        return chosen, CODE
    if chosen in LOCAL_VALUES[key]:
        return None
    if key == "store.backend":
        return chosen, DATABASE
    return chosen, SWITCH if key in ("rag.rerank.provider", "rag.rewrite.mode") else PROVIDER


def _class_path(c: Config, key: str) -> tuple[Any, str] | None:
    chosen = str(setting_value(c, key))
    return (chosen, CODE) if is_class_path(chosen) else None


def _embedding_model(c: Config, key: str) -> tuple[Any, str] | None:
    emb = c.rag.embedding
    if not _set(emb.model):
        return None
    if emb.provider_set and emb.provider == "local":
        return emb.model, MODEL
    if emb.provider_set and (emb.provider in MODEL_UNUSED or is_class_path(emb.provider)):
        return None  # unused, or the class (itself needing trust) takes it
    return emb.model, RECEIVER  # openai, gemini, or whichever the keys present pick


def _rerank_model(c: Config, key: str) -> tuple[Any, str] | None:
    rerank = c.rag.rerank
    if not _set(rerank.model) or rerank.provider in ("none", "passthrough"):
        return None
    if rerank.provider == "cross-encoder":
        return rerank.model, MODEL
    if is_class_path(rerank.provider):
        return None
    return rerank.model, RECEIVER


def _postgres(c: Config, key: str) -> tuple[Any, str] | None:
    found = setting_value(c, key)
    return (found, ENDPOINT) if c.store.backend == "postgres" and _set(found) else None


def _database(c: Config, key: str) -> tuple[Any, str] | None:
    db = c.paths.knowledge_db
    if db != default_db_path() and not _inside(db, _folder(c)):
        return db, OUTSIDE
    return None


def _chroma_path(c: Config, key: str) -> tuple[Any, str] | None:
    found = c.store.settings.get("path")
    if c.store.backend != "chroma" or not found:
        return None
    chroma = Path(str(found)).expanduser()
    return None if _inside(chroma, _folder(c)) else (chroma, OUTSIDE)


def _folder(c: Config) -> Path:
    return c.source.parent if c.source is not None else Path.cwd()


def _harmless(*keys: str) -> list[Rule]:
    return [Rule(key) for key in keys]


_S, _R, _P = frozenset({SENDS}), frozenset({RUNS}), frozenset({PATHS})
_SR = _S | _R

#: Every key of ``jianmu.yaml`` (``store.*``: every registered store's settings), with what
#: it can make kb do and when the file's value does so. A key missing here fails a test, so
#: no setting is added without deciding.
RULES: tuple[Rule, ...] = (
    Rule("rag.embedding.provider", _SR, _provider),
    Rule("rag.embedding.model", _SR, _embedding_model),
    Rule("rag.embedding.base_url", _S, _always(ENDPOINT)),
    *_harmless(
        "rag.embedding.dimensions", "rag.embedding.batch_size", "rag.embedding.max_retries",
        "rag.embedding.timeout", "rag.embedding.retry_budget", "rag.embedding.device",
        "rag.embedding.threads",
    ),
    Rule("rag.chunker", _R, _class_path),
    Rule("rag.rerank.provider", _SR, _provider),
    Rule("rag.rerank.model", _SR, _rerank_model),
    Rule("rag.rerank.base_url", _S, _always(ENDPOINT)),
    *_harmless(
        "rag.rerank.candidates", "rag.rerank.min_relevance", "rag.rerank.batch_size",
        "rag.rerank.max_documents", "rag.rerank.method", "rag.rerank.timeout",
        "rag.rerank.max_retries", "rag.rerank.deadline",
    ),
    Rule("rag.rewrite.mode", _S, _provider),
    # kb search --rewrite sends the query to this model even when the file leaves mode at none
    Rule("rag.rewrite.model", _S, _always(RECEIVER)),
    Rule("rag.rewrite.base_url", _S, _always(ENDPOINT)),
    *_harmless("rag.rewrite.deadline"),
    Rule("rag.answer.provider", _SR, _provider),
    Rule("rag.answer.model", _S, _always(RECEIVER)),
    Rule("rag.answer.base_url", _S, _always(ENDPOINT)),
    Rule("rag.answer.api_key_env", _S, _always(SECRET)),
    *_harmless(
        "rag.answer.max_evidence", "rag.answer.max_tokens", "rag.answer.temperature",
        "rag.answer.timeout", "rag.answer.max_retries", "rag.answer.min_coverage",
        "rag.answer.deadline", "rag.answer.max_answer_mb",
    ),
    *_harmless(
        "limits.chunk_size", "limits.chunk_overlap", "limits.rerank_alpha",
        "limits.source_weight", "limits.max_file_mb", "limits.file_timeout",
    ),
    Rule("paths.knowledge_db", _P, _database),
    *_harmless("analysis.language", "analysis.stem", "analysis.stopwords"),
    *_harmless(
        "ocr.enabled", "ocr.languages", "ocr.min_text_per_page", "ocr.dpi",
        "ocr.max_megapixels", "ocr.page_timeout", "ocr.min_confidence", "ocr.max_pages",
    ),
    Rule("store.backend", _SR, _provider),
    Rule("store.dsn", _S, _postgres),
    Rule("store.read_dsn", _S, _postgres),
    Rule("store.path", _P, _chroma_path),
    *_harmless(
        "store.busy_timeout", "store.max_size", "store.dim", "store.index_factory",
        "store.normalize", "store.metric", "store.ef_search", "store.collection",
        "store.table", "store.hnsw",
    ),
)  # fmt: skip

#: What each key of the file can make kb do (see :data:`RULES`); an empty set is harmless.
KINDS: dict[str, frozenset[str]] = {rule.key: rule.kinds for rule in RULES}


def risky_settings(config: Config) -> list[Risk]:
    """The settings of ``config`` (as read from its file) that need trust when the file was
    found in the working directory, in :data:`RULES` order: those that send data to a model
    or server, run code or write outside the file's folder."""
    risks: list[Risk] = []
    for rule in RULES:
        found = rule.check(config, rule.key) if rule.check is not None else None
        if found is not None:
            risks.append(Risk(rule.key, str(found[0]), found[1]))
    return risks


def _inside(path: Path, folder: Path) -> bool:
    # resolved: a symbolic link in the folder (a cloned repository can hold one) may lead out
    return Path(os.path.abspath(path)).resolve().is_relative_to(folder.resolve())


def trust_file() -> Path:
    """Where trust records live: ``$XDG_DATA_HOME/kbcli/trusted.json``."""
    return user_data_dir() / TRUST_FILENAME


def digest(raw: bytes) -> str:
    """The SHA-256 of a file's bytes, as recorded."""
    return hashlib.sha256(raw).hexdigest()


def key(path: Path) -> str:
    """A file's record key: the real path of its folder and its own name. Relative paths in the
    file are read from that folder, so the same bytes elsewhere (a copy, or a symbolic link to
    a trusted file) are another file; a linked folder is the folder it leads to."""
    absolute = Path(os.path.abspath(path))
    return os.path.join(os.path.realpath(absolute.parent), absolute.name)


def records() -> dict[str, dict[str, Any]]:
    """Every trust record by absolute path: ``{"sha256", "trusted_at"}``."""
    path = trust_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"Cannot read the trust records {path} ({exc}): remove the file and trust your "
            "jianmu.yaml files again with kb trust"
        ) from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise ConfigError(
            f"The trust records {path} are not kb's: remove the file and trust your "
            "jianmu.yaml files again with kb trust"
        )
    return {str(k): v for k, v in files.items() if isinstance(v, dict)}


def status(path: Path, raw: bytes) -> str:
    """``trusted`` (recorded with these bytes), ``changed`` (recorded, since edited) or
    ``untrusted``."""
    record = records().get(key(path))
    if record is None:
        return "untrusted"
    return "trusted" if record.get("sha256") == digest(raw) else "changed"


def require(config: Config, raw: bytes) -> None:
    """Refuse ``config``, read from a ``./jianmu.yaml`` found by the lookup with bytes
    ``raw``, when it sets anything :func:`risky_settings` lists and is not trusted as it is."""
    risks = risky_settings(config)
    if not risks or config.source is None:
        return
    file = config.source
    state = status(file, raw)
    if state == "trusted":
        return
    sets = "; ".join(str(r) for r in risks)
    if state == "changed":
        raise ConfigError(
            f"{file} changed since you trusted it, and it sets {sets}: read it, then run "
            f"'kb trust {file}' again (or pass --config {file})"
        )
    raise ConfigError(
        f"{file} was found in the working directory and is not trusted, and it sets {sets}: "
        f"read it, then run 'kb trust {file}' (or pass --config {file})"
    )


def trust(path: Path, raw: bytes) -> str:
    """Record ``path`` as trusted with the bytes ``raw``; returns the digest recorded."""
    value = digest(raw)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _update(lambda files: files.__setitem__(key(path), {"sha256": value, "trusted_at": when}))
    return value


def revoke(path: Path) -> bool:
    """Forget the record of ``path``; False when there was none."""
    return _update(lambda files: files.pop(key(path), None)) is not None


_T = TypeVar("_T")


def _update(change: Callable[[dict[str, dict[str, Any]]], _T]) -> _T:
    """Apply ``change(files)`` to the records under a lock and write them atomically."""
    path = trust_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with lock_file(path.with_name(f"{TRUST_FILENAME}.lock"), 10.0, str(path)):
        files = records()
        result = change(files)
        tmp = path.with_name(f"{TRUST_FILENAME}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "files": files}, indent=1), "utf-8")
        os.replace(tmp, path)
    return result


def config_path(path: Path | None) -> Path:
    """The ``jianmu.yaml`` that ``kb trust PATH`` means: PATH, the one in the folder PATH, or
    ``./jianmu.yaml`` without PATH."""
    target = Path(path).expanduser() if path is not None else Path.cwd()
    if target.is_dir():
        target = target / CONFIG_FILENAME
    return Path(os.path.abspath(target))


def trust_config(path: Path | None) -> tuple[Path, str, list[Risk]]:
    """Check the file ``kb trust PATH`` means (it must be a valid configuration) and trust it as
    it is now: returns the file, the digest recorded and what the trust allows."""
    file = config_path(path)
    if not file.is_file():
        raise ConfigError(f"No configuration file {file}: give the path of a jianmu.yaml")
    config, raw = read_file(file)
    return file, trust(file, raw), risky_settings(config)


def listing() -> list[dict[str, str]]:
    """Every trust record with its state now: ``trusted``, ``changed`` or ``missing``."""
    rows = []
    for path, record in sorted(records().items()):
        try:
            raw = Path(path).read_bytes()
        except OSError:
            state = "missing"
        else:
            state = "trusted" if record.get("sha256") == digest(raw) else "changed"
        rows.append({"path": path, "state": state, "trusted_at": str(record.get("trusted_at"))})
    return rows

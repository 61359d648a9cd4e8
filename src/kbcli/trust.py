"""Trust for a ``jianmu.yaml`` that kb found in the working directory.

A folder is not always the user's own: a cloned repository or an unpacked archive can carry a
``jianmu.yaml``, and kb reads ``./jianmu.yaml`` without being asked. Most settings only change
how kb indexes and ranks, and apply from such a file as they are. The settings listed by
:func:`risky_settings` make kb run code, load model files, send the user's API keys and texts
to a server, or write outside the file's folder; a ``./jianmu.yaml`` that sets any of them is
refused as a whole (:func:`require`, one line, exit 2, nothing imported) until the user trusts
it:

* ``kb trust [PATH]`` records the file's absolute path and the SHA-256 of its bytes in
  ``$XDG_DATA_HOME/kbcli/trusted.json`` (default ``~/.local/share/kbcli``); an edited file is
  refused again until it is trusted again. ``kb trust --revoke`` forgets it.
* A file the user names (``--config PATH``, ``$KB_CONFIG``) or keeps in their own config folder
  (``~/.config/kbcli/jianmu.yaml``) is theirs and needs no record.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .registry import is_class_path

if TYPE_CHECKING:
    from .config_schema import Config

TRUST_FILENAME = "trusted.json"
FORMAT = 1

CODE = "code kb would import and run"
ENDPOINT = "a server that would receive your API keys and texts"
MODEL = "model files kb would load and run"
OUTSIDE = "a path outside the file's folder that kb would write"
SECRET = "an environment variable whose value kb would send as an API key"


@dataclass(frozen=True)
class Risk:
    """One setting of a file that needs the user's trust: its key, value and what it does."""

    key: str
    value: str
    why: str

    def __str__(self) -> str:
        return f"{self.key} {self.value!r} ({self.why})"


def risky_settings(config: Config) -> list[Risk]:
    """The settings of ``config`` (as read from its file) that need trust when the file was
    found in the working directory: class paths, server URLs and DSNs, locally run model
    files, and database paths outside the file's folder."""
    from .config_schema import default_db_path

    rag, store = config.rag, config.store
    risks: list[Risk] = []

    def add(key: str, value: Any, why: str) -> None:
        if value is not None and str(value).strip():
            risks.append(Risk(key, str(value), why))

    for key, value in (
        ("store.backend", store.backend),
        ("rag.embedding.provider", rag.embedding.provider if rag.embedding.provider_set else ""),
        ("rag.chunker", rag.chunker),
        ("rag.rerank.provider", rag.rerank.provider),
        ("rag.answer.provider", rag.answer.provider),
    ):
        if is_class_path(value):
            add(key, value, CODE)
    add("rag.embedding.base_url", rag.embedding.base_url, ENDPOINT)
    add("rag.rerank.base_url", rag.rerank.base_url, ENDPOINT)
    add("rag.rewrite.base_url", rag.rewrite.base_url, ENDPOINT)
    add("rag.answer.base_url", rag.answer.base_url, ENDPOINT)
    add("rag.answer.api_key_env", rag.answer.api_key_env, SECRET)
    if store.backend == "postgres":
        add("store.dsn", store.settings.get("dsn"), ENDPOINT)
        add("store.read_dsn", store.settings.get("read_dsn"), ENDPOINT)
    if rag.embedding.provider_set and rag.embedding.provider == "local":
        add("rag.embedding.model", rag.embedding.model, MODEL)
    if rag.rerank.provider == "cross-encoder":
        add("rag.rerank.model", rag.rerank.model, MODEL)
    folder = config.source.parent if config.source is not None else Path.cwd()
    db = config.paths.knowledge_db
    if db != default_db_path() and not _inside(db, folder):
        add("paths.knowledge_db", db, OUTSIDE)
    if store.backend == "chroma" and store.settings.get("path"):
        chroma = Path(str(store.settings["path"])).expanduser()
        if not _inside(chroma, folder):
            add("store.path", chroma, OUTSIDE)
    return risks


def _inside(path: Path, folder: Path) -> bool:
    # resolved: a symbolic link in the folder (a cloned repository can hold one) may lead out
    return Path(os.path.abspath(path)).resolve().is_relative_to(folder.resolve())


def trust_file() -> Path:
    """Where trust records live: ``$XDG_DATA_HOME/kbcli/trusted.json``."""
    from .config_schema import user_data_dir

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


def _update(change: Any) -> Any:
    """Apply ``change(files)`` to the records under a lock and write them atomically."""
    from .locking import lock_file

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
    from .config_schema import CONFIG_FILENAME

    target = Path(path).expanduser() if path is not None else Path.cwd()
    if target.is_dir():
        target = target / CONFIG_FILENAME
    return Path(os.path.abspath(target))


def trust_config(path: Path | None) -> tuple[Path, str, list[Risk]]:
    """Check the file ``kb trust PATH`` means (it must be a valid configuration) and trust it as
    it is now: returns the file, the digest recorded and what the trust allows."""
    from .config_parse import read_file

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

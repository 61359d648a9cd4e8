"""``kb init`` and ``kb config``: write the commented configuration file, and show the
effective configuration with where each value came from (the file, the environment, an option
or the built-in default). API keys are reported as set or not set, never shown, and passwords
in connection strings and URLs (``store.dsn``, ``$KB_PG_DSN``, a base URL) as ``***``."""

from __future__ import annotations

import dataclasses
import os
from importlib import resources
from pathlib import Path
from typing import Any

from kbcli.config import trust
from kbcli.config.lookup import (
    CONFIG_FILENAME,
    FOUND_CWD,
    Config,
    load_config,
    locate_config,
    read_file,
)
from kbcli.config.parse import parse_yaml
from kbcli.config.registry import EMBEDDER_NOTES
from kbcli.embedders.lazy import automatic_provider
from kbcli.errors import InvalidOptionError
from kbcli.system.redaction import redact

# Environment variables kb config reports (the embedders' and the Postgres DSNs); values of
# *_KEY variables are never shown, passwords in the others are redacted.
REPORTED_ENV = (
    "OPENAI_API_KEY", "API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "OPENAI_BASE_URL",
    "OPENAI_API_BASE", "BASE_URL", "EMBEDDING_BASE_URL", "OPENAI_EMBED_MODEL",
    "GEMINI_EMBED_MODEL", "EMBEDDING_MODEL", "KB_PG_DSN", "KB_PG_READ_DSN",
)  # fmt: skip


def template() -> str:
    """The commented ``jianmu.yaml`` that ``kb init`` writes (every key, with its default)."""
    return resources.files("kbcli").joinpath("data").joinpath(CONFIG_FILENAME).read_text("utf-8")


def write_template(path: Path, *, force: bool = False) -> Path:
    """Write :func:`template` to ``path`` (a file, or a folder to put ``jianmu.yaml`` in)."""
    target = path / CONFIG_FILENAME if path.is_dir() else path
    if target.exists() and not force:
        raise InvalidOptionError(f"{target} already exists: edit it, or add --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(template(), encoding="utf-8")
    return target


def trust_row(config: Config, found: str | None, raw: bytes) -> dict[str, str]:
    """The ``config trust`` row of ``kb config``: whether kb uses the file's settings that
    send data to a model or server, run code or write outside its folder
    (:mod:`kbcli.config.trust`),
    and why."""
    if found != FOUND_CWD:
        return {"key": "config trust", "value": "not needed: a file you named or keep",
                "origin": str(found)}  # fmt: skip
    risks = trust.risky_settings(config)
    if not risks:
        return {"key": "config trust", "value": "not needed: it sets nothing that sends data "
                "to a model or server, runs code or writes outside its folder",
                "origin": FOUND_CWD}  # fmt: skip
    keys = ", ".join(r.key for r in risks)
    source = config.source
    assert source is not None  # a file found in the working folder
    state = trust.status(source, raw)
    if state == "trusted":
        when = trust.records()[trust.key(source)].get("trusted_at", "?")
        return {"key": "config trust", "value": f"trusted: kb uses {keys}",
                "origin": f"kb trust, {when}"}  # fmt: skip
    what = "changed since trusted" if state == "changed" else "not trusted"
    return {"key": "config trust",
            "value": f"{what}: kb refuses it for {keys} until 'kb trust {config.source}'",
            "origin": FOUND_CWD}  # fmt: skip


def _lookup(data: dict[str, Any], dotted: str) -> bool:
    node: object = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node or node[part] is None:
            return False
        node = node[part]
    return True


def effective(
    config_option: Path | None = None, db_option: Path | None = None
) -> list[dict[str, str]]:
    """Rows ``{key, value, origin}``: every setting in effect and where it came from."""
    file, found = locate_config(config_option)
    data: dict[str, Any] = {}
    config = load_config(config_option, check_trust=False)
    origin_file = "config file" if file is not None else "default"
    rows = [{"key": "config file", "value": str(file) if file else "-",
             "origin": found or "no file: built-in defaults"}]  # fmt: skip
    if file is not None:
        as_written, raw = read_file(file)
        data = parse_yaml(raw, file)
        rows.append(trust_row(as_written, found, raw))

    def add(dotted: str, value: Any) -> None:
        origin = origin_file if _lookup(data, dotted) else "default"
        rows.append({"key": dotted, "value": "-" if value is None else value, "origin": origin})

    emb = config.rag.embedding
    for f in dataclasses.fields(emb):
        if f.name == "provider_set":
            continue
        value = getattr(emb, f.name)
        if f.name == "provider" and os.environ.get("KB_EMBEDDER", "").strip():
            rows.append({"key": "rag.embedding.provider", "value": value,
                         "origin": "$KB_EMBEDDER"})  # fmt: skip
            continue
        if f.name == "provider" and not emb.provider_set:
            rows.append({"key": "rag.embedding.provider", "value": "auto",
                         "origin": f"default: by API keys, now {automatic_provider()} "
                                   "(an index keeps the embedder it was built with)"})  # fmt: skip
            continue
        add(f"rag.embedding.{f.name}", value)

    rows.append({"key": "embedders", "value": ", ".join(EMBEDDER_NOTES),
                 "origin": "choose: kb ingest --embedder NAME, $KB_EMBEDDER or "
                           "rag.embedding.provider"})  # fmt: skip
    add("rag.chunker", config.rag.chunker)
    add("store.backend", config.store.backend)
    for key, value in sorted(config.store.settings.items()):
        add(f"store.{key}", redact(value) if isinstance(value, str) else value)
    for f in dataclasses.fields(config.limits):
        add(f"limits.{f.name}", getattr(config.limits, f.name))
    for f in dataclasses.fields(config.analysis):
        add(f"analysis.{f.name}", getattr(config.analysis, f.name))
    for f in dataclasses.fields(config.ocr):
        value = getattr(config.ocr, f.name)
        add(f"ocr.{f.name}", ", ".join(value) if isinstance(value, tuple) else value)
    if db_option is not None:
        rows.append({"key": "paths.knowledge_db", "value": str(Path(db_option).expanduser()),
                     "origin": "--db"})  # fmt: skip
    elif os.environ.get("KB_DB"):
        rows.append({"key": "paths.knowledge_db", "value": str(config.paths.knowledge_db),
                     "origin": "$KB_DB"})  # fmt: skip
    else:
        add("paths.knowledge_db", str(config.paths.knowledge_db))
    for name in REPORTED_ENV:
        value = os.environ.get(name)
        if value:
            shown = "set (hidden)" if "KEY" in name else redact(value)
            rows.append({"key": name, "value": shown, "origin": "environment"})
    return rows

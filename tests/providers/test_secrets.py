"""Secrets (issue 17, matrix item 8): canary API keys in the environment, fake provider
servers answering 401, 500 (echoing the key back in the error body) or hanging, and a healthy
one: zero canary bytes in stdout, stderr, log records or any file the run wrote (database,
WAL, caches, lock files)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cli_helpers import run
from fake_providers import FakeServer

CANARIES = {
    "OPENAI_API_KEY": "sk-canaryOPENAI0123456789abcdef",
    "GOOGLE_API_KEY": "AIzaCanaryGOOGLE0123456789abcdef",
    "GEMINI_API_KEY": "AIzaCanaryGEMINI0123456789abcdef",
    "API_KEY": "canaryGENERIC0123456789abcdef",
    "RERANK_API_KEY": "canaryRERANK0123456789abcdef",
    "LLM_API_KEY": "canaryLLM0123456789abcdef",
}
CANARY_BYTES = [v.encode() for v in CANARIES.values()]
TIMEOUT, BUDGET = 0.3, 0.8


@pytest.fixture(scope="module", autouse=True)
def _sdks_imported():
    import google.genai  # noqa: F401
    import openai  # noqa: F401


def configure(tmp_path: Path, monkeypatch, server: FakeServer, provider: str) -> Path:
    base = server.url + "/v1" if provider == "openai" else server.url
    cfg = tmp_path / "jianmu.yaml"
    cfg.write_text(
        "rag:\n  embedding:\n"
        f"    provider: {provider}\n    base_url: {base}\n    model: fake-embed\n"
        f"    timeout: {TIMEOUT}\n    retry_budget: {BUDGET}\n    max_retries: 3\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("KB_CONFIG", str(cfg))
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "a.md").write_text("# Reset\n\nHow to reset a password.\n", encoding="utf-8")
    (docs / "b.txt").write_text("Water the tomatoes every morning.\n", encoding="utf-8")
    return docs


def leaks(text: str | bytes) -> list[str]:
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    return [c.decode() for c in CANARY_BYTES if c in data]


def files_leaking(root: Path) -> list[str]:
    out = []
    for path in root.rglob("*"):
        if path.is_file() and leaks(path.read_bytes()):
            out.append(str(path.relative_to(root)))
    return out


def commands(docs: Path) -> list[tuple[str, ...]]:
    return [
        ("ingest", str(docs)),
        ("ingest", str(docs), "--json"),
        ("search", "reset password", "--mode", "semantic"),
        ("search", "reset password", "--mode", "hybrid", "--json"),
        ("stats", "--json"),
        ("config", "--json"),
        ("config",),
        ("--debug", "search", "reset password", "--mode", "semantic"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["openai", "gemini"])
@pytest.mark.parametrize("mode", ["ok", "401", "500-echo", "401-echo", "hang"])
def test_no_canary_byte_reaches_output_logs_or_files(tmp_path, monkeypatch, caplog, provider, mode):
    caplog.set_level(logging.DEBUG)
    with FakeServer() as server:
        docs = configure(tmp_path, monkeypatch, server, provider)
        if mode == "ok":
            pass
        elif mode == "hang":
            server.hang = True
        else:
            server.always = int(mode[:3])
            server.echo_key_in_errors = mode.endswith("echo")
        exits = []
        for args in commands(docs):
            result = run(*args)
            exits.append(result.exit_code)
            shown = result.stdout + result.stderr
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                shown += repr(result.exception) + str(result.exception)
            assert leaks(shown) == [], (args, shown[-800:])
        if mode != "ok":
            assert exits[0] == 1  # the provider failure was met, not skipped
        assert server.requests, "the fake provider was never called"
        seen = [k for (_, headers, _) in server.requests for k in leaks(str(headers))]
        assert seen  # the key really was in play: sent to the provider and nowhere else
    logged = "\n".join(
        f"{r.name} {r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records
    )
    assert leaks(logged) == [], logged[-800:]
    assert files_leaking(tmp_path) == []


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://kb:canaryPGpass0123@db.example.com:5432/kb",
        "host=db.example.com user=kb password=canaryPGpass0123 dbname=kb",
        "postgresql://kb@db.example.com/kb?sslmode=require&password=canaryPGpass0123",
    ],
)
def test_kb_config_never_prints_a_dsn_password(tmp_path, monkeypatch, dsn):
    """``store.dsn``/``store.read_dsn`` in the file and ``$KB_PG_DSN``/``$KB_PG_READ_DSN`` or a
    base URL with credentials in the environment: kb config names the server, never the
    password (it printed them as written before)."""
    secret = "canaryPGpass0123"
    cfg = tmp_path / "jianmu.yaml"
    cfg.write_text(
        f"store:\n  backend: postgres\n  dsn: '{dsn}'\n  read_dsn: '{dsn}'\n", encoding="utf-8"
    )
    monkeypatch.setenv("KB_CONFIG", str(cfg))
    monkeypatch.setenv("KB_PG_DSN", dsn)
    monkeypatch.setenv("KB_PG_READ_DSN", dsn)
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://user:{secret}@llm.example.com/v1")
    for args in (("config",), ("config", "--json")):
        result = run(*args)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        shown = result.stdout + result.stderr
        assert secret not in shown, shown
    rows = {r["key"]: r["value"] for r in json.loads(run("config", "--json").stdout)}
    for key in ("store.dsn", "store.read_dsn", "KB_PG_DSN", "KB_PG_READ_DSN"):
        assert "***" in rows[key] and "db.example.com" in rows[key], rows[key]  # still says where
    assert rows["OPENAI_BASE_URL"] == "https://user:***@llm.example.com/v1"

"""Test isolation: every test gets its own config, database and user dirs, and no API keys."""

from __future__ import annotations

import signal

import pytest

from kbcli.config.lookup import reset_config_cache

# A shell without job control starts a background command (`pytest &`, a detached CI step)
# with SIGINT ignored, and every process the tests start inherits that: the tests of Ctrl-C
# would then see it ignored, as kb rightly leaves it (nohup). They test the terminal case.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# `nohup` does the same to SIGHUP, which kb also leaves ignored: the hangup tests test a
# process whose terminal closes, so their children start with SIGHUP at its default.
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

API_KEY_VARS = (
    "OPENAI_API_KEY",
    "API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "BASE_URL",
    "EMBEDDING_BASE_URL",
    "OPENAI_EMBED_MODEL",
    "GEMINI_EMBED_MODEL",
    "EMBEDDING_MODEL",
    "RERANK_API_KEY",
    "RERANK_BASE_URL",
    "RERANK_MODEL",
    "LLM_API_KEY",
    "LLM_BASE_URL",
    "LLM_MODEL",
)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Point config, database and XDG dirs into tmp_path; drop provider keys and settings."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("KB_DB", str(tmp_path / "kb.db"))
    monkeypatch.delenv("KB_CONFIG", raising=False)
    monkeypatch.delenv("KB_PG_READ_DSN", raising=False)  # a user's standby never serves a test
    for var in API_KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    reset_config_cache()
    yield
    reset_config_cache()


from console_script import kb_exe  # noqa: E402,F401  (the real kb console script)
from pg_server import pg_dsn, pg_pair, pg_table  # noqa: E402,F401  (the PostgreSQL servers)

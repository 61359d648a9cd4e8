"""CrossEncoderReranker on both routes with a tiny random BERT cross-encoder built offline."""

from __future__ import annotations

import subprocess
import sys

import pytest

from extras import need
from kbcli import Document, KnowledgeBase, SearchResult
from kbcli.errors import MissingDependencyError, RerankerError
from kbcli.search.rerank import CrossEncoderReranker, build_reranker
from kbcli.search.rerank.cross_encoder import export_onnx, find_onnx

need("torch")
need("transformers")

TEXTS = [
    "To reset your password open settings and click reset password.",
    "Water the tomatoes every morning and keep the basil out of the sun.",
    "Invoices are due within thirty days of the delivery date.",
    "A second page: late invoices are charged a fee.",
    "Book trains for trips under four hours; flights need approval.",
    "The VPN password rotates every 90 days.",
    "How do I install the update on Linux?",
    "Restore the database from the nightly backup.",
]
QUERY = "how do i reset my password"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from tiny_cross_encoder import build_tiny_cross_encoder

    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce") / "model")


@pytest.fixture(scope="session")
def tiny_onnx(tiny_model, tmp_path_factory):
    need("onnx")
    return export_onnx(tiny_model, tmp_path_factory.mktemp("tiny-ce-onnx") / "onnx")


def hits():
    return [SearchResult(Document(f"d{i}", t), 1.0 - i / 10) for i, t in enumerate(TEXTS)]


def test_both_routes_give_the_same_order_and_scores(tiny_model, tiny_onnx):
    need("sentence_transformers")
    need("onnxruntime")
    st = CrossEncoderReranker(tiny_model, backend="sentence-transformers", batch_size=3)
    ort = CrossEncoderReranker(tiny_onnx, batch_size=3)
    assert st.backend == "sentence-transformers" and ort.backend == "onnx"
    by_st = st.rerank(QUERY, hits())
    by_ort = ort.rerank(QUERY, hits())
    assert [h.document.id for h in by_st] == [h.document.id for h in by_ort]
    for a, b in zip(by_st, by_ort):
        assert a.score == pytest.approx(b.score, abs=1e-5)
    scores = [h.score for h in by_st]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert max(scores) - min(scores) > 0.05  # initializer_range=0.5 spreads the scores
    assert sorted(h.document.id for h in by_st) == sorted(h.document.id for h in hits())


def test_scores_do_not_depend_on_batching_or_input_order(tiny_onnx):
    need("onnxruntime")
    one = CrossEncoderReranker(tiny_onnx, batch_size=1).score(QUERY, TEXTS)
    many = CrossEncoderReranker(tiny_onnx, batch_size=16).score(QUERY, TEXTS)
    assert one == pytest.approx(many, abs=1e-5)
    backwards = CrossEncoderReranker(tiny_onnx).score(QUERY, TEXTS[::-1])
    assert backwards[::-1] == pytest.approx(many, abs=1e-5)


def test_long_passages_are_truncated_to_the_models_limit(tiny_onnx, tiny_model):
    need("onnxruntime")
    long_text = "password " * 2000  # far beyond the tiny model's 128 positions
    assert len(CrossEncoderReranker(tiny_onnx).score(QUERY, [long_text, "x"])) == 2
    need("sentence_transformers")
    st = CrossEncoderReranker(tiny_model, backend="sentence-transformers")
    assert len(st.score(QUERY, [long_text])) == 1


def test_auto_route_and_onnx_lookup(tiny_model, tiny_onnx, tmp_path):
    assert find_onnx(tiny_onnx) == tiny_onnx / "model.onnx"
    assert find_onnx(tiny_onnx / "model.onnx") == tiny_onnx / "model.onnx"
    assert find_onnx(tiny_model) is None
    assert CrossEncoderReranker(tiny_model).backend == "sentence-transformers"
    assert CrossEncoderReranker(tiny_onnx.parent).backend == "onnx"  # folder/onnx/model.onnx


def test_constructing_loads_nothing(tiny_onnx):
    code = (
        "import sys\n"
        "from kbcli.search.rerank import CrossEncoderReranker\n"
        f"r = CrossEncoderReranker({str(tiny_onnx)!r})\n"
        "assert r.backend == 'onnx'\n"
        "print(sorted(m for m in ('onnxruntime', 'tokenizers', 'torch', 'sentence_transformers')"
        " if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_missing_model_is_a_one_line_error(tmp_path):
    need("sentence_transformers")
    with pytest.raises(RerankerError) as err:
        CrossEncoderReranker(tmp_path / "nope").rerank("q", hits())
    assert "nothing is downloaded" in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "model.onnx").write_bytes(b"not onnx")
    with pytest.raises(RerankerError, match="tokenizer.json"):
        CrossEncoderReranker(tmp_path / "bare").rerank("q", hits())


def test_missing_runtime_names_the_extra(tiny_onnx, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"kbcli\[local\]"):
        CrossEncoderReranker(tiny_onnx).rerank("q", hits())


def test_configured_cross_encoder_reranks_a_knowledge_base(tiny_onnx, tmp_path):
    need("onnxruntime")
    config_file = tmp_path / "cwd" / "jianmu.yaml"
    config_file.write_text(
        f"rag:\n  rerank:\n    provider: cross-encoder\n    model: {tiny_onnx}\n    batch_size: 4\n"
    )
    from kbcli.config.lookup import load_config
    from kbcli.config.trust import trust

    trust(config_file, config_file.read_bytes())  # it is in the cwd and names a model to run

    config = load_config(config_file)
    reranker = build_reranker(config)
    assert isinstance(reranker, CrossEncoderReranker) and reranker.batch_size == 4
    kb = KnowledgeBase.open(tmp_path / "kb.db", config=config)
    try:
        for text in TEXTS:
            kb.add(text)
        out = kb.search(QUERY, k=3, mode="keyword", explain=True)
        assert len(out) == 3
        assert {"recall_rank", "fused", "rerank"} <= set(out[0].explain)
        assert out[0].score == out[0].explain["rerank"]
    finally:
        kb.close()


def test_relative_model_folder_in_config_is_relative_to_the_file(tmp_path):
    from kbcli.config.lookup import load_config

    (tmp_path / "conf" / "models" / "ce").mkdir(parents=True)
    file = tmp_path / "conf" / "jianmu.yaml"
    file.write_text("rag: {rerank: {provider: cross-encoder, model: models/ce}}\n")
    assert load_config(file).rag.rerank.model == str(tmp_path / "conf" / "models" / "ce")
    file.write_text("rag: {rerank: {provider: cross-encoder, model: BAAI/bge-reranker-v2-m3}}\n")
    assert load_config(file).rag.rerank.model == "BAAI/bge-reranker-v2-m3"

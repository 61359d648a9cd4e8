"""The bundled MiniLM's ONNX graph as kb runs it against the same graph after onnxruntime's
transformer optimizer (SkipLayerNormalization and BiasGelu fused; the int8 graph's attention is
not fusable), in chunks per CPU-second on one thread, the two taken in turns.

    python benchmarks/bench_onnx_graph.py [--texts 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def session(path: str, ort):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import optimize_model

    from kbcli.embedders.local import default_model_files, load_model

    runtime = load_model(None, "onnx")
    source = str(default_model_files()["onnx"])
    fused_path = Path(tempfile.mkdtemp()) / "fused.onnx"
    model = optimize_model(source, model_type="bert", num_heads=12, hidden_size=384, opt_level=0)
    model.save_model_to_file(str(fused_path))
    print("fused operators:", {k: v for k, v in model.get_fused_operator_statistics().items() if v})
    base = "the index stores chunks of text from markdown pdf and word files; a query is embedded "
    texts = [(base * 6)[: 200 + (i * 37) % 300] for i in range(args.texts)]
    sessions = {"as kb runs it": session(source, ort), "fused": session(str(fused_path), ort)}
    runtime.adaptive = False
    rates: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(args.rounds):
        for name, s in sessions.items():
            runtime.session = s
            started = time.process_time()
            runtime.encode(texts, 32)
            rates[name].append(len(texts) / (time.process_time() - started))
    for name, values in rates.items():
        print(f"{name:14} chunks per CPU-second: {', '.join(f'{v:.0f}' for v in values)}")
    print("load average", ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()

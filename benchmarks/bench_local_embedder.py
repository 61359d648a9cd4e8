"""Measure the local embedder: import and load time, query latency, chunks/s on realistic
chunks (before/after against another source tree), the physical bound, whole-command hybrid
``kb search`` latency, and agreement of the default ONNX int8 route with sentence-transformers.

Run:  python benchmarks/bench_local_embedder.py [--chunks 512] [--repeats 5] [--window 32]
                                                [--compare OTHER/src] [--skip-st] [--skip-command]

``--compare`` measures the embedder of another checkout (``git worktree add /tmp/old <rev>``,
then ``--compare /tmp/old/src``) in the same run, alternating with this one, so both see the
same machine load. Chunks come from the BEIR collections in ``../shared/eval`` (scifact, cisi,
cranfield) cut by kbcli's structure chunker at 500 characters, else from generated sentences
of 80 to 500 characters. Needs ``kbcli[local]``; the comparison also needs sentence-transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
COLLECTIONS = ("scifact", "cisi", "cranfield")

WORDS = (
    "the index stores chunks of text from markdown pdf and word files; a query is embedded and "
    "compared with every chunk by cosine similarity while keywords are scored with bm25 and both "
    "lists are fused; reset your password from the account page or ask an administrator; the "
    "weather tomorrow brings rain in the north and sun in the south; sqlite keeps everything in "
    "one file that can be copied backed up and opened by other tools; embeddings from remote "
    "providers need an api key while the local model runs offline on the cpu"
).split()

# all-MiniLM-L6-v2 (BERT): 6 layers, hidden 384, feed-forward 1536.
LAYERS, HIDDEN, FFN = 6, 384, 1536


def synthetic(n: int, seed: int = 7) -> list[str]:
    """``n`` pseudo-sentences of 80 to 500 characters, the same on every run."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chars = rng.randint(80, 500)
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS))
        out.append(" ".join(words)[:chars])
    return out


def realistic(n: int, eval_dir: Path) -> tuple[list[str], str]:
    """``n`` chunks of real English text cut at 500 characters, and where they came from."""
    from kbcli.ingest.chunkers import make_chunker

    files = [eval_dir / c / "corpus.jsonl" for c in COLLECTIONS]
    files = [f for f in files if f.is_file()]
    if not files:
        return synthetic(n), "generated sentences of 80-500 characters"
    chunker = make_chunker("structure", 500, 50)
    per_file = -(-n // len(files))
    out: list[str] = []
    for path in files:
        got: list[str] = []
        with path.open(encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                got.extend(chunker.chunk(f"{doc.get('title', '')}\n\n{doc['text']}".strip()))
                if len(got) >= per_file:
                    break
        out.extend(got[:per_file])
    names = ", ".join(p.parent.name for p in files)
    return out[:n], f"{names} chunked at 500 characters"


def flops_per_chunk(tokens: float) -> float:
    """Multiply-add FLOPs of one MiniLM-L6 forward pass over ``tokens`` tokens.

    Per layer: Q, K, V and output projections (4 h^2) and the feed-forward pair (2 h f) for
    each token, plus attention scores and their weighted sum (2 t h per token); 2 FLOPs per
    multiply-add. Embeddings, layer norms, softmax and GELU are O(t h) and left out.
    """
    dense = 2 * tokens * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN)
    attention = 2 * 2 * tokens * tokens * HIDDEN
    return LAYERS * (dense + attention)


def lscpu() -> dict[str, str]:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


def cpu_peak(cores: int) -> tuple[float | None, str]:
    """Theoretical float32 GFLOP/s of ``cores`` cores from lscpu, and how it was derived.

    Assumes two FMA units per core (Zen 4/5, Skylake-SP and later): 64 FLOPs a cycle with
    AVX-512, 32 with AVX2 + FMA. The clock is ``CPU max MHz`` or, in a VM that hides it,
    BogoMIPS / 2 (the nominal clock).
    """
    info = lscpu()
    flags = info.get("Flags", "").split()
    per_cycle = 64 if "avx512f" in flags else 32 if {"avx2", "fma"} <= set(flags) else 8
    mhz = info.get("CPU max MHz")
    source = "max MHz"
    if not mhz and info.get("BogoMIPS"):
        mhz, source = str(float(info["BogoMIPS"]) / 2), "BogoMIPS/2"
    if not mhz:
        return None, "clock unknown"
    ghz = float(mhz) / 1000
    model = info.get("Model name", "CPU")
    return cores * ghz * per_cycle, (
        f"{model}, {cores} cores x {ghz:.2f} GHz ({source}) x {per_cycle} FLOPs/cycle"
    )


def sgemm_rate(n: int = 2048) -> float:
    """Measured float32 GFLOP/s of numpy's BLAS on an n x n matrix product (best of 5)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    a @ b
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def run_worker(src: str, *args: str) -> dict:
    """Run this script's worker mode with ``src`` first on the path; its JSON answer."""
    env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, __file__, "--worker", src, *args]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SystemExit(f"worker for {src} failed:\n{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def worker(args: argparse.Namespace) -> None:
    """One measurement in a fresh process: chunks/s over the texts in ``args.texts``, or the
    embedder's start-up costs (``--startup``)."""
    if args.startup:
        marks: dict[str, float] = {}
        start = time.perf_counter()
        import numpy  # noqa: F401

        marks["import numpy"] = time.perf_counter() - start
        start = time.perf_counter()
        import onnxruntime  # noqa: F401
        import tokenizers

        marks["import onnxruntime + tokenizers"] = time.perf_counter() - start
        from kbcli.embedders.local import LocalEmbedder, default_model_files

        start = time.perf_counter()
        tokenizers.Tokenizer.from_file(str(default_model_files()["tokenizer"]))
        marks["(tokenizer.json load alone)"] = time.perf_counter() - start
        start = time.perf_counter()
        embedder = LocalEmbedder()
        marks["LocalEmbedder(): tokenizer + session"] = time.perf_counter() - start
        start = time.perf_counter()
        embedder.embed_query("how do I reset my password")
        marks["first query"] = time.perf_counter() - start
        start = time.perf_counter()
        embedder.embed_query("how do I change my password")
        marks["second query"] = time.perf_counter() - start
        print(json.dumps(marks))
        return
    from kbcli.embedders.local import LocalEmbedder

    texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))
    embedder = LocalEmbedder(batch_size=args.batch)
    embedder.embed_documents(texts[: args.batch])  # warm up
    rates, cpu_rates = [], []
    for _ in range(args.passes):
        start, cpu = time.perf_counter(), os.times()
        for i in range(0, len(texts), args.window):
            embedder.embed_documents(texts[i : i + args.window])
        after = os.times()
        rates.append(len(texts) / (time.perf_counter() - start))
        cpu_seconds = after.user + after.system - cpu.user - cpu.system
        cpu_rates.append(len(texts) / max(cpu_seconds, 1e-9))
    threads = getattr(embedder._runtime, "threads", None)  # None: the tree predates the choice
    print(json.dumps({"rates": rates, "cpu_rates": cpu_rates, "threads": threads}))


def import_seconds(statement: str, src: str) -> float | None:
    """Wall time of ``statement`` in a fresh interpreter (best of 3), None if it fails."""
    best = None
    for _ in range(3):
        code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
        env = {**os.environ, "PYTHONPATH": src}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if run.returncode != 0:
            return None
        value = float(run.stdout.strip().splitlines()[-1])
        best = value if best is None else min(best, value)
    return best


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def spread(values: list[float], unit: str = "", digits: int = 1) -> str:
    med, low, high = statistics.median(values), min(values), max(values)
    return f"median {med:.{digits}f}{unit} (min {low:.{digits}f}, max {high:.{digits}f})"


def padded_tokens(lengths: list[int], batch: int, window: int | None, budget: int | None) -> float:
    """Mean tokens computed per chunk when each batch pads to its longest text.

    ``window`` None: batches of ``batch`` in arrival order (before length sorting). Otherwise
    calls of ``window`` texts, each sorted and cut into runs of at most ``batch`` texts and
    ``budget`` padded tokens, as ``OnnxModel.encode`` does.
    """
    if window is None:
        runs = [lengths[i : i + batch] for i in range(0, len(lengths), batch)]
        return sum(max(r) * len(r) for r in runs) / len(lengths)
    total = 0
    for start in range(0, len(lengths), window):
        seq = sorted(lengths[start : start + window])
        i = 0
        while i < len(seq):
            j = i + 1
            while (
                j < len(seq)
                and j - i < batch
                and (budget is None or (j - i + 1) * seq[j] <= budget)
            ):
                j += 1
            total += seq[j - 1] * (j - i)
            i = j
    return total / len(lengths)


def bench_throughput(
    args: argparse.Namespace, texts: list[str], trees: dict[str, str]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Chunks per wall second and per CPU second (user + system, all threads) of each tree."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(texts, f)
    rates: dict[str, list[float]] = {label: [] for label in trees}
    cpu_rates: dict[str, list[float]] = {label: [] for label in trees}
    threads: dict[str, list[object]] = {label: [] for label in trees}
    try:
        for _ in range(args.repeats):  # alternate, so load changes hit both sides alike
            for label, src in trees.items():
                window = str(args.window)
                answer = run_worker(
                    src, "--texts", f.name, "--batch", "32", "--passes", "1", "--window", window
                )
                rates[label].extend(answer["rates"])
                cpu_rates[label].extend(answer["cpu_rates"])
                threads[label].append(answer.get("threads"))
    finally:
        os.unlink(f.name)
    for label, used in threads.items():
        shown = ", ".join("onnxruntime default" if t is None else str(t) for t in used)
        print(f"  {label:<10} session threads per run: {shown}")
    return rates, cpu_rates


def bench_command(args: argparse.Namespace, trees: dict[str, str]) -> None:
    """Whole-process hybrid ``kb search`` with the local model over examples/docs."""
    query = "how do I reset my password"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "jianmu.yaml"
        config.write_text("rag:\n  embedding:\n    provider: local\n", encoding="utf-8")
        times: dict[str, list[float]] = {label: [] for label in trees}
        envs = {}
        for label, src in trees.items():
            db = Path(tmp) / f"{re.sub(r'[^a-z]', '', label)}.db"
            env = {**os.environ, "PYTHONPATH": src, "KB_CONFIG": str(config), "KB_DB": str(db)}
            for key in ("OPENAI_API_KEY", "API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
                env.pop(key, None)
            ingest = [sys.executable, "-m", "kbcli", "ingest", str(ROOT / "examples" / "docs")]
            subprocess.run(ingest, env=env, capture_output=True, check=True)
            envs[label] = env
        search = [sys.executable, "-m", "kbcli", "search", query, "--mode", "hybrid", "--json"]
        for _ in range(args.command_runs):
            for label, env in envs.items():
                start = time.perf_counter()
                subprocess.run(search, env=env, capture_output=True, check=True)
                times[label].append(time.perf_counter() - start)
        for label, values in times.items():
            print(f"  {label:<10} {spread([v * 1000 for v in values], ' ms', 0)}")
        last = list(envs)[-1]
        run = subprocess.run(
            [sys.executable, "-X", "importtime", *search[1:]],
            env=envs[last],
            capture_output=True,
            text=True,
        )
        rows = []
        for line in run.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                rows.append((int(parts[1]), parts[2].rstrip()))
        top = [r for r in rows if not r[1].startswith("  ")]  # top-level imports only
        top.sort(reverse=True)
        total = sum(us for us, _ in top) / 1000
        print(f"  imports ({last}, -X importtime, top level): {total:.0f} ms in all; largest:")
        for us, name in top[:6]:
            print(f"    {us / 1000:7.1f} ms  {name.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the chunks/s runs")
    parser.add_argument("--compare", metavar="SRC", help="another checkout's src folder")
    parser.add_argument("--eval-dir", type=Path, default=EVAL)
    parser.add_argument("--command-runs", type=int, default=9)
    parser.add_argument(
        "--window",
        type=int,
        default=32,
        help="texts per embed_documents call (32: what kb ingest sends at batch size 32)",
    )
    parser.add_argument("--skip-st", action="store_true", help="skip sentence-transformers")
    parser.add_argument("--skip-command", action="store_true", help="skip whole-command runs")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--texts", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    parser.add_argument("--passes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--startup", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    src = str(ROOT / "src")
    sys.path.insert(0, src)
    trees = {"before": args.compare, "after": src} if args.compare else {"this tree": src}

    import numpy as np
    import onnxruntime

    from kbcli.embedders.local import LocalEmbedder
    from kbcli.embedders.local_runtime import available_cpus, default_threads

    print(
        f"python {sys.version.split()[0]}, onnxruntime {onnxruntime.__version__}, "
        f"{available_cpus()} CPUs available, {default_threads()} session threads now; {load()}"
    )
    for label, statement in [
        ("import onnxruntime + tokenizers", "import onnxruntime, tokenizers"),
        ("import kbcli.embedders.local", "import kbcli.embedders.local"),
        ("import sentence_transformers", "import sentence_transformers"),
    ]:
        if "sentence" in label and args.skip_st:
            continue
        seconds = import_seconds(statement, src)
        shown = f"{seconds:.2f} s" if seconds is not None else "not installed"
        print(f"{label:<34} {shown}")

    start = time.perf_counter()
    onnx = LocalEmbedder()
    print(f"{'load default model (onnx)':<34} {time.perf_counter() - start:.2f} s")
    latencies = []
    for i in range(30):
        start = time.perf_counter()
        onnx.embed_query(f"how do I reset my password {i}")
        latencies.append((time.perf_counter() - start) * 1000)
    print(f"{'single query (onnx), median':<34} {statistics.median(latencies):.1f} ms")

    texts, origin = realistic(args.chunks, args.eval_dir)
    tokenizer = onnx._runtime.tokenizer
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    mean_tokens = statistics.mean(lengths)
    print(f"\nrealistic chunks: {len(texts)} from {origin}")
    print(
        f"  characters mean {statistics.mean(map(len, texts)):.0f}; tokens mean "
        f"{mean_tokens:.1f}, median {statistics.median(lengths):.0f}, max {max(lengths)}"
    )
    from kbcli.embedders import local_runtime

    budget = getattr(local_runtime, "MAX_BATCH_TOKENS", None)
    print(
        f"  tokens computed per chunk, batch 32: {padded_tokens(lengths, 32, None, None):.1f} "
        f"padded in arrival order (128 if padded as the bundled tokenizer.json says); "
        f"length-sorted in runs of <= {budget} tokens: "
        f"{padded_tokens(lengths, 32, args.window, budget):.1f} at {args.window} texts a call, "
        f"{padded_tokens(lengths, 32, len(lengths), budget):.1f} at {len(lengths)}"
    )

    print(
        f"\nchunks/s, batch 32, {args.window} texts per call, fresh process per run, "
        f"{args.repeats} rounds; {load()}"
    )
    rates, cpu_rates = bench_throughput(args, texts, trees)
    for label, values in rates.items():
        print(f"  {label:<10} {spread(values)} chunks/s")
    for label, values in cpu_rates.items():
        print(f"  {label:<10} {spread(values)} chunks per CPU-second (steadier under load)")
    if args.compare:
        ratio = statistics.median(rates["after"]) / statistics.median(rates["before"])
        cpu_ratio = statistics.median(cpu_rates["after"]) / statistics.median(cpu_rates["before"])
        print(
            f"  after / before: {ratio:.2f}x chunks/s, {cpu_ratio:.2f}x per CPU-second ({load()})"
        )

    print("\nbatch size (this tree, in process, sizes taken in turn, 3 rounds):")
    sweep: dict[int, list[float]] = {b: [] for b in (8, 16, 32, 64, 128)}
    for _ in range(3):
        for batch, values in sweep.items():
            onnx.batch_size = batch
            start = time.perf_counter()
            onnx.embed_documents(texts)
            values.append(len(texts) / (time.perf_counter() - start))
    for batch, values in sweep.items():
        print(f"  batch {batch:<4} {spread(values)} chunks/s")
    onnx.batch_size = 32

    print("\nphysical bound (float32: the int8 weights are dequantised once, at session build)")
    per_chunk = statistics.mean(flops_per_chunk(n) for n in lengths)
    print(
        f"  FLOPs per chunk at its own length: mean {per_chunk / 1e9:.2f} GFLOP "
        f"({flops_per_chunk(mean_tokens) / 1e9:.2f} at the mean {mean_tokens:.0f} tokens)"
    )
    peak, how = cpu_peak(available_cpus())
    measured = sgemm_rate()
    best_rate = statistics.median(rates[list(trees)[-1]])
    print(
        f"  measured numpy sgemm: {measured:.0f} GFLOP/s -> bound {measured * 1e9 / per_chunk:.0f}"
        " chunks/s"
    )
    if peak is not None:
        print(
            f"  theoretical peak: {peak:.0f} GFLOP/s ({how}) -> bound "
            f"{peak * 1e9 / per_chunk:.0f} chunks/s"
        )
    print(
        f"  achieved: {best_rate:.1f} chunks/s = {best_rate * per_chunk / 1e9:.0f} GFLOP/s "
        f"useful ({load()})"
    )

    if not args.skip_command:
        print(
            f"\nwhole command: hybrid `kb search` with the local model, {args.command_runs} runs "
            f"each, over examples/docs; {load()}"
        )
        bench_command(args, trees)
        print(f"  embedder start-up in a fresh process (median of 5, {list(trees)[-1]}):")
        marks: dict[str, list[float]] = {}
        for _ in range(5):
            for key, value in run_worker(src, "--startup").items():
                marks.setdefault(key, []).append(value * 1000)
        for key, values in marks.items():
            print(f"    {key:<38} {statistics.median(values):6.1f} ms")

    q, near, far = np.array(
        onnx.embed_documents(
            [
                "how do I reset my password",
                "steps to recover a forgotten password",
                "weather forecast for tomorrow",
            ]
        )
    )
    print(f"\n{'cos(query, near) / cos(query, far)':<34} {q @ near:.3f} / {q @ far:.3f}")

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
        st.batch_size = batch
        st.embed_documents(texts[:batch])
        start = time.perf_counter()
        st.embed_documents(texts)
        rate = len(texts) / (time.perf_counter() - start)
        print(f"{f'st chunks/s, batch {batch}':<34} {rate:.1f}")

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

"""Chunks per second of each local embedder on typical pages: the tldr pages as ``kb ingest``
cuts them (kbcli's structure chunker, 500 characters), English for every model and Chinese
(``pages.zh``) for e5.

    python benchmarks/bench_embedders_pages.py [--rounds 3] [--chunks 256] [--e5-chunks 48]

Each round embeds the same random sample of chunks with every embedder in turn, in one process,
the way ``kb ingest`` fills vectors (``embed_documents`` of the batch); each model is loaded and
run once before timing. Printed per embedder: chunks per second of wall time, per CPU-second
(user + system time of every thread: steadier on a shared machine) and for MiniLM tokens per
CPU-second, with the load average beside each round, and what that makes of the whole tldr
collection at that rate. Needs ``kbcli[local]`` and ``kbcli[multilingual]``;
the tldr tarball (``benchmarks/corpora/build_tldr.py`` finds it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpora"))


def page_chunks(folder: str) -> list[str]:
    """Every chunk of the tldr pages under ``folder`` (``pages`` or ``pages.zh``)."""
    from build_tldr import default_tarball, read_pages

    from kbcli.config.lookup import Config
    from kbcli.ingest.pipeline import IngestPipeline
    from kbcli.types import Section

    pipe = IngestPipeline(config=Config())
    chunks = []
    for markdown in read_pages(default_tarball(), folder).values():
        chunks += [c.text for c in pipe.chunk_sections([Section(markdown, {})])]
    return chunks


def embedders() -> dict[str, Any]:
    from kbcli.embedders.e5 import E5Embedder
    from kbcli.embedders.local import LocalEmbedder
    from kbcli.embedders.static import StaticEmbedder

    return {
        "local (MiniLM, 128 tokens)": LocalEmbedder(max_tokens=128),
        "local (MiniLM, 256 tokens)": LocalEmbedder(max_tokens=256),
        "static": StaticEmbedder(),
        "e5": E5Embedder(),
    }


def timed(embedder: Any, texts: list[str]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    embedder.embed_documents(texts)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=256, help="per round, local and static")
    parser.add_argument("--e5-chunks", type=int, default=48, help="per round and language, e5")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rng = random.Random(41)
    every = page_chunks("pages")
    english = rng.sample(every, args.chunks)
    chinese = rng.sample(page_chunks("pages.zh"), args.e5_chunks)
    models = embedders()
    sets = {name: english for name in models}
    sets["e5"] = english[: args.e5_chunks]
    sets["e5 (Chinese pages)"] = chinese
    models["e5 (Chinese pages)"] = models["e5"]
    tokens = {  # the tokens each runs, after its own truncation
        name: sum(len(e.ids) for e in models[name]._runtime.tokenizer.encode_batch(sets[name]))
        for name in ("local (MiniLM, 128 tokens)", "local (MiniLM, 256 tokens)")
    }
    for name, model in models.items():  # load and warm up, untimed
        model.embed_documents(sets[name][:8])
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in models}
    for round_ in range(args.rounds):
        for name, model in models.items():
            wall, cpu = timed(model, sets[name])
            load = os.getloadavg()[0]
            rows[name].append((wall, cpu, load))
            print(f"round {round_ + 1} {name}: {len(sets[name]) / wall:.1f} chunks/s, "
                  f"{len(sets[name]) / cpu:.1f} per CPU-s, load {load:.1f}",
                  file=sys.stderr, flush=True)  # fmt: skip
    out = {}
    for name, runs in rows.items():
        n = len(sets[name])
        per_wall = statistics.median(n / w for w, _, _ in runs)
        per_cpu = statistics.median(n / c for _, c, _ in runs)
        figures = {
            "chunks": n,
            "chunks_per_s": round(per_wall, 1),
            "chunks_per_cpu_s": round(per_cpu, 1),
            "load": [round(x, 2) for _, _, x in runs],
            "tldr_minutes_at_this_rate": round(len(every) / per_wall / 60, 1),
        }
        if name in tokens:
            figures["tokens_per_cpu_s"] = round(
                statistics.median(tokens[name] / c for _, c, _ in runs)
            )
            figures["tokens_per_chunk"] = round(tokens[name] / n, 1)
        out[name] = figures
        print(f"{name:28} {figures['chunks_per_s']:7.1f} chunks/s  "
              f"{figures['chunks_per_cpu_s']:7.1f} per CPU-s  load {figures['load']}  "
              f"tldr ({len(every):,} chunks) in {figures['tldr_minutes_at_this_rate']} min"
              + (f"  {figures['tokens_per_cpu_s']:,} tokens per CPU-s"
                 if "tokens_per_cpu_s" in figures else ""))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

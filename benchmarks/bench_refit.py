"""The local embedder's thread count following the load, on a real busy machine.

Starts ``--hogs`` processes that each keep one CPU busy, waits ``--warm`` seconds for the load
average to see them, then embeds texts with ``LocalEmbedder()`` (no ``threads``: the count is
fitted at start and again every ``REFIT_SECONDS`` of a job, ``kbcli.embedders.local``). The hogs
stop ``--busy`` seconds into the job; it runs ``--seconds`` in all. Every ``--window`` seconds it
prints the ONNX thread count, the 1-minute load average and the chunks/s of that window, so the
switch (and what it gains) shows in one run. ``--fixed N`` runs the same with ``threads=N``
for comparison.

    PYTHONPATH=src python benchmarks/bench_refit.py [--seconds 300] [--busy 90] [--fixed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHUNK = (
    "To reset your password, open Settings, choose Account, then Security. Enter the code we "
    "sent to your phone. If the code does not arrive within five minutes, ask for a new one; "
    "after three failed attempts the account is locked for an hour. "
)


def texts(n: int) -> list[str]:
    """``n`` distinct chunks of ~400 characters (the cache is not involved: no store)."""
    return [f"{n_} {CHUNK}{CHUNK[: 40 + n_ % 120]}" for n_ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--busy", type=float, default=90.0, help="when the hogs stop (job seconds)")
    ap.add_argument("--warm", type=float, default=75.0, help="hog seconds before the job")
    ap.add_argument("--hogs", type=int, default=1)
    ap.add_argument("--window", type=float, default=15.0)
    ap.add_argument("--fixed", type=int, default=None, help="threads=N instead of fitting")
    args = ap.parse_args()
    from kbcli.embedders import local, local_runtime

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        time.sleep(args.warm)
        embedder = local.LocalEmbedder(threads=args.fixed)
        model = embedder._runtime
        batch = texts(64)
        start = time.monotonic()
        window_start, window_chunks, done = start, 0, 0
        refit = local_runtime.REFIT_SECONDS
        print(json.dumps({"cpus": os.cpu_count(), "hogs": args.hogs, "fixed": args.fixed,
                          "refit_s": refit, "load": os.getloadavg()[0]}))  # fmt: skip
        print("| job s | threads | load (1 min) | chunks/s in the window |")
        print("|---|---|---|---|")
        while (now := time.monotonic()) - start < args.seconds:
            if hogs and now - start >= args.busy:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
                hogs = []
                print(f"| {now - start:.0f} | hogs stopped | | |")
            embedder.embed_documents(batch)
            done += len(batch)
            window_chunks += len(batch)
            if (now := time.monotonic()) - window_start >= args.window:
                rate = window_chunks / (now - window_start)
                threads = getattr(model, "threads", "?")
                print(f"| {now - start:.0f} | {threads} | {os.getloadavg()[0]:.2f} |"
                      f" {rate:.1f} |", flush=True)  # fmt: skip
                window_start, window_chunks = now, 0
        spent = time.monotonic() - start
        print(json.dumps({"chunks": done, "seconds": round(spent, 1),
                          "mean_chunks_per_s": round(done / spent, 1)}))  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    main()

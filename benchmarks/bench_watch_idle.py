"""What an idle ``kb watch`` costs: CPU and memory over N seconds with no changes.

Builds a folder of ``--files`` notes in ``--folders`` sub-folders in a temporary directory,
starts ``kb watch`` on it (this checkout's ``src``), waits for its first index, then samples
``/proc/<pid>`` for ``--seconds`` (default 60) without touching the folder and prints:

- CPU: user + system time the process used over the idle period, as % of one CPU;
- RSS at the start of the idle period, at its end, the growth, and the peak of the samples;
- wakeups, as context switches per second (voluntary + involuntary).

Usage::

    python benchmarks/bench_watch_idle.py [--seconds 60] [--files 2000] [--folders 50] [--json]

Linux only (``/proc``). The goal (issue 28): under 1 % of a CPU, no growing memory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            out[key] = int(value.split()[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--folders", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "notes"
        for i in range(args.files):
            folder = root / f"f{i % args.folders:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"n{i}.md").write_text(f"# Note {i}\n\nidle benchmark words w{i}.\n")
        env = {**os.environ, "PYTHONPATH": SRC, "KB_DB": str(Path(tmp) / "kb.db")}
        for key in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "KB_CONFIG"):
            env.pop(key, None)
        err = open(Path(tmp) / "stderr", "w+")
        proc = subprocess.Popen(
            [sys.executable, "-m", "kbcli", "watch", str(root), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=tmp,
        )
        try:
            assert proc.stdout is not None
            first = json.loads(proc.stdout.readline())
            while "Watching" not in Path(err.name).read_text():
                if proc.poll() is not None:
                    sys.exit(f"kb watch exited {proc.returncode}: {Path(err.name).read_text()}")
                time.sleep(0.05)
            time.sleep(1.0)  # let the first index's last writes settle
            pid = proc.pid
            cpu0, st0, t0 = cpu_seconds(pid), status(pid), time.monotonic()
            peak = st0["VmRSS"]
            end = t0 + args.seconds
            while time.monotonic() < end:
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))
                peak = max(peak, status(pid)["VmRSS"])
            cpu1, st1, t1 = cpu_seconds(pid), status(pid), time.monotonic()
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        elapsed = t1 - t0
        switches = sum(st1[k] - st0[k] for k in st0 if k.endswith("ctxt_switches"))
        result = {
            "files": first["added"],
            "folders": args.folders,
            "seconds": round(elapsed, 1),
            "cpu_percent": round(100 * (cpu1 - cpu0) / elapsed, 3),
            "rss_start_mib": round(st0["VmRSS"] / 1024, 1),
            "rss_end_mib": round(st1["VmRSS"] / 1024, 1),
            "rss_growth_kib": st1["VmRSS"] - st0["VmRSS"],
            "rss_peak_mib": round(peak / 1024, 1),
            "wakeups_per_second": round(switches / elapsed, 1),
            "exit_code": code,
        }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"kb watch idle {result['seconds']} s over {result['files']} files in "
        f"{result['folders']} folders: CPU {result['cpu_percent']} % of one core, RSS "
        f"{result['rss_start_mib']} -> {result['rss_end_mib']} MiB (growth "
        f"{result['rss_growth_kib']} KiB, peak {result['rss_peak_mib']} MiB), "
        f"{result['wakeups_per_second']} wakeups/s, exit {result['exit_code']}"
    )


if __name__ == "__main__":
    main()

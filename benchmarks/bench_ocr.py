"""OCR accuracy and speed through ``kb ingest`` (issue 31).

Renders known English and Chinese text into images and image-only PDFs (DejaVu Sans; a CJK font
from the distribution, e.g. fonts-wqy-zenhei), plus an English page scanned crooked (1.5 degrees)
and blurred, ingests the folder with ``kb ingest --json`` in a subprocess, reads the recognised
text back with ``kb get --json`` and prints, per file, the character error rate against the
rendered text (whitespace collapsed; none counted next to CJK characters) and the seconds per
recognised page from ``slowest`` (``ocr_seconds_per_page``: render, recognise and the bounded
call; the first page also loads the models), with the load average.

Goals: CER <= 2 % English and <= 5 % Chinese on clean renders, <= 5 % English crooked+blurred.

    python benchmarks/bench_ocr.py [--dpi 150] [--pages 2] [--size-pt 12] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from scans import cer, cjk_font, image_pdf, render_page, scanned  # noqa: E402

ENGLISH = [
    [
        "Every pump leaves the factory with a printed test sheet. The",
        "sheet lists the flow rate, the pressure at the outlet and the",
        "serial number, such as KX-4471, stamped on the housing.",
        "",
        "Warranty claims go to the Zeppelin office in Friedrichshafen",
        "within two years of delivery. Keep the receipt and the test",
        "sheet together; without them a claim cannot be processed.",
        "",
        "Before the first start, fill the housing with clean water,",
        "open both valves and check that the shaft turns freely by hand.",
    ],
    [
        "Maintenance happens every spring. Replace the gasket when it",
        "leaks, tighten the four flange bolts crosswise and grease the",
        "bearing through the nipple on the left side of the motor.",
        "",
        "If the pump hums but does not turn, switch it off at once:",
        "the capacitor may be faulty, or a stone may block the impeller.",
        "Never run the pump dry for more than thirty seconds.",
    ],
]
CHINESE = [
    "每台水泵出厂时都附有一张测试单。",
    "测试单上列出流量、出口压力和序列号。",
    "保修申请须在交货后两年内寄往办公室。",
    "请将收据和测试单放在一起保存。",
    "首次启动前，请向泵壳内注满清水。",
    "每年春天进行保养，漏水时更换垫片。",
]
GOALS = {"en": 0.02, "zh": 0.05, "en-crooked": 0.05}


def make_folder(
    folder: Path, dpi: int, pages: int, size_pt: float = 12
) -> dict[str, tuple[str, str, int]]:
    """name -> (kind, reference text, pages)."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[str, str, int]] = {}
    english = [[f"Section {n + 1} of the manual.", "", *ENGLISH[n % 2]] for n in range(pages)]
    renders = [render_page(text, dpi=dpi, size_pt=size_pt) for text in english]
    (folder / "english.pdf").write_bytes(image_pdf(renders, dpi))
    out["english.pdf"] = ("en", " ".join(" ".join(t) for t in english), pages)
    renders[0].save(folder / "english.png")
    out["english.png"] = ("en", " ".join(english[0]), 1)
    crooked = render_page(english[0], dpi=dpi, size_pt=size_pt)
    crooked = scanned(crooked, angle=1.5, blur=dpi / 150)
    crooked.convert("RGB").save(folder / "crooked.jpg", quality=85)
    out["crooked.jpg"] = ("en-crooked", " ".join(english[0]), 1)
    font = cjk_font()
    if font is None:
        print("no CJK font (apt-get install fonts-wqy-zenhei): Chinese skipped", file=sys.stderr)
        return out
    chinese = render_page(CHINESE, font=font, dpi=dpi, size_pt=size_pt + 2)
    (folder / "chinese.pdf").write_bytes(image_pdf([chinese], dpi))
    out["chinese.pdf"] = ("zh", "".join(CHINESE), 1)
    chinese.save(folder / "chinese.png")
    out["chinese.png"] = ("zh", "".join(CHINESE), 1)
    return out


def kb(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KB_DB": str(home / "kb.db"), "KB_CONFIG": str(home / "jianmu.yaml")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args], capture_output=True, text=True, env=env
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dpi", type=int, default=150, help="resolution of the scans")
    parser.add_argument("--pages", type=int, default=2, help="pages of the English PDF")
    parser.add_argument("--size-pt", type=float, default=12, help="English text size")
    parser.add_argument("--keep", type=Path, help="write the scans and index here")
    args = parser.parse_args()
    home = args.keep or Path(tempfile.mkdtemp(prefix="bench-ocr-"))
    home.mkdir(parents=True, exist_ok=True)
    # one chunk per page, no overlap: the indexed text is the recognised text
    (home / "jianmu.yaml").write_text("limits:\n  chunk_size: 100000\n  chunk_overlap: 0\n")
    files = make_folder(home / "scans", args.dpi, args.pages, args.size_pt)
    load_before = os.getloadavg()
    began = time.monotonic()
    done = kb(home, "ingest", str(home / "scans"), "--ext", ".pdf,.png,.jpg", "--json")
    took = time.monotonic() - began
    if done.returncode != 0:
        sys.exit(f"kb ingest failed:\n{done.stderr}")
    report = json.loads(done.stdout)
    timing = {Path(s["path"]).name: s for s in report["slowest"]}
    load_after = os.getloadavg()
    print(f"kb ingest: {took:.1f} s for {sum(p for _, _, p in files.values())} pages")
    print(f"{'file':14} {'kind':11} {'pages':>5} {'CER':>7} {'goal':>6} {'s/page':>7}")
    failed = []
    for name, (kind, reference, pages) in files.items():
        shown = kb(home, "get", str(home / "scans" / name), "--json")
        text = " ".join(line["text"] for line in json.loads(shown.stdout)["lines"])
        rate = cer(reference, text)
        per_page = timing.get(name, {}).get("ocr_seconds_per_page", float("nan"))
        ok = rate <= GOALS[kind]
        if not ok:
            failed.append(name)
        flag = "" if ok else "  over the goal"
        print(f"{name:14} {kind:11} {pages:5} {rate:7.2%} {GOALS[kind]:6.0%} {per_page:7.2f}{flag}")
    print(
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        f"({os.cpu_count()} CPUs); {args.size_pt:g} pt text (Chinese +2) scanned at "
        f"{args.dpi} dpi; PDF pages rendered at ocr.dpi"
    )
    if failed:
        sys.exit(f"over the CER goal: {', '.join(failed)}")


if __name__ == "__main__":
    main()

"""How long ``kb ui``'s page takes to render what a document can hold, in headless Chromium:
its Markdown renderer on ordinary and on hostile paragraphs (runs of ``*a ``, ``_a ``,
backticks, ``[a](``: the patterns a backtracking inline parser takes quadratic time on), and
the document view's numbered lines.

    python benchmarks/bench_ui_page.py                  # 2,000 / 20,000 / 200,000 characters
    python benchmarks/bench_ui_page.py --sizes 1000000 --lines 20000

The page's own scripts (``kbcli/ui/assets/dom.js``, ``markdown.js``) and stylesheet are
loaded into a blank page of Debian's ``chromium`` through playwright (no server: nothing but
the rendering is timed); each case is rendered once (a first call, the cases in turns) after
one untimed warm-up. Prints milliseconds per case, the load average before and after, and
the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import SRC, load_average, machine_info  # noqa: E402

ASSETS = SRC / "kbcli" / "ui" / "assets"
PATTERNS = {
    "prose": "Some *emphasis*, a `code` span and a [link](https://example.com/x). ",
    "stars": "*a ",
    "underscores": "_a ",
    "backticks": "`a ",
    "brackets": "[a](",
    "mixed": "**a _b `c [d](",
}

TIME_RENDER = """([unit, size]) => {
    const line = unit.repeat(Math.max(1, Math.floor(size / unit.length)));
    const started = performance.now();
    window.kb.markdown.render([line], { link: (p) => p });
    return performance.now() - started;
}"""

TIME_LINES = """(count) => {
    const box = window.kb.el('div', 'lines');
    const started = performance.now();
    for (let n = 1; n <= count; n++) {
        box.append(window.kb.el('div', 'line', window.kb.el('span', 'ln', String(n)),
            window.kb.el('span', 'text', 'Line ' + n + ': routine log entry.')));
    }
    document.body.append(box);
    box.getBoundingClientRect();  // layout included
    const ms = performance.now() - started;
    box.remove();
    return ms;
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,200000", help="paragraph characters")
    parser.add_argument("--lines", type=int, default=20_000, help="document view lines")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs chromium: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    script = "\n".join(
        (ASSETS / name).read_text(encoding="utf-8") for name in ("dom.js", "markdown.js")
    )
    load_before = load_average()
    results: dict[str, dict[str, float]] = {name: {} for name in PATTERNS}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_content("<!doctype html><html><body></body></html>")
        page.add_script_tag(content=script)
        page.add_style_tag(content=(ASSETS / "style.css").read_text(encoding="utf-8"))
        page.evaluate(TIME_RENDER, ["*warm* up ", 1000])
        for size in sizes:
            for name, unit in PATTERNS.items():
                results[name][str(size)] = round(page.evaluate(TIME_RENDER, [unit, size]), 1)
        lines_ms = round(page.evaluate(TIME_LINES, args.lines), 1)
        browser.close()
    print("Markdown paragraph render, ms (one call each):")
    print(f"  {'pattern':<12}" + "".join(f"{size:>12,}" for size in sizes))
    for name, row in results.items():
        print(f"  {name:<12}" + "".join(f"{row[str(size)]:>12}" for size in sizes))
    print(f"document view, {args.lines:,} numbered lines with layout: {lines_ms} ms")
    print(f"load average before {load_before}, after {load_average()}")
    print(json.dumps({"machine": machine_info()}))


if __name__ == "__main__":
    main()

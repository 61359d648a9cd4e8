"""What the page tests share: a small real corpus (Markdown, a long text file, a hostile file,
a folder a scoped token must not see), ``kb ui`` started as a real subprocess, headless
Chromium through playwright, and screenshots kept where people can look at them."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import minimal_pdf
from hostile import make_docx
from mcp_clients import _env
from webdriver import REQUIRE_CHROMIUM_ENV, find

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "ui-screenshots"  # gitignored: a copy of each run's screenshots
PHONE, DESKTOP = 390, 1280
CANARY = "quokkasecret"  # the one word only the folder outside the scoped token's scope holds

# The line of notes/sync.txt a search for SYNC_QUERY must open at (far down: it has to scroll).
SYNC_LINE = 61
SYNC_QUERY = "flamingo reconnect"
PDF_TEXT = "Reset the heron router password from the admin page."
DOCX_BLOCKS = [
    ("h1", "Install"), ("p", "Download the installer and run it once."),
    ("h1", "Usage"), ("p", "Run the ibis command to start the service."),
]  # fmt: skip

HOSTILE = """# Payloads

<script>window.__pwned = 'script'</script>

An image: <img src=x onerror="window.__pwned = 'img'"> and
<svg onload="window.__pwned='svg'"></svg>.

[click me](javascript:window.__pwned='link') and [tabbed](java\tscript:window.__pwned='tab')
and [data](data:text/html,<script>window.__pwned='data'</script>) and
<javascript:window.__pwned='auto'> and [fine](https://example.com/ok) and
[sibling](guide/baking.md).

<div onclick="window.__pwned='div'"><iframe src="javascript:window.__pwned='iframe'"></iframe></div>

```html
<script>window.__pwned = 'code'</script>
```

Search word: pelicanpayload.
"""


def write_corpus(root: Path) -> Path:
    """docs/ with guide/ (Markdown, a DOCX), notes/ (plain text, a PDF), hostile.md, secret/."""
    docs = root / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "notes").mkdir()
    (docs / "secret").mkdir()
    (docs / "guide" / "baking.md").write_text(
        "# Baking bread\n\nA short guide to **sourdough** at home.\n\n## Starter\n\n"
        "Feed the sourdough starter 🍞🍞 twice a day (the 🍞 sourdough starter likes warmth).\n\n"
        "- rye flour works well\n- wheat flour is fine\n  - whole wheat is better\n\n"
        "## Baking\n\nBake at 250 degrees for forty minutes with steam for a crisp crust.\n",
        encoding="utf-8",
    )
    (docs / "guide" / "garden.md").write_text(
        "# Garden\n\nWater the tomatoes every morning and keep the basil out of the sun.\n"
        "Tomatoes like a warm wall and a deep pot.\n",
        encoding="utf-8",
    )
    lines = [f"Line {n}: routine log entry about nothing in particular." for n in range(1, 91)]
    lines[SYNC_LINE - 1] = "When the flamingo client cannot reconnect, restart the sync daemon."
    (docs / "notes" / "sync.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (docs / "notes" / "tomatoes.txt").write_text(
        "Notes on tomatoes: the cherry tomatoes ripened first this year.\n", encoding="utf-8"
    )
    (docs / "hostile.md").write_text(HOSTILE, encoding="utf-8")
    (docs / "notes" / "manual.pdf").write_bytes(minimal_pdf(PDF_TEXT))
    make_docx(docs / "guide" / "install.docx", DOCX_BLOCKS)
    (docs / "secret" / "plans.md").write_text(
        f"# Plans\n\nThe {CANARY} launch is in May; tomatoes are the code word.\n",
        encoding="utf-8",
    )
    return docs


def build_index(root: Path) -> tuple[Path, Path, Path]:
    """The corpus indexed by ``kb ingest`` (a real process, the built-in embedder):
    ``(docs, db, home)``."""
    home = root / "home"
    home.mkdir()
    docs = write_corpus(root)
    db = root / "kb.db"
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "--db", str(db), "ingest", str(docs), "-q"],
        env=_env(home), cwd=str(root), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return docs, db, home


class UiServer:
    """``kb --db DB ui ARGS`` as a subprocess: ``url`` is the address it printed."""

    def __init__(self, db: Path, home: Path, *args: str, env: dict[str, str] | None = None):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kbcli", "--db", str(db), "ui", *args],
            env={**_env(home), **(env or {})}, cwd=str(db.parent),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.url = self._address()
        found = re.match(r"http://([^/]+)/", self.url)
        assert found, self.url
        self.host = found.group(1)
        self.port = int(self.host.rsplit(":", 1)[1])
        token = re.search(r"[?&]token=([^&]+)", self.url)
        self.token = token.group(1) if token else ""
        self.base = f"http://{self.host}/"

    def _address(self) -> str:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.process.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(timeout=60)
        line = box[0] if box else ""
        found = re.search(r"kb ui: (http://\S+)", line)
        if not found:
            self.stop()
            pytest.fail(f"kb ui did not print its address: {line!r} {self.stderr!r}")
        return found.group(1)

    def page(self, token: str | None = None, **params: str) -> str:
        """The page's URL with ``token`` (the printed one by default) and ``params``."""
        from urllib.parse import urlencode

        query = {"token": self.token if token is None else token, **params}
        return self.base + "?" + urlencode({k: v for k, v in query.items() if v})

    stderr = ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr = self.process.stderr.read() if self.process.stderr else ""


@contextlib.contextmanager
def ui_server(db: Path, home: Path, *args: str, **kwargs: Any) -> Iterator[UiServer]:
    server = UiServer(db, home, *args, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def chromium() -> str:
    """Debian's chromium for playwright; skip naming what is missing (fail under
    KB_REQUIRE_CHROMIUM, as CI sets)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if os.environ.get(REQUIRE_CHROMIUM_ENV):
            pytest.fail("playwright is required here: pip install 'kbcli[test]'")
        pytest.skip("needs playwright: pip install 'kbcli[test]'")
    return find("chromium", "chromium-browser")


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """One headless Chromium for a module's tests (each test opens its own page)."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page with every console message, page error and dialog recorded (a payload that ran
    would show up in one of them, or in ``window.__pwned``)."""

    def __init__(self, browser: Any, width: int, height: int = 900, dark: bool = False):
        self.context = browser.new_context(
            viewport={"width": width, "height": height},
            color_scheme="dark" if dark else "light",
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.console: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def close(self) -> None:
        self.context.close()


def screenshot(page: Any, folder: Path, name: str) -> Path:
    """The page's screenshot in the test run's folder, copied to build/ui-screenshots/."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, SHOTS / path.name)
    return path


def layout_facts(page: Any) -> dict[str, Any]:
    """What a phone-width check needs: the page's scroll width against the window's."""
    facts: dict[str, Any] = page.evaluate(
        """() => ({
            scrollWidth: document.scrollingElement.scrollWidth,
            innerWidth: window.innerWidth,
            overflowing: Array.from(document.querySelectorAll('body *'))
                .filter(n => n.getBoundingClientRect().right > window.innerWidth + 1
                          && getComputedStyle(n).position !== 'fixed'
                          && n.offsetParent !== null
                          && !n.closest('pre'))
                .slice(0, 5).map(n => n.tagName + '.' + n.className),
        })"""
    )
    return facts


def in_viewport(page: Any, selector: str) -> bool:
    """Whether the first element matching ``selector`` is shown inside the window."""
    return bool(
        page.evaluate(
            """(sel) => { const n = document.querySelector(sel); if (!n) return false;
                const r = n.getBoundingClientRect();
                return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight
                    && getComputedStyle(n).visibility !== 'hidden'; }""",
            selector,
        )
    )


def wait_until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)

"""A page opened in headless Chromium through chromedriver (the W3C WebDriver protocol over
HTTP, no client library): the tests read the rendered DOM (text, boxes, computed styles) and
take a screenshot. Debian's ``chromium`` and ``chromium-driver`` packages provide both."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

# CI installs Debian's chromium and chromium-driver (.ci/run) and sets this, so a missing
# browser fails there instead of skipping.
REQUIRE_CHROMIUM_ENV = "KB_REQUIRE_CHROMIUM"


def find(*names: str) -> str:
    """The first of ``names`` on PATH; or skip (fail under KB_REQUIRE_CHROMIUM)."""
    for name in names:
        found = shutil.which(name)
        if found is not None:
            return found
    if os.environ.get(REQUIRE_CHROMIUM_ENV):
        pytest.fail(f"{names[0]} is required here: apt-get install -y chromium chromium-driver")
    pytest.skip(f"needs {names[0]}: apt-get install -y chromium chromium-driver (CI has it)")


class Browser:
    """One headless Chromium session; ``with Browser(tmp) as b: b.open(url); b.run(js)``."""

    def __init__(self, home: Path, width: int = 1200, height: int = 1400):
        self.chromium = find("chromium", "chromium-browser")
        self.driver = find("chromedriver")
        self.home, self.size = home, (width, height)
        self.process: subprocess.Popen[bytes] | None = None
        self.session = ""
        self.base = ""

    def __enter__(self) -> Browser:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [self.driver, f"--port={port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(self.home)},
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("chromedriver did not start")
            time.sleep(0.1)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={self.size[0]},{self.size[1]}",
                f"--user-data-dir={self.home / 'chromium-profile'}"]  # fmt: skip
        options = {"binary": self.chromium, "args": args}
        caps = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
        self.session = self._call("POST", "/session", {"capabilities": caps})["sessionId"]
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.session:
                self._call("DELETE", f"/session/{self.session}")
        finally:
            if self.process is not None:
                self.process.terminate()
                self.process.wait(timeout=30)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path, data=data, method=method,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())["value"]

    def open(self, url: str) -> None:
        self._call("POST", f"/session/{self.session}/url", {"url": url})

    def run(self, script: str) -> Any:
        """The value the JavaScript function body ``script`` returns, in the page."""
        return self._call(
            "POST", f"/session/{self.session}/execute/sync", {"script": script, "args": []}
        )

    def screenshot(self, path: Path) -> Path:
        shot = self._call("GET", f"/session/{self.session}/screenshot")
        path.write_bytes(base64.b64decode(shot))
        return path

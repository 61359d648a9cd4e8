"""A real ``kb ui`` server for the tests: ``python -m kbcli ui`` in a subprocess, its printed
address read from stdout, stopped with SIGTERM (tests/ui/, tests/e2e/)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

URL_LINE = re.compile(r"^kb ui: (http://\S+)$")


@dataclass
class UIServer:
    """A running ``kb ui``: its printed ``url``, the ``base`` (scheme, host and port), its
    ``token`` (None with --tokens) and the process (``stderr`` is read after it stops)."""

    url: str
    base: str
    token: str | None
    process: subprocess.Popen[str]
    stderr: str = ""


@contextlib.contextmanager
def ui_server(
    *args: str,
    db: str | Path | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Iterator[UIServer]:
    """``kb [--db DB] ui ARGS...`` until the block ends; fails when no address is printed in
    ``timeout`` seconds (the process's stderr in the message)."""
    command = [sys.executable, "-m", "kbcli"]
    if db is not None:
        command += ["--db", str(db)]
    process = subprocess.Popen(
        [*command, "ui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    server = None
    try:
        deadline = time.monotonic() + timeout
        line = ""
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if line or process.poll() is not None:
                break
        found = URL_LINE.match(line.strip())
        if found is None:
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"kb ui printed no address: {line!r}; stderr: {err}")
        url = found.group(1)
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query).get("token", [None])[0]
        server = UIServer(url, f"{parts.scheme}://{parts.netloc}", token, process)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        if server is not None:
            server.stderr = err

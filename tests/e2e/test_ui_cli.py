"""``kb ui`` as a user runs it: the real command in a subprocess (tests/ui_server.py), its
printed address read and fetched with urllib; the usage errors as one line and an exit code."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from extras import need

need("starlette")
need("uvicorn")

from cli_helpers import run  # noqa: E402
from ui_server import ui_server  # noqa: E402


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    """``(status, headers, body)`` of a GET, an error status included (urllib would follow a
    redirect: none may happen); the headers are read case-insensitively."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.fixture
def indexed(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "password.md").write_text(
        "# Passwords\n\nTo reset your password open Settings and click Reset.\n", encoding="utf-8"
    )
    (docs / "garden.txt").write_text("Water the tomatoes every morning.\n", encoding="utf-8")
    assert run("ingest", str(docs)).exit_code == 0
    return docs.resolve()


def test_kb_ui_prints_its_address_and_serves_the_page_and_the_api(indexed):
    with ui_server("--debug") as server:  # its most talkative logging
        assert server.url.startswith("http://127.0.0.1:") and server.token
        assert len(server.token) >= 32
        status, headers, body = fetch(server.url)
        assert status == 200 and b"<!doctype html>" in body.lower()
        assert headers["Content-Security-Policy"].startswith("default-src 'none'")
        bearer = {"Authorization": f"Bearer {server.token}"}
        status, headers, body = fetch(f"{server.base}/api/search?q=reset+password", bearer)
        assert status == 200
        first = json.loads(body)["hits"][0]
        assert first["path"] == str(indexed / "password.md")
        assert first["location"] == f"{indexed / 'password.md'}:3"
        status, _, body = fetch(f"{server.base}/api/status", bearer)
        assert status == 200 and json.loads(body)["chunks"] == 2
        status, headers, body = fetch(f"{server.base}/api/search?q=reset")
        assert status == 401 and "Location" not in headers
        assert json.loads(body) == {"error": "a token is needed: open the address kb ui printed"}
        status, _, _ = fetch(f"{server.base}/?token=wrong-{server.token}")
        assert status == 403
        port = server.base.rsplit(":", 1)[1]
        status, _, _ = fetch(server.url, {"Host": f"attacker.example:{port}"})
        assert status == 421
        status, _, _ = fetch(f"{server.base}/api/status", {**bearer, "Origin": "http://evil.example"})
        assert status == 403
        status, _, _ = fetch(server.url.replace("127.0.0.1", "localhost"))
        assert status == 200  # the loopback names of the same port
        with socket.create_connection(("127.0.0.1", int(port))) as garbage:
            garbage.sendall(f"NOT HTTP /?token={server.token}\r\n\r\n".encode())
            garbage.recv(1024)
    assert server.process.returncode is not None
    assert server.token not in server.stderr  # never logged, whatever was asked
    assert "Traceback" not in server.stderr


def test_with_a_token_file_the_address_has_no_token_and_scopes_hold(indexed, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        "  - {token: garden-only-token-0123456789, name: gardener, "
        f"filter: {{source: '{indexed / 'garden.txt'}'}}}}\n",
        encoding="utf-8",
    )
    with ui_server("--tokens", str(tokens)) as server:
        assert server.token is None and "token" not in server.url
        status, _, _ = fetch(server.url)
        assert status == 401
        status, _, body = fetch(
            f"{server.base}/api/search?q=password+tomatoes&token=garden-only-token-0123456789"
        )
        assert status == 200
        assert [hit["path"] for hit in json.loads(body)["hits"]] == [str(indexed / "garden.txt")]
    assert "garden-only-token" not in server.stderr


def test_open_hands_the_address_to_the_browser(indexed, tmp_path):
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n', encoding="utf-8")
    browser.chmod(0o755)
    with ui_server("--open", env={"BROWSER": str(browser), "DISPLAY": ""}) as server:
        for _ in range(100):
            if opened.exists() and opened.read_text().strip():
                break
            import time

            time.sleep(0.1)
        assert opened.read_text().strip() == server.url


def test_open_without_a_browser_still_serves(indexed):
    with ui_server("--open", env={"BROWSER": "/nonexistent/browser", "DISPLAY": ""}) as server:
        assert fetch(server.url)[0] == 200


def test_an_address_beyond_loopback_needs_tokens(indexed):
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "ui", "--http", "0.0.0.0:8766"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "Error: kb ui --http 0.0.0.0:8766: an address beyond this machine needs --tokens FILE "
        "(each person their own token), or use 127.0.0.1"
    ]
    assert done.stdout == ""


def test_a_port_in_use_is_one_line_and_exit_4(indexed):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "kbcli", "ui", "--http", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 4
    assert done.stderr.startswith(f"Error: kb ui cannot listen on 127.0.0.1:{port}: the port ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_without_the_ui_extra_kb_ui_names_it(tmp_path):
    code = (
        "import sys; sys.modules['starlette'] = None; "
        "from kbcli.cli import main; sys.argv = ['kb', 'ui']; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "Error: kb ui needs the 'starlette' package: pip install 'kbcli[ui]'"
    )


def test_no_index_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "--db", str(tmp_path / "none.db"), "ui"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not Path(tmp_path / "none.db").exists()


@pytest.mark.slow
def test_a_silent_connection_is_closed_by_the_limits_kb_mcp_has(indexed):
    with ui_server() as server:
        port = int(server.base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as silent:
            silent.settimeout(30)
            assert silent.recv(1) == b""  # closed after the 10 s request deadline
        assert fetch(server.url)[0] == 200
    assert "kb ui: closed HTTP connections: 1 sent no whole request in time" in server.stderr


def test_concurrent_searches_share_the_index_safely(indexed):
    """The knowledge base is opened once and searched from the server's worker threads: many
    requests at once give the answers one at a time gives."""
    from concurrent.futures import ThreadPoolExecutor

    queries = ["reset password", "tomatoes morning", "settings", "water", "click reset"] * 6
    with ui_server() as server:
        bearer = {"Authorization": f"Bearer {server.token}"}

        def ask(query: str) -> tuple[int, list[str]]:
            url = f"{server.base}/api/search?" + urllib.parse.urlencode({"q": query})
            status, _, body = fetch(url, bearer)
            return status, [hit["location"] for hit in json.loads(body)["hits"]]

        alone = {query: ask(query) for query in set(queries)}
        with ThreadPoolExecutor(max_workers=12) as pool:
            together = list(pool.map(ask, queries))
    assert together == [alone[query] for query in queries]
    assert all(status == 200 for status, _ in together)


def test_ctrl_c_stops_it_quietly(indexed):
    import signal

    with ui_server() as server:
        assert fetch(server.url)[0] == 200
        server.process.send_signal(signal.SIGINT)
        server.process.wait(timeout=20)
    assert server.process.returncode == 130
    assert server.stderr == ""

"""``kb ui``'s server in process (Starlette's TestClient over the real app, a real SQLite
index made by ``kb ingest``): the token, Host and Origin checks, the headers, the API's
answers and scopes, and that nothing writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from extras import need

need("starlette")
need("httpx")

from cli_helpers import run  # noqa: E402
from kbcli import KnowledgeBase  # noqa: E402
from kbcli.serve.tokens import Identity  # noqa: E402
from kbcli.ui.server import CSP, UI, Settings  # noqa: E402

TOKEN = "a-token-for-the-tests-0123456789"
HOST = "testserver"  # TestClient's Host header


def corpus(root: Path) -> Path:
    """Two teams' folders: team_a holds the password page, team_b the invoices."""
    (root / "team_a").mkdir(parents=True)
    (root / "team_b").mkdir(parents=True)
    (root / "team_a" / "password.md").write_text(
        "# Passwords\n\nWelcome.\n\nTo reset your password open Settings and click Reset.\n"
        "A reset link is sent by e-mail.\n",
        encoding="utf-8",
    )
    (root / "team_a" / "garden.txt").write_text(
        "Water the tomatoes every morning.\n", encoding="utf-8"
    )
    (root / "team_b" / "invoices.md").write_text(
        "# Invoices\n\nInvoices are due within thirty days.\nLate invoices pay a fee.\n",
        encoding="utf-8",
    )
    return root


@pytest.fixture
def index(tmp_path):
    """A real index of :func:`corpus` at $KB_DB, opened as kb ui opens it."""
    root = corpus(tmp_path / "docs")
    result = run("ingest", str(root))
    assert result.exit_code == 0, result.stderr
    kb = KnowledgeBase.from_config(None, db=os.environ["KB_DB"], create=False)
    yield kb, root.resolve()
    kb.close()


def client_for(kb, tokens=None):
    from starlette.testclient import TestClient

    ui = UI(kb)
    settings = Settings(frozenset({HOST}), tokens or {TOKEN: Identity("ui", None)})
    return TestClient(ui.app(settings), follow_redirects=False)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_no_token_is_401_a_wrong_one_403_never_a_redirect(index):
    client = client_for(index[0])
    for path in ("/", "/assets/app.js", "/api/search?q=password"):
        missing = client.get(path)
        assert missing.status_code == 401, path
        wrong = client.get(path, headers=auth("not-the-token-0123456789"))
        assert wrong.status_code == 403, path
        assert "location" not in missing.headers and "location" not in wrong.headers
    assert client.get("/api/search?q=password").json() == {
        "error": "a token is needed: open the address kb ui printed"
    }
    assert client.get(f"/?token={TOKEN}x").status_code == 403


def test_the_token_in_the_url_or_the_header_opens_every_route(index):
    client = client_for(index[0])
    page = client.get(f"/?token={TOKEN}")
    assert page.status_code == 200
    assert f"/assets/app.js?token={TOKEN}" in page.text  # the assets' URLs carry it
    assert client.get(f"/assets/app.js?token={TOKEN}").status_code == 200
    assert client.get("/assets/style.css", headers=auth()).headers["content-type"].startswith(
        "text/css"
    )
    assert client.get("/api/search?q=password", headers=auth()).status_code == 200


def test_every_answer_carries_the_security_headers(index):
    client = client_for(index[0])
    for response in (
        client.get("/", headers=auth()),
        client.get("/api/search?q=password", headers=auth()),
        client.get("/api/search?q=password"),  # refused ones too
    ):
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["cache-control"] == "no-store"


def test_the_search_api_finds_the_right_file_first(index):
    kb, root = index
    client = client_for(kb)
    answer = client.get("/api/search?q=reset+password&mode=keyword", headers=auth())
    assert answer.status_code == 200
    data = answer.json()
    assert data["query"] == "reset password" and data["mode"] == "keyword"
    first = data["hits"][0]
    assert first["path"] == str(root / "team_a" / "password.md")
    assert first["location"] == f"{root / 'team_a' / 'password.md'}:5"
    assert first["line"] == 5 and first["rank"] == 1
    marked = {first["snippet"][start:end].lower() for start, end in first["highlights"]}
    assert marked == {"reset", "password"}
    assert answer.headers["server-timing"].startswith("app;dur=")
    assert data["took_ms"] >= 0

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
HOST = "testserver:80"  # TestClient's Host header (testserver), with the port it leaves out


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


def test_a_foreign_host_gets_421_and_a_foreign_origin_403(index):
    client = client_for(index[0])
    rebound = client.get("/api/search?q=password", headers={**auth(), "Host": "evil.example"})
    assert rebound.status_code == 421
    assert client.get(f"/?token={TOKEN}", headers={"Host": "evil.example:80"}).status_code == 421
    foreign = client.get("/api/search?q=password", headers={**auth(), "Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert foreign.json() == {"error": "requests from another site are refused"}
    for own in ("http://testserver:80", "http://testserver"):
        answer = client.get("/api/search?q=password", headers={**auth(), "Origin": own})
        assert answer.status_code == 200, own
    for other in ("https://testserver", "http://testserver:81", "null", "http://testserver.evil"):
        answer = client.get("/api/search?q=password", headers={**auth(), "Origin": other})
        assert answer.status_code == 403, other


def test_the_loopback_names_of_the_bound_port_are_the_only_hosts():
    from kbcli.ui.server import host_names

    assert host_names("127.0.0.1", 8766) == {
        "127.0.0.1:8766", "localhost:8766", "[::1]:8766"
    }
    assert host_names("kb.example.org", 80) == {"kb.example.org:80"}
    assert host_names("::1", 9) == {"[::1]:9", "127.0.0.1:9", "localhost:9"}


def test_bad_searches_answer_400_with_the_line_kb_search_prints(index):
    client = client_for(index[0])
    cases = {
        "/api/search?q=": "The query is empty: give the words to look for, as in kb search "
        "'reset password'",
        "/api/search?q=x&mode=fuzzy": "Unknown mode 'fuzzy': choose keyword, semantic or hybrid",
        "/api/search?q=x&k=0": "k must be a whole number from 1 to 100, got '0'",
        "/api/search?q=x&k=101": "k must be a whole number from 1 to 100, got '101'",
        "/api/search?q=" + "a" * 1001: "The query is longer than 1,000 characters",
    }
    for url, error in cases.items():
        answer = client.get(url, headers=auth())
        assert answer.status_code == 400, url
        assert answer.json() == {"error": error}
    bad_filter = client.get("/api/search?q=x&filter=year>>2", headers=auth())
    assert bad_filter.status_code == 400
    cli = run("search", "x", "--filter", "year>>2")
    assert cli.exit_code == 2
    assert bad_filter.json()["error"] in cli.stderr.replace("\n", " ")


def test_folder_and_filter_narrow_the_search(index):
    kb, root = index
    client = client_for(kb)
    everywhere = client.get("/api/search?q=invoices+password&mode=keyword", headers=auth()).json()
    assert {Path(hit["path"]).parent.name for hit in everywhere["hits"]} == {"team_a", "team_b"}
    folder = str(root / "team_b")
    narrowed = client.get(
        "/api/search", params={"q": "invoices password", "mode": "keyword", "folder": folder},
        headers=auth(),
    ).json()
    assert [Path(hit["path"]).name for hit in narrowed["hits"]] == ["invoices.md"]
    explained = client.get("/api/search?q=invoices&explain=1", headers=auth()).json()
    assert explained["hits"][0]["explain"]


def test_the_document_api_gives_the_lines_and_the_hit(index):
    kb, root = index
    client = client_for(kb)
    path = str(root / "team_a" / "password.md")
    answer = client.get("/api/document", params={"path": path, "line": 5}, headers=auth())
    assert answer.status_code == 200
    data = answer.json()
    assert data["path"] == path and data["kind"] == "markdown"
    assert data["lines"][0] == "# Passwords"
    assert data["lines"][4] == "To reset your password open Settings and click Reset."
    start, stop = data["hit_lines"]
    assert start <= 5 <= stop
    assert data["editor"] == f"{path}:5"
    assert data["kb_get"] == f"kb get {path}:5"
    text = client.get(
        "/api/document", params={"path": str(root / "team_a" / "garden.txt")}, headers=auth()
    ).json()
    assert text["kind"] == "text" and text["lines"] == ["Water the tomatoes every morning."]


def test_unknown_and_out_of_scope_documents_are_the_same_404(index, tmp_path):
    kb, root = index
    tokens = token_file(tmp_path, root)
    client = client_for(kb, tokens)
    hidden = str(root / "team_b" / "invoices.md")
    unknown = str(root / "team_b" / "nothing.md")
    seen = client.get("/api/document", params={"path": hidden}, headers=auth(SCOPED))
    missing = client.get("/api/document", params={"path": unknown}, headers=auth(SCOPED))
    assert seen.status_code == missing.status_code == 404
    assert seen.json()["error"] == missing.json()["error"].replace(unknown, hidden)
    assert client.get("/api/document", params={"path": hidden}, headers=auth()).status_code == 200
    # the end of a path is matched inside the scope only
    assert client.get(
        "/api/document", params={"path": "invoices.md"}, headers=auth(SCOPED)
    ).status_code == 404


SCOPED = "a-scoped-token-for-team-a-0123456789"


def token_file(tmp_path: Path, root: Path):
    from kbcli.serve.tokens import load_tokens

    file = tmp_path / "tokens.yaml"
    file.write_text(
        "tokens:\n"
        f"  - {{token: {TOKEN}, name: all, filter: {{}}}}\n"
        f"  - token: {SCOPED}\n"
        "    name: team-a\n"
        f"    filter: {{source: {{$prefix: '{root / 'team_a'}/'}}}}\n",
        encoding="utf-8",
    )
    return load_tokens(file)


def test_a_scoped_token_sees_only_its_scope(index, tmp_path):
    kb, root = index
    client = client_for(kb, token_file(tmp_path, root))
    found = client.get("/api/search?q=invoices+due&mode=keyword", headers=auth(SCOPED)).json()
    assert all("/team_a/" in hit["path"] for hit in found["hits"])
    assert "team_b" not in json_text(found)
    whole = client.get("/api/search?q=invoices+due&mode=keyword", headers=auth()).json()
    assert whole["hits"][0]["path"].endswith("team_b/invoices.md")
    scoped = client.get("/api/status", headers=auth(SCOPED)).json()
    assert scoped["scoped"] is True and scoped["chunks"] == 2 and scoped["sources"] == 2
    assert "vocabulary" not in scoped and "path" not in scoped  # index-wide figures
    everything = client.get("/api/status", headers=auth()).json()
    assert everything["scoped"] is False and everything["chunks"] == 3
    assert everything["files"] == 3 and everything["vectors_pending"] == 0
    assert everything["store"] == "sqlite"
    # a filter in the request only narrows the token's scope
    widened = client.get(
        "/api/search", params={"q": "invoices", "filter": f"source={root}/team_b/invoices.md"},
        headers=auth(SCOPED),
    ).json()
    assert widened["hits"] == []


def json_text(data) -> str:
    import json

    return json.dumps(data)


def test_ask_without_a_chat_model_is_409(index):
    client = client_for(index[0])
    answer = client.post("/api/ask", json={"question": "how do I reset my password?"},
                         headers=auth())
    assert answer.status_code == 409
    assert answer.json()["error"].startswith("no chat model configured: ")


def test_ask_answers_with_citations_from_the_fake_chat_server(index, tmp_path):
    from fake_chat import FakeChatServer
    from kbcli.config.lookup import AnswerConfig, Config, RAGConfig

    _, root = index
    with FakeChatServer() as chat:
        config = Config(rag=RAGConfig(answer=AnswerConfig(base_url=chat.url + "/v1")))
        kb = KnowledgeBase.from_config(config, db=os.environ["KB_DB"], create=False)
        try:
            client = client_for(kb, token_file(tmp_path, root))
            answer = client.post(
                "/api/ask", json={"question": "how do I reset my password?"}, headers=auth()
            )
            assert answer.status_code == 200, answer.text
            data = answer.json()
            assert data["refused"] is False and "[1]" in data["answer"]
            assert data["citations"][0]["n"] == 1
            assert data["citations"][0]["path"] == str(root / "team_a" / "password.md")
            # the scoped token's question reads its scope only
            made = len(chat.requests)
            scoped = client.post(
                "/api/ask", json={"question": "when are invoices due?"}, headers=auth(SCOPED)
            ).json()
            assert all("/team_a/" in c["path"] for c in scoped["citations"])
            assert "thirty days" not in json_text([r[2] for r in chat.requests[made:]])
            refused = client.post(
                "/api/ask", json={"question": "zzyzx qwxv?", "mode": "keyword"}, headers=auth()
            ).json()
            assert refused["refused"] is True and refused["answer"] is None
        finally:
            kb.close()


def test_ask_needs_the_header_token_and_a_small_json_body(index):
    client = client_for(index[0])
    question = {"question": "reset?"}
    assert client.post(f"/api/ask?token={TOKEN}", json=question).status_code == 403
    big = client.post("/api/ask", content=b"{" + b" " * (16 * 1024) + b"}",
                      headers={**auth(), "Content-Type": "application/json"})
    assert big.status_code == 413
    assert big.json() == {"error": "the body is larger than 16,384 bytes"}

    def chunks():
        for _ in range(40):
            yield b" " * 1024

    streamed = client.post("/api/ask", content=chunks(), headers=auth())
    assert streamed.status_code == 413
    assert client.post("/api/ask", content=b"not json", headers=auth()).status_code == 400
    assert client.post("/api/ask", json={"q": 1}, headers=auth()).status_code == 400
    foreign = client.post("/api/ask", json=question,
                          headers={**auth(), "Origin": "http://evil.example"})
    assert foreign.status_code == 403


def test_no_route_writes(index):
    kb, root = index
    client = client_for(kb)
    before = client.get("/api/status", headers=auth()).json()["chunks"]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/api/ingest", "/api/add", "/api/delete", "/api/document", "/api/search",
                     "/", "/api/documents/x"):
            answer = client.request(method, path, headers=auth())
            assert answer.status_code in (404, 405), (method, path)
    assert client.get("/assets/..%2Fserver.py", headers=auth()).status_code == 404
    assert client.get("/assets/index.html", headers=auth()).status_code == 404
    assert client.get("/api/status", headers=auth()).json()["chunks"] == before


def test_a_wildcard_bind_answers_the_machines_names_and_allow_host_adds_one():
    import socket

    from kbcli.ui.server import host_names

    everywhere = host_names("0.0.0.0", 8766)
    assert f"{socket.gethostname().lower()}:8766" in everywhere
    assert "127.0.0.1:8766" in everywhere and "evil.example:8766" not in everywhere
    proxied = host_names("127.0.0.1", 8766, ("KB.example.org", "proxy.example:443", "::5"))
    assert {"kb.example.org:8766", "proxy.example:443", "[::5]:8766"} <= proxied


def test_a_host_without_a_port_is_port_80(index):
    from starlette.testclient import TestClient

    settings = Settings(frozenset({"kb.example.org:80"}), {TOKEN: Identity("ui", None)})
    client = TestClient(UI(index[0]).app(settings))
    for host, status in (("kb.example.org", 200), ("kb.example.org:81", 421)):
        answer = client.get("/api/status", headers={**auth(), "Host": host})
        assert answer.status_code == status, host


def test_a_request_past_its_deadline_is_504_and_a_full_queue_503(index, monkeypatch):
    import asyncio
    import time

    from kbcli.ui import server
    from kbcli.ui.api import ApiError

    ui = UI(index[0])
    monkeypatch.setattr(server, "DEADLINE", 0.2)
    with pytest.raises(ApiError) as late:
        asyncio.run(ui.run(lambda: time.sleep(1)))
    assert late.value.status == 504 and late.value.message == "the request took over 0.2 s"
    monkeypatch.setattr(server, "MAX_PENDING", 2)

    async def flood():
        return await asyncio.gather(
            *(ui.run(lambda: time.sleep(0.1)) for _ in range(3)), return_exceptions=True
        )

    outcomes = asyncio.run(flood())
    refused = [o for o in outcomes if isinstance(o, ApiError)]
    assert len(refused) == 1 and refused[0].status == 503
    ui.close()


def test_highlights_count_utf16_units_as_the_page_slices(tmp_path):
    from kbcli.ui.api import utf16

    text = "🔑 reset the password"
    start = text.index("reset")
    assert utf16(text, start) == start + 1  # the key emoji is two UTF-16 units
    as_js = text.encode("utf-16-le")
    assert as_js[2 * utf16(text, start) : 2 * utf16(text, start + 5)].decode("utf-16-le") == (
        "reset"
    )


def test_explain_is_kb_search_explain_text(index):
    client = client_for(index[0])
    hit = client.get("/api/search?q=invoices&explain=1", headers=auth()).json()["hits"][0]
    assert "{" not in hit["explain"] and "True" not in hit["explain"]
    assert "keyword" in hit["explain"]
    assert hit["snippet_lines"][0] is None or isinstance(hit["snippet_lines"][0], int)


def test_a_file_hit_lists_its_other_matching_chunks(tmp_path):
    from kbcli import Document, SimpleEmbedder

    kb = KnowledgeBase.open(tmp_path / "many.db", embedder=SimpleEmbedder())
    try:
        for n in range(4):
            meta = {"source": "/docs/long.md", "chunk_index": n, "line": 1 + 10 * n}
            kb.store.add([Document(f"c{n}", f"password reset step {n}", meta)])
        client = client_for(kb)
        hits = client.get("/api/search?q=password+reset&mode=keyword", headers=auth()).json()
    finally:
        kb.close()
    [hit] = hits["hits"]
    assert hit["matched"] == 4 and len(hit["chunks"]) == 3
    assert {c["chunk_id"] for c in hit["chunks"]} | {hit["chunk_id"]} == {"c0", "c1", "c2", "c3"}
    assert all(c["location"] == f"/docs/long.md:{c['line']}" for c in hit["chunks"])


def test_the_window_grows_around_the_hit_within_its_bounds():
    from kbcli.ui.api import window

    assert window([1] * 10, 5, 3, 100) == (4, 6)
    assert window([1] * 10, 1, 3, 100) == (1, 3)
    assert window([1] * 10, 10, 4, 100) == (7, 10)
    assert window([5, 5, 50, 5, 5], 3, 10, 60) == (2, 4)  # characters bound it first
    assert window([500], 1, 10, 60) == (1, 1)  # the hit's own line always
    assert window([], 1, 10, 10) == (1, 0)


def test_a_long_document_comes_as_a_window_around_the_hit(tmp_path):
    from kbcli.ui import api

    docs = tmp_path / "long"
    docs.mkdir()
    (docs / "big.txt").write_text(
        "".join(f"line {n} filler\n" for n in range(1, 30_001))
        + "needle " * 3000 + "\n", encoding="utf-8",
    )
    assert run("ingest", str(docs)).exit_code == 0
    kb = KnowledgeBase.from_config(None, db=os.environ["KB_DB"], create=False)
    try:
        client = client_for(kb)
        path = str((docs / "big.txt").resolve())
        data = client.get("/api/document", params={"path": path, "line": 25_000},
                          headers=auth()).json()
        assert len(data["lines"]) == api.MAX_LINES and data["truncated"] is True
        assert data["total_lines"] == 30_001
        first = data["first_line"]
        assert first > 1 and data["lines"][25_000 - first] == "line 25000 filler"
        end = client.get("/api/document", params={"path": path, "line": 30_001},
                         headers=auth()).json()
        assert end["lines"][-1].endswith("…") and len(end["lines"][-1]) == api.MAX_LINE_CHARS + 1
    finally:
        kb.close()


def test_searches_answer_while_questions_wait_for_a_slow_chat_model(index):
    """Questions run in threads of their own: as many questions as there are search threads,
    held by a chat model that does not answer, leave the searches' threads free."""
    import asyncio
    import threading

    import httpx

    from kbcli.providers.chat import Completion
    from kbcli.ui import server

    release = threading.Event()

    class Stuck:
        def complete(self, messages, max_tokens=None, temperature=None, on_text=None):
            release.wait(20)
            return Completion(text="Open Settings [1].", model="stuck")

    ui = UI(index[0], chat=Stuck)
    app = ui.app(Settings(frozenset({HOST}), {TOKEN: Identity("ui", None)}))

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            question = {"question": "how do I reset my password?", "mode": "keyword"}
            asks = [
                asyncio.create_task(c.post("/api/ask", json=question, headers=auth()))
                for _ in range(server.WORKERS)
            ]
            await asyncio.sleep(0.5)  # the questions are with the chat model, or waiting
            search = await asyncio.wait_for(
                c.get("/api/search?q=reset+password", headers=auth()), 10
            )
            still_waiting = not any(task.done() for task in asks)
            release.set()
            answers = await asyncio.gather(*asks)
            return search, still_waiting, answers

    try:
        search, still_waiting, answers = asyncio.run(scenario())
    finally:
        release.set()
        ui.close()
    assert search.status_code == 200 and search.json()["hits"]
    assert still_waiting
    assert [a.json()["answer"] for a in answers] == ["Open Settings [1]."] * server.WORKERS


def test_hits_say_how_fresh_they_are_and_stale_hide_leaves_them_out(index):
    kb, root = index
    client = client_for(kb)
    first = client.get("/api/search?q=invoices&mode=keyword", headers=auth()).json()
    assert first["hits"][0]["freshness"]["state"] == "current"
    assert first["hits"][0]["freshness"]["indexed_at"]
    assert set(first["index"]) == {"changed_at", "syncing", "vectors_pending"}
    (root / "team_b" / "invoices.md").write_text("# Invoices\n\nrewritten since\n")
    flagged = client.get("/api/search?q=invoices&mode=keyword", headers=auth()).json()
    assert flagged["hits"][0]["path"].endswith("invoices.md")
    assert flagged["hits"][0]["freshness"]["state"] == "changed"
    hidden = client.get("/api/search?q=invoices&mode=keyword&stale=hide", headers=auth()).json()
    assert all(not h["path"].endswith("invoices.md") for h in hidden["hits"])
    bad = client.get("/api/search?q=invoices&stale=sometimes", headers=auth())
    assert bad.status_code == 400 and "--stale" in bad.json()["error"]


def test_status_says_whether_a_chat_model_can_answer(index, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    status = client_for(index[0]).get("/api/status", headers=auth()).json()
    assert status["chat_model"] is None  # the page offers no Ask
    assert set(status["index"]) == {"changed_at", "syncing", "vectors_pending"}

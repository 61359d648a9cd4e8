"""Small sample corpora several test folders index: three help pages, a judged question set,
a tiny BEIR collection, a CRLF file with blank-line runs, and a scoped knowledge base with
chunks outside its scope."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run
from kbcli.embedders.simple import SimpleEmbedder
from kbcli.knowledge_base import KnowledgeBase
from kbcli.stores.memory.store import InMemoryStore
from kbcli.stores.sqlite.store import SQLiteStore


def write_docs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "account.md").write_text(
        "# Account\n\n## Reset password\n\nIf you forgot your password, open Settings and "
        "choose Reset password. We email a reset link that stays valid for 30 minutes.\n"
    )
    (folder / "billing.md").write_text(
        "# Billing\n\nInvoices are sent by email on the first day of each month. Pay by card "
        "or bank transfer.\n"
    )
    (folder / "sync.md").write_text(
        "# Sync\n\nWhen files stop syncing, quit the client, wait ten seconds and start it again.\n"
    )
    return folder


def indexed(tmp_path: Path) -> tuple[str, Path]:
    docs = write_docs(tmp_path / "docs")
    db = str(tmp_path / "kb.db")
    assert run("--db", db, "ingest", str(docs)).exit_code == 0
    questions = tmp_path / "questions.jsonl"
    lines = [
        {"id": "pw", "query": "reset link password", "expected": ["account.md"]},
        {"query": "invoices email", "expected": {"billing.md": 2, "account.md:7": 1}},
        {"query": "client stuck", "expected": "docs/sync.md", "category": "support"},
    ]
    questions.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return db, questions


def make_beir(folder: Path) -> Path:
    folder.mkdir()
    corpus = [
        {"_id": "d1", "title": "Password reset", "text": "Open settings and reset the password."},
        {"_id": "d2", "title": "Weather", "text": "Sunny tomorrow with light wind."},
        {"_id": "d3", "title": "Billing", "text": "Invoices arrive monthly by email."},
    ]
    queries = [{"_id": "q1", "text": "reset password"}, {"_id": "q2", "text": "invoice email"}]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in corpus))
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    return folder


BLANK = {2, 3, 4, 10, 11, 19, 20, 21, 22, 30}  # runs of blank lines, which ingest folds


def lined_file(folder: Path) -> tuple[Path, list[str]]:
    """A 33-line markdown file with CRLF endings and runs of blank lines; its text lines."""
    lines = [
        "" if n in BLANK else f"Line {n} says marker{n} among words of line number {n}."
        for n in range(1, 34)
    ]
    lines[0] = "# Thirty-three lines"
    path = folder / "lined.md"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return path, lines


SCOPE = {"tenant": "acme"}


INSIDE: list[tuple[str, dict[str, object]]] = [
    ("Reset your password from the Security page.", {"source": "/acme/guide.md", "year": 2024}),
    ("Invoices are due within thirty days.", {"source": "/acme/billing.md", "year": 2023}),
]


# Outside acme's scope: a folder acme has none of, a key no acme chunk has, and a chunk in an
# acme file (so a source exists both inside and outside).
OUTSIDE: list[tuple[str, dict[str, object]]] = [
    ("The vault password rotates weekly.", {"source": "/globex/vault.md", "clearance": "top"}),
    ("Globex invoices go to the treasury.", {"source": "/globex/ledger.md", "year": 2024}),
    ("Initech's password policy in brief.", {"source": "/acme/guide.md", "clearance": "low"}),
]


def _kb(backend: str, folder: Path, with_outside: bool) -> KnowledgeBase:
    store: SQLiteStore | InMemoryStore = (
        SQLiteStore(folder / "kb.db") if backend == "sqlite" else InMemoryStore()
    )
    kb = KnowledgeBase(store=store, embedder=SimpleEmbedder())
    for text, meta in INSIDE:
        kb.add(text, {**meta, "tenant": "acme"})
    if with_outside:
        for n, (text, meta) in enumerate(OUTSIDE):
            kb.add(text, {**meta, "tenant": "globex" if n < 2 else "initech"})
    return kb

"""Shared pieces for the CLI tests: an in-process runner, seeded knowledge bases and a sample
folder with one file of every supported format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kbcli.cli import app

HEAVY_MODULES = (
    "numpy",
    "openai",
    "google.genai",
    "pypdf",
    "docx",
    "onnxruntime",
    "tokenizers",
    "sentence_transformers",
    "torch",
    "transformers",
    "psycopg",
    "pgvector",
    "rapidocr_onnxruntime",
    "pypdfium2",
    "cv2",
)

PASSWORD_TEXT = (
    "# Resetting your password\n\n"
    "To reset your password, open Settings, choose Security and click Reset password. "
    "A reset link is sent to your e-mail address; it expires after one hour.\n"
)


def run(*args: str, input: str | None = None):
    """Invoke ``kb`` in-process; stdout and stderr stay separate (``result.stderr``)."""
    return CliRunner().invoke(app, list(args), input=input)


def run_json(*args: str):
    """Invoke ``kb ... --json``-style commands and parse stdout (which must be pure JSON)."""
    result = run(*args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return json.loads(result.stdout), result


def minimal_pdf(text: str) -> bytes:
    """A small valid one-page PDF showing ``text`` (Helvetica), with a correct xref table."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n".encode()
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def make_corpus(folder: Path, *, corrupt_pdf: bool = False) -> Path:
    """A folder with one file of each supported format; ``password.md`` explains resetting a
    password, the others are about unrelated things."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "password.md").write_text(PASSWORD_TEXT, encoding="utf-8")
    (folder / "garden.txt").write_text(
        "Water the tomatoes every morning and keep the basil out of direct afternoon sun.\n",
        encoding="utf-8",
    )
    (folder / "invoice.pdf").write_bytes(
        minimal_pdf("Invoices are due within thirty days of the delivery date.")
    )
    import docx

    document = docx.Document()
    document.add_heading("Travel policy", level=1)
    document.add_paragraph("Book trains for trips under four hours; flights need approval.")
    document.save(str(folder / "travel.docx"))
    if corrupt_pdf:
        (folder / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf\n%%EOF\n")
    return folder


def seed(entries: list[tuple[str, dict]], db: str | Path | None = None) -> list[str]:
    """Store ``(text, metadata)`` pairs through the library (simple embedder); returns ids."""
    import os

    from kbcli import KnowledgeBase, SimpleEmbedder

    kb = KnowledgeBase.open(db or os.environ["KB_DB"], embedder=SimpleEmbedder())
    try:
        return [kb.add(text, meta) for text, meta in entries]
    finally:
        kb.close()


SAMPLE = [
    (PASSWORD_TEXT, {"source": "/docs/password.md", "chunk_index": 0, "lang": "en"}),
    (
        "Water the tomatoes every morning and keep the basil out of the sun.",
        {"source": "/docs/garden.txt", "chunk_index": 0, "lang": "en"},
    ),
    (
        "Invoices are due within thirty days of the delivery date.",
        {"source": "/docs/invoice.pdf", "chunk_index": 0, "page": 1, "lang": "de"},
    ),
    (
        "A second page: late invoices are charged a fee.",
        {"source": "/docs/invoice.pdf", "chunk_index": 1, "page": 2, "lang": "de"},
    ),
]


# from cli/test_reliability.py
def _can_mount() -> str | None:
    """Why a read-only bind mount cannot be made here (None: it can)."""
    if sys.platform != "linux":
        return "bind mounts as on Linux"
    try:
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", "mount --bind -o ro / /mnt"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare cannot run here ({exc})"
    if done.returncode != 0:
        return f"no mount namespace here: {done.stderr.decode().strip()[:120]}"
    return None

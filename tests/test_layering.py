"""Code outside stores/ reaches a store only through the protocols (issue 11)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "kbcli"
PROBE = re.compile(r"\b(?:hasattr|getattr)\(\s*[\w.]*store\b")
CONCRETE = re.compile(r"\bSQLiteStore\(|import .*\bSQLiteStore\b")
ALLOWED_CONCRETE = {"__init__.py", "stores"}  # re-exports and the stores themselves


def test_no_store_is_probed_with_hasattr_or_getattr():
    offenders = [
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py")
        if "stores" not in path.relative_to(SRC).parts
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if PROBE.search(line)
    ]
    assert offenders == []


def test_only_the_stores_package_names_the_sqlite_store_class():
    offenders = []
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).parts
        if parts[0] in ALLOWED_CONCRETE or parts[0] == "testing":
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if CONCRETE.search(line) and not line.lstrip().startswith(("#", '"', "'")):
                offenders.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert offenders == []

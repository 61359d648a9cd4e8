"""kbcli.system.paths: every byte name has one recorded form, valid UTF-8, that maps back."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from kbcli.system.paths import source_name, source_path

NAME_BYTES = st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b)


@given(NAME_BYTES)
def test_any_name_is_recorded_as_utf8_and_maps_back(raw):
    path = os.fsdecode(b"/nowhere/" + raw)
    recorded = source_name(path)
    recorded.encode("utf-8")  # storable in SQLite, PostgreSQL and JSON
    if "\\x" not in path:  # no literal escape in the real name: the round trip is exact
        assert source_path(recorded) == path
    assert source_name(os.fsencode(path)) == recorded


def test_valid_names_are_unchanged():
    for name in ("/a/b.md", "/ü/日本.txt", "/a/back\\slash.md", "/a/x\\x41.md"):
        assert source_name(name) == name and source_path(name) == name


def test_escapes_that_are_valid_utf8_bytes_stay_literal(tmp_path):
    # "\xc3\xa9" escapes the bytes of "é": kb would have recorded "é", so this is a real name
    assert source_path("/a/caf\\xc3\\xa9.md") == "/a/caf\\xc3\\xa9.md"
    literal = tmp_path / "bad\\xff.md"  # a real file whose name has a backslash
    literal.write_text("x")
    assert source_path(str(literal)) == str(literal)
    assert source_path(f"{tmp_path}/other\\xff.md") == os.fsdecode(
        os.fsencode(str(tmp_path)) + b"/other\xff.md"
    )

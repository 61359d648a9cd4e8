"""The one optional-import helper, ``kbcli.errors.require``."""

from __future__ import annotations

import sys

import pytest

from kbcli.errors import MissingDependencyError, require


def test_returns_the_module():
    assert require("json", extra="none") is sys.modules["json"]


def test_missing_module_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "bs4", None)
    with pytest.raises(
        MissingDependencyError,
        match=r"^Loading HTML files needs the 'bs4' "
        r"package: pip install 'kbcli\[html\]'$",
    ):
        require("bs4", extra="html", feature="Loading HTML files")


def test_package_name_when_it_differs_from_the_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependencyError) as caught:
        require("sentence_transformers", extra="local-st", package="sentence-transformers")
    assert str(caught.value) == (
        "This feature needs the 'sentence-transformers' package: pip install 'kbcli[local-st]'"
    )
    assert isinstance(caught.value, ImportError)

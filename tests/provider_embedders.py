"""What the tests of the provider embedders share (``embedders/test_openai.py``,
``embedders/test_gemini.py``): a clean environment, retry sleeps recorded instead of waited,
the fake provider server on loopback, and an embedder built against it.

A test module imports the fixtures (pytest finds them in its namespace); each is registered
under the short name the tests ask for (``server``, ``sleeps``), so the import does not clash
with the tests' parameters.
"""

from __future__ import annotations

from typing import Any

import pytest

from fake_providers import FakeServer, clean_env
from kbcli.config.lookup import Config
from kbcli.providers import retry


@pytest.fixture(autouse=True, name="clean_environment")
def clean_env_fixture(monkeypatch, tmp_path):
    clean_env(monkeypatch, tmp_path)


@pytest.fixture(name="sleeps")
def sleeps_fixture(monkeypatch):
    waited: list[float] = []
    monkeypatch.setattr(retry, "sleep", waited.append)
    return waited


@pytest.fixture(name="server")
def server_fixture():
    with FakeServer() as srv:
        yield srv


def build(cls: type, key: str, base_url: str, **kwargs: Any) -> Any:
    """``cls`` (an embedder class) with ``key``, ``base_url`` and the default configuration,
    unless ``kwargs`` say otherwise."""
    kwargs.setdefault("api_key", key)
    kwargs.setdefault("base_url", base_url)
    kwargs.setdefault("config", Config())
    return cls(**kwargs)

"""The embedder registry: names to lazily imported classes, and users' own dotted paths."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fake_providers import EchoEmbedder
from kbcli.config import registry
from kbcli.embedders.simple import SimpleEmbedder
from kbcli.errors import InvalidOptionError


def test_registered_names():
    assert list(registry.EMBEDDERS) == ["simple", "openai", "gemini", "local", "static", "e5"]
    assert list(registry.EMBEDDER_NOTES) == list(registry.EMBEDDERS)


@pytest.mark.parametrize("name", list(registry.EMBEDDERS))
def test_every_registered_embedder_loads(name):
    cls = registry.load_embedder_class(name)
    assert cls.provider == name


def test_names_are_case_insensitive():
    assert registry.load_embedder_class(" Simple ") is SimpleEmbedder


def test_dotted_path():
    assert registry.load_embedder_class("kbcli.embedders.simple:SimpleEmbedder") is SimpleEmbedder
    assert registry.load_embedder_class("fake_providers:EchoEmbedder") is EchoEmbedder


def test_unknown_name_lists_choices_from_the_dict(monkeypatch):
    monkeypatch.setitem(registry.EMBEDDERS, "extra-one", "fake_providers:EchoEmbedder")
    with pytest.raises(InvalidOptionError) as info:
        registry.load_embedder_class("nope")
    message = str(info.value)
    for name in registry.EMBEDDERS:
        assert name in message
    assert "package.module:Class" in message


@pytest.mark.parametrize(
    "path,words",
    [
        ("no_such_module_xyz:Thing", "Cannot import"),
        ("fake_providers:NoSuchClass", "has no"),
        ("fake_providers:PROVIDER_ENV", "not a class"),
    ],
)
def test_bad_paths_are_clear(path, words):
    with pytest.raises(InvalidOptionError, match=words):
        registry.load_embedder_class(path)


def test_other_families_can_use_load_class():
    from fake_providers import PlainStore

    stores = {"plain": "fake_providers:PlainStore"}
    assert registry.load_class("plain", stores, kind="store") is PlainStore
    with pytest.raises(InvalidOptionError, match="Unknown store 'x': choose from plain"):
        registry.load_class("x", stores, kind="store")


def test_importing_embedders_and_registry_is_light():
    code = (
        "import sys, kbcli.embedders, kbcli.config.registry; kbcli.embedders.resolve_embedder;"
        "heavy = ('openai', 'google.genai', 'numpy', 'onnxruntime', 'torch', 'tokenizers');"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_provider_classes_are_lazy_attributes():
    from kbcli import embedders

    assert embedders.OpenAIEmbedder.provider == "openai"
    assert embedders.GeminiEmbedder.provider == "gemini"
    assert embedders.LocalEmbedder.provider == "local"
    with pytest.raises(AttributeError):
        embedders.NoSuchEmbedder  # noqa: B018


TOY_BACKEND = """
import sys
from kbcli.config import registry

registry.STORE_ENTRIES["toy"] = registry.StoreEntry("toy_store:ToyStore", {"max_size": int})

from kbcli.config.lookup import ConfigError, load_config, with_store
from kbcli.stores import build_store

store = build_store(load_config(sys.argv[1]))
print(type(store).__name__, store.max_size, "toy" in registry.STORES)
try:
    load_config(sys.argv[2])
except ConfigError as exc:
    print(exc)
try:
    with_store(load_config(sys.argv[1]), "nope")
except ConfigError as exc:
    print(exc)
"""


def test_a_store_backend_is_registered_in_one_place(tmp_path):
    """One STORE_ENTRIES entry (class path and settings) is all a backend needs: the config
    accepts and checks its settings, --store lists it, build_store builds it (from_config)."""
    (tmp_path / "toy_store.py").write_text(
        "from kbcli.stores import InMemoryStore\n\nclass ToyStore(InMemoryStore):\n    pass\n",
        encoding="utf-8",
    )
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("store:\n  backend: toy\n  max_size: 3\n", encoding="utf-8")
    bad.write_text("store:\n  backend: toy\n  dsn: x\n", encoding="utf-8")
    script = tmp_path / "toy.py"
    script.write_text(TOY_BACKEND, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run(
        [sys.executable, str(script), str(good), str(bad)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    built, unknown_key, unknown_store = out.stdout.strip().splitlines()
    assert built == "ToyStore 3 True"
    assert "store.dsn" in unknown_key and "max_size" in unknown_key
    assert "choose from sqlite, memory, faiss, chroma, postgres, toy" in unknown_store


@pytest.mark.parametrize("name", list(registry.STORE_ENTRIES))
def test_every_registered_store_is_the_one_facade_over_its_parts(name):
    """A backend's class assembles parts: it is the Store facade and re-implements none of its
    public API (closing may add its own clean-up; ``doctor`` runs the backend's own checks)."""
    from kbcli.stores.composite import Store

    cls = registry.load_class(name, registry.STORES, kind="store")
    assert issubclass(cls, Store)
    api = {n for n in vars(Store) if not n.startswith("_")}
    own = {n for k in cls.__mro__[: cls.__mro__.index(Store)] for n in vars(k)}
    assert api & own <= {"close", "doctor"}, sorted(api & own)

"""Names a package exports and imports only when first used (PEP 562): ``kbcli`` itself,
:mod:`kbcli.ingest` and the CLI's output. A leaf module, so a package that re-exports its
modules never imports the top-level package back."""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing (kb --help imports this module)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: dict[str, str]) -> tuple[Any, Any]:
    """A package's module ``__getattr__`` and ``__dir__`` (PEP 562) that import each name of
    ``exports`` (name -> submodule) on first access and keep it in ``namespace`` (the
    package's ``globals()``)."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(list(namespace) + list(exports))

    return __getattr__, __dir__

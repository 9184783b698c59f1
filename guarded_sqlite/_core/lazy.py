"""Names a package exports but imports only on first use (PEP 562's module ``__getattr__``), so that
importing the package stays cheap: ``guarded_sqlite`` itself and ``guarded_sqlite.evaluation``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, modules: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``, whose ``namespace`` is its ``globals()``: a name of
    ``modules`` is read from the submodule it maps to (imported then) and kept in ``namespace``, so
    the hook runs once per name; any other name raises ``AttributeError`` as a module does."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib  # only once a lazy name is asked for

        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__

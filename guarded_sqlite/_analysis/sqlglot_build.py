"""Which sqlglot the analysis runs on: the compiled build (``sqlglotc``) or pure Python.

``sqlglotc`` ships no module of its own: its wheel lays mypyc-compiled extension modules
(``sqlglot/parser.cpython-311-x86_64-linux-gnu.so`` ...) beside sqlglot's ``.py`` files, and Python's
import system prefers an extension module to a source file of the same name. Both only work as a pair
of one version: sqlglot 30.31.0's ``.py`` files beside sqlglotc 30.30.0's modules fail in ``import
sqlglot`` itself (``AttributeError: module 'sqlglot.expressions' has no attribute 'TeradataTitle'``,
checked by hand). Each sqlglotc release requires its own sqlglot version exactly, so pip installs
matching pairs; a later ``pip install -U sqlglot`` alone only warns, and leaves such a mismatch.

``check()`` runs before the analysis first imports sqlglot (``_analysis/__init__``): when compiled
modules are present and sqlglotc's version is not sqlglot's, it warns once and makes this process load
sqlglot's pure-Python modules (``_SourceOnly``), which are complete on their own; nothing changes
otherwise. Costs one directory check per process, and a metadata read only when compiled modules exist.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["build", "check"]

_state: list[str] = []  # the build this process settled on, once check() ran


def _versions() -> tuple[str, str | None]:
    """(sqlglot's version, sqlglotc's or None when it is not installed), from the installed metadata."""
    from importlib import metadata

    try:
        compiled: str | None = metadata.version("sqlglotc")
    except metadata.PackageNotFoundError:
        compiled = None
    return metadata.version("sqlglot"), compiled


def _has_compiled_modules() -> bool:
    """Whether sqlglot's package directory holds compiled modules (looked up without importing sqlglot,
    whose ``__init__`` is what fails on a mismatch)."""
    spec = importlib.util.find_spec("sqlglot")
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for location in locations:
        try:
            names = os.listdir(location)
        except OSError:
            continue
        if any(name.startswith("parser.") and name.endswith(suffixes) for name in names):
            return True
    return False


class _SourceOnly:
    """A meta path finder for ``sqlglot`` and its submodules that finds only ``.py`` (and ``.pyc``)
    files, so that compiled modules of another version beside them are never loaded."""

    _LOADERS = (
        (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES),
        (importlib.machinery.SourcelessFileLoader, importlib.machinery.BYTECODE_SUFFIXES),
    )

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "sqlglot" and not name.startswith("sqlglot."):
            return None
        for entry in sys.path if path is None else path:
            spec = importlib.machinery.FileFinder(entry or ".", *self._LOADERS).find_spec(name, target)
            if spec is not None:
                return spec
        return None

    def invalidate_caches(self) -> None:
        pass


def check() -> str:
    """Settle which sqlglot build this process uses, before the first ``import sqlglot``; returns it:
    ``"compiled"``, ``"pure"`` (no compiled modules) or ``"pure (mismatch)"`` (sqlglotc's version is not
    sqlglot's: warned, pure modules loaded). When the application imported sqlglot first, there is
    nothing left to decide: the build it loaded is reported."""
    if _state:
        return _state[0]
    if "sqlglot" in sys.modules:
        parser = sys.modules.get("sqlglot.parser")
        found = "pure" if parser is None or str(getattr(parser, "__file__", "")).endswith(".py") else "compiled"
    elif not _has_compiled_modules():
        found = "pure"
    else:
        pure, compiled = _versions()
        if compiled == pure:
            found = "compiled"
        else:
            found = "pure (mismatch)"
            sys.meta_path.insert(0, _SourceOnly())
            warnings.warn(
                f"guarded_sqlite: sqlglotc {compiled or '(no metadata)'} does not match sqlglot {pure}, whose"
                f" modules it replaces; using sqlglot's pure-Python modules (slower). Fix with"
                f" `pip install 'sqlglotc=={pure}'` or `pip install 'sqlglot=={compiled}'`.",
                RuntimeWarning,
                stacklevel=2,
            )
    _state.append(found)
    return found


def build() -> str:
    """The build ``check()`` settled on (``check()`` first if it has not run): for reports and benchmarks."""
    return check()

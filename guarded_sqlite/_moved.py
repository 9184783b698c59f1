"""Old import paths of modules that moved, kept for one release: each shim module calls ``moved``,
which warns once and puts the module it moved to in its place, so that ``import`` of either path gives
the same module object (and a monkeypatch on one is seen through the other)."""

from __future__ import annotations

import sys
import warnings
from types import ModuleType

__all__ = ["REMOVED_IN", "moved"]

REMOVED_IN = "0.5"
"""The release in which the old paths stop working."""


def moved(old: str, module: ModuleType) -> None:
    """Replace module ``old`` (a shim being imported) by ``module``, with a ``DeprecationWarning``."""
    warnings.warn(
        f"{old} moved to {module.__name__}; the old import path is removed in guarded-sqlite {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = module

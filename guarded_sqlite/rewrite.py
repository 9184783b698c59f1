"""Moved to ``guarded_sqlite._analysis.rewrite``: this path works, with a ``DeprecationWarning``, until 0.4."""

from ._moved import moved
from ._analysis import rewrite as _new

moved(__name__, _new)

"""Moved to ``guarded_sqlite._analysis.rewrite``: this path works, with a ``DeprecationWarning``, until 0.5."""

from ._analysis import rewrite as _new
from ._moved import moved

moved(__name__, _new)

"""Moved to ``guarded_sqlite._analysis.provenance``: this path works, with a ``DeprecationWarning``, until 0.4."""

from ._moved import moved
from ._analysis import provenance as _new

moved(__name__, _new)

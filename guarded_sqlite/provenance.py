"""Moved to ``guarded_sqlite._analysis.provenance``: this path works, with a ``DeprecationWarning``, until 0.4."""

from ._analysis import provenance as _new
from ._moved import moved

moved(__name__, _new)

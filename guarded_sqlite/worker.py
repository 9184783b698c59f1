"""Moved to ``guarded_sqlite.agent.isolation``: this path works, with a ``DeprecationWarning``, until 0.4."""

from ._moved import moved
from .agent import isolation as _new

moved(__name__, _new)

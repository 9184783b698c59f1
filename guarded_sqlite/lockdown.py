"""Moved to ``guarded_sqlite.agent.lockdown``: this path works, with a ``DeprecationWarning``, until 0.4."""

from ._moved import moved
from .agent import lockdown as _new

moved(__name__, _new)

"""Moved to ``guarded_sqlite._core.deadlines``: this path works, with a ``DeprecationWarning``, until 0.5."""

from ._core import deadlines as _new
from ._moved import moved

moved(__name__, _new)

"""Moved to ``guarded_sqlite.agent.llama_index_tools``: this path works, with a ``DeprecationWarning``, until 0.4."""

from ._moved import moved
from .agent import llama_index_tools as _new

moved(__name__, _new)

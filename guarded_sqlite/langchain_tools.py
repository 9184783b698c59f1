"""Moved to ``guarded_sqlite.agent.langchain_tools``: this path works, with a ``DeprecationWarning``, until 0.5."""

from ._moved import moved
from .agent import langchain_tools as _new

moved(__name__, _new)

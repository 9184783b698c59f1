"""Moved to ``guarded_sqlite.agent.mcp_server``: this path works, with a ``DeprecationWarning``, until 0.4."""

from ._moved import moved
from .agent import mcp_server as _new

moved(__name__, _new)

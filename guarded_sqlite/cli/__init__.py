"""The ``guarded-sqlite`` command line (``commands.main``): ``demo``, ``query``, ``mcp``, ``eval`` and ``sweep``.
The library never imports this package."""

from .commands import main

__all__ = ["main"]

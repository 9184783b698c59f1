"""The package's version, in one place: the package, the CLI's ``--version`` and the MCP server's
name read it here, and the build reads it from this file (``pyproject.toml``)."""

__version__ = "0.5.0"

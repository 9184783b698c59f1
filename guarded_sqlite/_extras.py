"""Install hints for the optional extras that work however this package was installed.

guarded-sqlite is not on a package index: ``pip install 'guarded-sqlite[mcp]'`` fails for a user who
installed the wheel (and for one working from a clone). What an extra adds are ordinary packages from
the index, so a hint names them: ``pip install 'mcp>=2.0,<3'``. ``EXTRAS`` is pyproject.toml's
``[project.optional-dependencies]`` without ``test`` and ``docs`` (tests/package/test_extras.py keeps
the two in step).
"""

from __future__ import annotations

EXTRAS: dict[str, tuple[str, ...]] = {
    "llm": ("litellm>=1.100",),
    "plot": ("matplotlib>=3.8",),
    "duckdb": ("duckdb>=1.1",),
    "postgres": ("psycopg[binary]>=3.2",),
    "mysql": ("PyMySQL>=1.1",),
    "clickhouse": ("chdb>=4.4,<5",),
    "mcp": ("mcp>=2.0,<3",),
    "langchain": ("langchain-core>=1.0,<2",),
    "llama-index": ("llama-index-core>=0.14,<0.15",),
}


def install_hint(extra: str) -> str:
    """The command that installs what ``extra`` adds, for a package installed from a wheel or a clone.

    >>> install_hint("mcp")
    "pip install 'mcp>=2.0,<3' (the [mcp] extra)"
    """
    packages = " ".join(f"'{requirement}'" for requirement in EXTRAS[extra])
    return f"pip install {packages} (the [{extra}] extra)"

"""How many statements a text holds, by sqlglot's tokens (which know each dialect's strings, dollar
quotes and comments): the agent tools' one-statement rule on PostgreSQL, whose driver has no
statement splitter of its own."""

from __future__ import annotations

from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]  # sqlglot re-exports it

from .trees import dialect_named

__all__ = ["postgres_statements_problem"]


def postgres_statements_problem(sql: str) -> str | None:
    """Why ``sql`` is not one PostgreSQL statement by sqlglot's tokens, or None. Empty statements
    (``SELECT 1;;``) are not counted: PostgreSQL skips them.

    >>> postgres_statements_problem("SELECT ';' AS a; -- trailing")
    >>> postgres_statements_problem("SELECT 1; COMMIT")
    'it holds 2 statements; send one statement per call'
    >>> postgres_statements_problem("SELECT $$; DELETE FROM t$$")
    """
    try:
        tokens = dialect_named("postgres").tokenize(sql)
    except SqlglotError:
        return "it cannot be split into statements (an unterminated string or comment?)"
    statements, open_statement = 0, False
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            open_statement = False
        elif not open_statement:
            open_statement = True
            statements += 1
    if statements > 1:
        return f"it holds {statements} statements; send one statement per call"
    return None

"""SQLite SQL for other engines: sqlglot's transpiler plus SQLite's own name-resolution rules.

Spider and BIRD gold and predictions are written for SQLite. ``transpile`` parses a query with
sqlglot's ``sqlite`` dialect and writes it in the engine's dialect (``duckdb`` or ``postgres``) —
what ``sqlglot.transpile(sql, read="sqlite", write=dialect)`` does — with two changes that reproduce
how SQLite *resolves names*, without which most of Spider would not run anywhere else:

1. **Identifiers are case-insensitive.** SQLite matches table and column names case-insensitively,
   quoted or not (``"CountryCode"`` and ``countrycode`` are the same column). PostgreSQL folds
   unquoted names to lower case and matches quoted ones exactly. So every identifier is lower-cased
   (ASCII only, as SQLite folds) and quoted, and the PostgreSQL copies are created with lower-cased
   names (see ``copy``): ``SELECT T1.Name FROM Country AS T1`` becomes
   ``SELECT "t1"."name" FROM "country" AS "t1"``. DuckDB matches identifiers case-insensitively
   even when quoted, so its copies keep the original names and the same SQL resolves there too.
2. **Double-quoted strings.** SQLite reads ``"Korea"`` as a string literal when no column of that
   name is in scope (Spider's gold does this often: ``WHERE name = "Korea"``). sqlglot keeps it an
   identifier, which the other engines reject. A double-quoted name that is not a column or table of
   the database, nor an alias defined in the query, is therefore turned into a string literal, as
   SQLite would. Back-quoted and bracketed names are always identifiers, as in SQLite.

Everything else — division, ``LIKE``'s case sensitivity, ``GROUP BY`` strictness, NULL ordering, date
functions — is left to sqlglot; the evaluation reports what still differs. Constructs sqlglot cannot
express in the target dialect raise ``TranspileError`` (``unsupported_level=RAISE``) rather than being
written approximately, so they are counted as transpile errors.

``Preparer`` applies ``transpile`` to one database's queries during an evaluation and adds up the
time it takes; a query it cannot transpile comes back with the reason instead of SQL.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from .._engines import ENGINE_NAMES
from ..errors import describe_error

if TYPE_CHECKING:
    from sqlglot import exp

ENGINE_DIALECTS = {name: name for name in ENGINE_NAMES if name != "sqlite"}
"""sqlglot's dialect for each engine the evaluation can target (SQLite needs no transpiling): the
engine names are sqlglot's dialect names."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class TranspileError(Exception):
    """sqlglot could not read the query as SQLite or could not write it for the engine."""


class NotOneStatement(ValueError):
    """The SQL holds no statement or several; like ``sqlite3``, the evaluation runs exactly one."""


def fold(name: str) -> str:
    """A name as SQLite compares it: ASCII letters lower-cased, everything else kept."""
    return name.translate(_ASCII_LOWER)


def transpile(sql: str, engine: str, names: Iterable[str] = ()) -> str:
    """``sql`` (SQLite) rewritten for ``engine`` (``"duckdb"`` or ``"postgres"``).

    ``names``: the database's table and column names (any case), used to decide which double-quoted
    names SQLite would read as string literals. Raises ``TranspileError`` when sqlglot cannot parse
    the query as SQLite or cannot write part of it in the engine's dialect, and ``NotOneStatement``
    when it is not exactly one statement (an error, as in ``sqlite3``, not a transpile failure).
    """
    from sqlglot import TokenType, exp
    from sqlglot.errors import ErrorLevel, SqlglotError

    dialect = ENGINE_DIALECTS.get(engine)
    if dialect is None:
        raise ValueError(f"no transpiling for engine {engine!r}; use one of {', '.join(ENGINE_DIALECTS)}")
    sqlite = _sqlite_dialect()
    try:
        tokens = sqlite.tokenize(sql)  # once, for the parser and for the double-quoted names
        statements = [tree for tree in sqlite.parser().parse(tokens, sql) if tree is not None]
    except SqlglotError as error:
        raise TranspileError(f"sqlglot cannot parse it as SQLite: {describe_error(error)}") from None
    except Exception as error:  # a failure inside sqlglot must score this query 0, not stop the run
        raise TranspileError(f"sqlglot failed to parse it: {describe_error(error)}") from None
    if len(statements) != 1:
        raise NotOneStatement(f"{len(statements)} statements; exactly one statement is evaluated")
    tree = statements[0]
    double_quoted = {
        fold(token.text)
        for token in tokens
        if token.token_type == TokenType.IDENTIFIER and sql[token.start : token.start + 1] == '"'
    }
    try:
        tree = _sqlite_string_fallback(tree, double_quoted, {fold(name) for name in names})
        for identifier in tree.find_all(exp.Identifier):
            identifier.set("this", fold(identifier.this))
            identifier.set("quoted", True)
        return tree.sql(dialect=dialect, unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as error:
        raise TranspileError(f"sqlglot cannot write it for {engine}: {describe_error(error)}") from None
    except Exception as error:
        raise TranspileError(f"sqlglot failed to write it for {engine}: {describe_error(error)}") from None


class Prepared(NamedTuple):
    """A query ready for the engine, or why it cannot run there."""

    sql: str | None
    """The query in the engine's dialect; None when it cannot be run."""

    error: str | None = None
    """Why not: ``"TranspileError: ..."`` or ``"NotOneStatement: ..."``."""

    transpile_failed: bool = False
    """sqlglot could not transpile it (a ``NotOneStatement`` is an error of the query instead)."""


class Preparer:
    """Transpiles one database's queries for an engine (none on SQLite), adding up the time it takes."""

    def __init__(self, engine: str, names: Iterable[str] = ()) -> None:
        self.engine = engine
        self.names = frozenset(names)
        self.seconds = 0.0
        """Time spent transpiling so far."""

    def __call__(self, sql: str) -> Prepared:
        if self.engine == "sqlite" or not sql.strip():
            return Prepared(sql)
        started = time.perf_counter()
        try:
            return Prepared(transpile(sql, self.engine, self.names))
        except TranspileError as error:
            return Prepared(None, describe_error(error), transpile_failed=True)
        except NotOneStatement as error:
            return Prepared(None, describe_error(error))
        finally:
            self.seconds += time.perf_counter() - started


@functools.lru_cache(maxsize=1)
def _sqlite_dialect() -> Any:
    from sqlglot.dialects.sqlite import SQLite

    return SQLite()


def _sqlite_string_fallback(tree: exp.Expression, double_quoted: set[str], known: set[str]) -> exp.Expression:
    """Turn unresolvable double-quoted column references into string literals, as SQLite does."""
    if not double_quoted:
        return tree
    from sqlglot import exp

    aliases = {fold(node.alias) for node in tree.find_all(exp.Alias, exp.CTE) if node.alias}
    for table_alias in tree.find_all(exp.TableAlias):  # AS t, and the column list of AS t(a, b)
        aliases |= {fold(name) for name in (table_alias.name, *(column.name for column in table_alias.columns)) if name}
    resolvable = known | aliases

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table:
            identifier: exp.Expression | None = node.this
            if (
                isinstance(identifier, exp.Identifier)
                and identifier.quoted
                and fold(identifier.this) in double_quoted
                and fold(identifier.this) not in resolvable
            ):
                return exp.Literal.string(identifier.this)
        return node

    return tree.transform(replace, copy=False)

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
time it takes; a query it cannot transpile comes back with the reason instead of SQL. ``query_shape``
answers what the evaluation asks of a gold query whose result differs between engines: whether it
cuts with LIMIT (and the query without the cut), divides, or compares text.
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


class QueryShape(NamedTuple):
    """What in a SQLite query can make engines answer it differently."""

    limited: bool
    """The outermost query has LIMIT or OFFSET."""

    unlimited_sql: str | None
    """The query without its outermost LIMIT and OFFSET, in SQLite's dialect (None when not limited)."""

    divides: bool
    """It divides with ``/`` somewhere: integer division on SQLite (and PostgreSQL), not on MySQL or DuckDB."""

    compares_text: bool
    """It compares with a string literal (``=``, ``<>``, ``<``, ``IN``, ``BETWEEN``, ...) or matches
    with ``LIKE``/``GLOB``: where the engine's collation or ``LIKE`` decides case and trailing spaces."""

    bare_columns: bool = False
    """A SELECT that aggregates or groups also returns a column neither grouped nor aggregated: SQLite
    takes it from the row of a lone MIN/MAX (else any row of the group), other engines from any row
    or not at all."""

    compares_number: bool = False
    """It compares a column with a number literal: a text column compares as text on SQLite (its
    affinity), as numbers on MySQL."""


def query_shape(sql: str, names: Iterable[str] = ()) -> QueryShape | None:
    """The ``QueryShape`` of one SQLite query; None when sqlglot cannot read it as one statement.
    ``names``: the database's table and column names (double-quoted others are strings, as in SQLite).

    >>> shape = query_shape('SELECT n FROM t WHERE name = "x" ORDER BY n LIMIT 1', ["t", "name", "n"])
    >>> shape.unlimited_sql, shape.compares_text, shape.divides
    ("SELECT n FROM t WHERE name = 'x' ORDER BY n", True, False)
    """
    from sqlglot import TokenType, exp
    from sqlglot.errors import SqlglotError

    sqlite = _sqlite_dialect()
    try:
        tokens = sqlite.tokenize(sql)
        statements = [tree for tree in sqlite.parser().parse(tokens, sql) if tree is not None]
        if len(statements) != 1:
            return None
        double_quoted = {
            fold(token.text)
            for token in tokens
            if token.token_type == TokenType.IDENTIFIER and sql[token.start : token.start + 1] == '"'
        }
        tree = _sqlite_string_fallback(statements[0], double_quoted, {fold(name) for name in names})
        limited = bool(tree.args.get("limit") or tree.args.get("offset"))
        unlimited_sql = None
        if limited:
            unlimited = tree.copy()
            unlimited.set("limit", None)
            unlimited.set("offset", None)
            unlimited_sql = unlimited.sql(dialect="sqlite")
    except SqlglotError:
        return None
    except Exception:  # a failure inside sqlglot: no shape, the difference stays unexplained
        return None

    def is_text(node: exp.Expression | None) -> bool:
        return isinstance(node, exp.Literal) and node.is_string

    compares_text = any(True for _ in tree.find_all(exp.Like, exp.ILike, exp.Glob))
    if not compares_text:
        for node in tree.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between):
            operands = [node.this, node.args.get("expression"), node.args.get("low"), node.args.get("high")]
            operands += node.args.get("expressions") or []
            if any(is_text(operand) for operand in operands):
                compares_text = True
                break
    compares_number = False
    for node in tree.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between):
        operands = [node.this, node.args.get("expression"), node.args.get("low"), node.args.get("high")]
        operands += node.args.get("expressions") or []
        numbers = [o for o in operands if isinstance(o, exp.Literal) and not o.is_string]
        if numbers and any(isinstance(o, exp.Column) for o in operands):
            compares_number = True
            break
    divides = any(True for _ in tree.find_all(exp.Div))
    bare = any(_has_bare_column(select) for select in tree.find_all(exp.Select))
    return QueryShape(limited, unlimited_sql, divides, compares_text, bare, compares_number)


def _has_bare_column(select: exp.Select) -> bool:
    """Whether an aggregating or grouping SELECT projects a column neither grouped nor inside an aggregate."""
    from sqlglot import exp

    group = select.args.get("group")
    grouped = {fold(column.name) for column in group.find_all(exp.Column)} if group is not None else set()
    projections = select.expressions
    if group is None and not any(p.find(exp.AggFunc) for p in projections):
        return False
    for projection in projections:
        if projection.find(exp.AggFunc) or isinstance(projection, exp.Star):
            continue
        if any(fold(column.name) not in grouped for column in projection.find_all(exp.Column)):
            return True
    return False


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

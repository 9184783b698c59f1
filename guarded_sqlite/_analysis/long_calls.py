"""Calls MariaDB/MySQL cannot interrupt, for the agent tools: a function that searches one string in
another (``LOCATE``, ``INSTR``, ``REPLACE``, ``LIKE``, the ``REGEXP`` family, ...) runs inside one
evaluation, where the server looks at neither ``max_statement_time`` nor ``KILL`` (it checks between
rows). Its cost grows with the product of its arguments' lengths, or with the square of the matches
(``REPLACE``, ``REGEXP_REPLACE``): ``LOCATE(CONCAT(REPEAT('a', 100000), 'b'), REPEAT('a', 1000000))``,
90 characters, is minutes of a core that no kill ends, and ``REPLACE(REPEAT('a', 1000000), 'a', 'bb')``
more than two.

So an agent's statement may pass such a function only arguments whose length the statement cannot
inflate: literals (at most ``MAX_LITERAL_CHARS`` in one call's arguments), parameters, the stored
columns of tables and views, and what the size-keeping functions (``LOWER``, ``TRIM``, ``SUBSTRING``,
``CAST``, ``COALESCE``, ``CASE``, ...) make of them; ``CONCAT`` of those in the same SELECT (its result
grows only with the statement's text). A derived table's or CTE's column is followed to the expression
that makes it, where ``CONCAT`` no longer counts as bounded (a chain of derived tables doubling a
string is a few hundred characters of text); a recursive CTE's column is not bounded. Anything else as
such an argument (``REPEAT``, ``LPAD``, ``GROUP_CONCAT``, a subquery, another search function) is
refused before the statement runs. What stays: the stored values themselves (an operator's table of
megabyte texts makes ``REPLACE`` over them slow), stated in docs/agents.md.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, traverse_scope

from .trees import dialect_named

__all__ = ["MAX_LITERAL_CHARS", "long_call_refusal", "mysql_long_call"]

MAX_LITERAL_CHARS = 4_096
"""Characters of literals one search call's arguments may hold: with a stored value of 64 KB on the
other side that is ~2.7e8 comparisons (~0.2 s at the ~1.4e9 a second measured on MariaDB 10.11)."""

_SEARCHES: tuple[type[exp.Expression], ...] = (
    exp.StrPosition,  # LOCATE, INSTR, POSITION
    exp.SubstringIndex,
    exp.Replace,
    exp.RegexpReplace,
    exp.RegexpSubstr,
    exp.RegexpInstr,
    exp.RegexpLike,  # REGEXP, RLIKE
    exp.Like,
)
"""What sqlglot makes of the functions whose one evaluation searches a string for another."""

_SEARCH_WORDS = re.compile(r"locate|instr|position|substring_index|replace|regexp|rlike|like", re.IGNORECASE)
"""The words of ``_SEARCHES`` in a text: a statement without any is not parsed."""

_KEEPS_SIZE: tuple[type[exp.Expression], ...] = (
    exp.Lower,
    exp.Upper,
    exp.Trim,
    exp.Substring,
    exp.Left,
    exp.Right,
    exp.Cast,
    exp.Collate,
    exp.Introducer,
    exp.Coalesce,
    exp.If,
    exp.Case,
    exp.Paren,
    exp.Alias,
    exp.Nullif,
    exp.Max,  # one of the values it reads
    exp.Min,
)
"""Functions whose result is no longer than their longest argument (or one of them)."""

_SMALL: tuple[type[exp.Expr], ...] = (
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Placeholder,  # the caller's value (a user variable, exp.Parameter, is not: the statement sets it)
    exp.SessionParameter,  # @@version: the server's settings
    exp.HexString,
    exp.Binary,  # arithmetic, comparisons, AND/OR: a number or a truth value
    exp.Not,
    exp.Neg,
    exp.Length,
    exp.Interval,
)
"""Expressions whose value is a number, a truth value or the statement's own text."""

_STRING_OPERATORS = (exp.Collate, exp.DPipe)
"""Operators (``exp.Binary`` to sqlglot) whose value is a string: not small."""

_SIZE_KEEPING_NAMES = frozenset({"mid", "lcase", "ucase", "ltrim", "rtrim", "ifnull", "binary"})
"""MySQL's spellings sqlglot may leave as anonymous functions, with the same bound as ``_KEEPS_SIZE``."""

_PYFORMAT = re.compile(r"%(?:s|\([A-Za-z_][A-Za-z0-9_]*\)s)")

_CACHED_CHARS = 20_000


def mysql_long_call(sql: str) -> str | None:
    """The search call of ``sql`` whose arguments the statement could make long enough to run for
    minutes inside one evaluation MariaDB/MySQL cannot interrupt, written out (clipped), or None.
    ``sql`` has passed ``lexing.mysql_reading_problem``, so sqlglot's reading of it is the server's.

    >>> mysql_long_call("SELECT name FROM customers WHERE LOWER(name) LIKE '%lima%'")
    >>> mysql_long_call("SELECT LOCATE(CONCAT(REPEAT('a', 100000), 'b'), REPEAT('a', 1000000))")
    "LOCATE(CONCAT(REPEAT('a', 100000), 'b'), REPEAT('a', 1000000))"
    >>> mysql_long_call("SELECT REPLACE(x, 'a', 'bb') FROM (SELECT CONCAT(name, name) AS x FROM c) AS d")
    "REPLACE(x, 'a', 'bb')"
    """
    if not _SEARCH_WORDS.search(sql):
        return None
    if len(sql) > _CACHED_CHARS:
        return _long_call(sql)
    return _cached_long_call(sql)


def long_call_refusal(sql: str) -> str | None:
    """The agent tools' refusal of ``sql`` on MySQL/MariaDB for ``mysql_long_call``'s reason, or None."""
    call = mysql_long_call(sql)
    if call is None:
        return None
    return (
        f"Refused: {call} searches a value this statement builds (REPEAT, LPAD, GROUP_CONCAT, a subquery, CONCAT "
        f"through a derived table, or literals over {MAX_LITERAL_CHARS:,} characters); the server cannot stop one "
        "such call once it runs, so this tool gives search functions (LOCATE, INSTR, REPLACE, LIKE, REGEXP, ...) "
        "only columns, short literals, and LOWER/TRIM/SUBSTRING/CAST/CONCAT of them."
    )


@lru_cache(maxsize=512)
def _cached_long_call(sql: str) -> str | None:
    return _long_call(sql)


def _long_call(sql: str) -> str | None:
    try:
        trees = [tree for tree in dialect_named("mysql").parse(sql) if tree is not None]
    except SqlglotError:
        try:  # PyMySQL's placeholders are not MySQL's syntax: read them as '?' (the caller's values)
            trees = [tree for tree in dialect_named("mysql").parse(_PYFORMAT.sub("?", sql)) if tree is not None]
        except SqlglotError:
            return "a statement this tool cannot read, around a search function"
    if len(trees) != 1:
        return None  # no statement, or several: the one-statement rule refuses those
    tree = trees[0]
    try:
        scopes = traverse_scope(tree) if isinstance(tree, exp.Query) else []
    except (SqlglotError, ValueError, KeyError):  # scopes sqlglot cannot build: no column can be followed
        return "a statement whose columns this tool cannot follow to their tables, around a search function"
    if not scopes:  # not a query (a write, with writes allowed): its columns are stored ones
        return next((_written(call) for call in tree.find_all(*_SEARCHES) if not _call_bounded(call, None)), None)
    for scope in scopes:
        for call in scope.find_all(*_SEARCHES):
            if not _call_bounded(call, scope):
                return _written(call)
    return None


def _written(call: exp.Expression) -> str:
    text = call.sql("mysql")
    return text if len(text) <= 200 else text[:197] + "..."


def _call_bounded(call: exp.Expression, scope: Scope | None) -> bool:
    arguments = [value for key, value in call.args.items() if key != "escape" and isinstance(value, exp.Expression)]
    literal_chars = sum(len(literal.this) for argument in arguments for literal in argument.find_all(exp.Literal))
    if literal_chars > MAX_LITERAL_CHARS:
        return False
    return all(_bounded(argument, scope, derived=False, seen=frozenset()) for argument in arguments)


def _bounded(node: exp.Expression, scope: Scope | None, *, derived: bool, seen: frozenset[int]) -> bool:
    """Whether ``node``'s value is no longer than a stored value or the statement's text allows.
    ``derived``: reached through a derived table's or CTE's column, where ``CONCAT`` is not bounded."""
    if isinstance(node, _SMALL) and not isinstance(node, _STRING_OPERATORS):
        return True
    if isinstance(node, exp.Column):
        return _column_bounded(node, scope, seen=seen)
    named = isinstance(node, exp.Anonymous) and str(node.this).lower() in _SIZE_KEEPING_NAMES
    concatenates = isinstance(node, (exp.Concat, exp.ConcatWs, exp.DPipe))
    if isinstance(node, _KEEPS_SIZE) or named or (concatenates and not derived) or _shortens(node):
        return all(_bounded(child, scope, derived=derived, seen=seen) for child in _children(node))
    return False


def _shortens(node: exp.Expression) -> bool:
    """A ``REPLACE`` whose replacement is a literal no longer than the literal it replaces
    (``REPLACE(name, ' ', '')``): its result is no longer than its first argument."""
    if not isinstance(node, exp.Replace):
        return False
    found, replacement = node.args.get("expression"), node.args.get("replacement")
    literals = isinstance(found, exp.Literal) and isinstance(replacement, exp.Literal)
    return literals and len(replacement.this) <= len(found.this)  # type: ignore[union-attr]


def _children(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Cast):
        return [node.this]  # the type is not a value
    return [
        child for child in node.iter_expressions() if not isinstance(child, (exp.DataType, exp.Var, exp.Identifier))
    ]


def _column_bounded(column: exp.Column, scope: Scope | None, *, seen: frozenset[int]) -> bool:
    """A stored column is bounded; a derived table's or CTE's column is as bounded as every expression
    that makes it (each branch of a set operation), followed without ``CONCAT``."""
    name, qualifier = column.name, column.table
    if not qualifier and scope is not None and isinstance(scope.expression, exp.Select):
        # ORDER BY, GROUP BY and HAVING may name the select list's aliases: the aliased value counts too.
        for selected in scope.expression.expressions:
            if isinstance(selected, exp.Alias) and selected.alias == name and id(selected) not in seen:
                if not _bounded(selected.this, scope, derived=False, seen=seen | {id(selected)}):
                    return False
    while scope is not None:
        sources = scope.sources
        if qualifier:
            if qualifier in sources:
                return _source_bounded(sources[qualifier], name, seen=seen)
        elif sources:
            return all(_source_bounded(source, name, seen=seen) for source in sources.values())
        scope = scope.parent
    return True  # an alias of the select list (ORDER BY, HAVING) or a name sqlglot did not place


def _source_bounded(source: object, name: str, *, seen: frozenset[int]) -> bool:
    if not isinstance(source, Scope):
        return True  # a stored table or a view: its values are the database's
    if id(source) in seen:
        return False  # a recursive CTE's own column: it may grow at each step
    seen = seen | {id(source)}
    branches = _branches(source)
    position = _position(source, branches[0], name)
    if position is None:
        return False
    for branch in branches:
        select = branch.expression
        if not isinstance(select, exp.Select) or position >= len(select.expressions):
            return False
        made = select.expressions[position]
        if isinstance(made, exp.Star) or (isinstance(made, exp.Column) and made.is_star):
            made = exp.column(name)  # the column of the branch's own sources
        if not _bounded(made, branch, derived=True, seen=seen):
            return False
    return True


def _branches(scope: Scope) -> list[Scope]:
    """The SELECTs of a set operation, at any depth (``a UNION b UNION c``), or the scope itself."""
    if not scope.set_operation_scopes:
        return [scope]
    return [branch for part in scope.set_operation_scopes for branch in _branches(part)]


def _position(source: Scope, first: Scope, name: str) -> int | None:
    """Where column ``name`` of ``source`` stands in its select lists: by the column list written after
    its name (``d(x, y)``), else by the first branch's names (a set operation's columns are its first
    SELECT's), a star standing for any name; None when nothing makes it."""
    parent = source.expression.parent
    alias = parent.args.get("alias") if parent is not None else None
    columns = [column.name for column in alias.columns] if isinstance(alias, exp.TableAlias) else []
    if name in columns:
        return columns.index(name)
    select = first.expression
    if not isinstance(select, exp.Select):
        return None
    for position, expression in enumerate(select.expressions):
        if expression.alias_or_name == name:
            return position
    stars = [position for position, expression in enumerate(select.expressions) if expression.is_star]
    return stars[0] if len(stars) == 1 else None

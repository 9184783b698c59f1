"""The DISTINCT patches as pure functions of SQL text: P1 adds it, P2 removes it.

Each rule decides on sqlglot's syntax tree but edits the caller's own text at token offsets, so
comments, parameters (``?``, ``:name``), quoting and every other byte the caller wrote stay as they
were. A rewrite is accepted only if re-parsing it gives exactly the original tree with the outermost
``distinct`` flag toggled; anything the parser cannot handle is left alone, with the reason.

Nothing here touches a database; the runtime checks that a rewrite changed only multiplicity live in
``patching``. Results are cached per (sql, dialect): text-to-SQL workloads repeat their statements.

>>> inject_distinct("SELECT t.a FROM t JOIN u ON u.t_id = t.id WHERE u.b = ?").sql
'SELECT DISTINCT t.a FROM t JOIN u ON u.t_id = t.id WHERE u.b = ?'
>>> inject_distinct("SELECT a FROM t JOIN u ON 1 LIMIT 3").reason
'has LIMIT/OFFSET: DISTINCT would change which rows survive the cut'
>>> remove_distinct("select distinct a from t -- keep me").sql
'select a from t -- keep me'
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import NamedTuple, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType  # type: ignore[attr-defined]  # sqlglot re-exports them

from .trees import dialect_named, release, text_of

__all__ = [
    "Rewrite",
    "append_columns",
    "inject_distinct",
    "is_read_only_query",
    "normalise_literals",
    "remove_distinct",
]


class Rewrite(NamedTuple):
    """A rule's answer for one statement."""

    sql: str | None
    """The rewritten SQL, or None when the rule does not apply."""

    reason: str
    """Why the rule applies (what it changed) or why it does not."""


# Aggregates that sqlglot does not model as AggFunc in every dialect; they parse as Anonymous.
_ANONYMOUS_AGGREGATES = frozenset({"total", "group_concat", "string_agg", "json_group_array", "json_group_object"})
_WRITE_NODES = (exp.DML, exp.Into, exp.Lock)


class _Query(NamedTuple):
    root: exp.Expression
    select: exp.Select
    tokens: list[Token]
    select_index: int  # position in ``tokens`` of the outermost SELECT keyword


def inject_distinct(sql: str, dialect: str = "sqlite") -> Rewrite:
    """P1: add DISTINCT to the outermost SELECT, unless the query's structure rules it out.

    Exemptions, each because duplicates there are not join amplification or DISTINCT would change
    more than multiplicity: compound queries (``UNION ALL`` asks for duplicates), ``LIMIT``/``OFFSET``
    (the cut would keep other rows), ``GROUP BY`` (each row is its own group), aggregate queries, and
    queries already ``DISTINCT``.
    """
    too_long = _too_long(sql)  # refused before the cache: its keys would hold the whole text
    return Rewrite(None, too_long) if too_long else _inject_distinct(sql, dialect)


def remove_distinct(sql: str, dialect: str = "sqlite") -> Rewrite:
    """P2: remove the outermost DISTINCT, if the paper's safeguards allow it.

    Safeguards: no aggregate (window aggregates included) and no ``GROUP BY`` in the outermost query;
    also no ``LIMIT``/``OFFSET``, for the same reason as P1. Whether the rewrite is *committed* is
    decided at runtime from the rows it returns.
    """
    too_long = _too_long(sql)
    return Rewrite(None, too_long) if too_long else _remove_distinct(sql, dialect)


@lru_cache(maxsize=1024)
def _inject_distinct(sql: str, dialect: str) -> Rewrite:
    query = _parse_query(sql, dialect)
    if isinstance(query, str):
        return Rewrite(None, query)
    try:
        return _injected(sql, dialect, query)
    finally:
        release(query.root)


def _injected(sql: str, dialect: str, query: _Query) -> Rewrite:
    select = query.select
    if select.args.get("distinct") is not None:
        return Rewrite(None, "already DISTINCT")
    if _next_token_is(query, TokenType.ALL):
        return Rewrite(None, "SELECT ALL asks for duplicates explicitly")
    exemption = _cut_or_grouping(query) or _aggregate_in_outer_scope(select, include_windows=False)
    if not exemption and dialect in _DISTINCT_ORDER_STRICT:
        exemption = _order_outside_select_list(select, dialect)
    if exemption:
        return Rewrite(None, exemption)
    keyword = query.tokens[query.select_index]
    insert_at = keyword.end + 1
    word = "distinct" if keyword.text.islower() else "DISTINCT"
    rewritten = f"{sql[:insert_at]} {word}{sql[insert_at:]}"
    if not _reparses_as(rewritten, dialect, query.root, distinct=True):
        return Rewrite(None, "could not place DISTINCT safely in the original text")
    return Rewrite(rewritten, "DISTINCT added to the outermost SELECT")


@lru_cache(maxsize=1024)
def _remove_distinct(sql: str, dialect: str) -> Rewrite:
    query = _parse_query(sql, dialect)
    if isinstance(query, str):
        return Rewrite(None, query)
    try:
        return _removed(sql, dialect, query)
    finally:
        release(query.root)


def _removed(sql: str, dialect: str, query: _Query) -> Rewrite:
    distinct = query.select.args.get("distinct")
    if distinct is None:
        return Rewrite(None, "no outermost DISTINCT")
    if distinct.args.get("on") is not None:
        return Rewrite(None, "DISTINCT ON picks one row per key; removing it changes the set")
    exemption = _cut_or_grouping(query) or _aggregate_in_outer_scope(query.select, include_windows=True)
    if exemption:
        return Rewrite(None, exemption)
    if not _next_token_is(query, TokenType.DISTINCT):
        return Rewrite(None, "could not find the DISTINCT keyword in the original text")
    keyword = query.tokens[query.select_index + 1]
    before, after = sql[: keyword.start], sql[keyword.end + 1 :]
    if before[-1:].isspace():
        after = after.lstrip(" \t")
        if after[:1] in ("\n", "\r"):
            before = before.rstrip(" \t")
    rewritten = before + after
    if not _reparses_as(rewritten, dialect, query.root, distinct=False):
        return Rewrite(None, "could not remove DISTINCT safely from the original text")
    return Rewrite(rewritten, "DISTINCT removed from the outermost SELECT")


def append_columns(sql: str, columns: tuple[str, ...], dialect: str = "sqlite") -> Rewrite:
    """The statement with ``columns`` (SQL expressions) appended to its outermost select list, each under
    the alias ``__gs_id0``, ``__gs_id1``, ...: what the join-copy check runs to read the projected tables'
    row identities next to the caller's columns (``guarded_sqlite._rules.patching``).

    The text is edited just before the outermost ``FROM``, so everything the caller wrote stays as written,
    and the rewrite is accepted only if it parses as the original tree with those items appended.

    >>> append_columns("SELECT c.city FROM customers c JOIN orders o ON o.customer_id = c.id", ('"c"."rowid"',)).sql
    'SELECT c.city, "c"."rowid" AS "__gs_id0" FROM customers c JOIN orders o ON o.customer_id = c.id'
    >>> append_columns("SELECT DISTINCT a FROM t", ('"t"."rowid"',)).reason
    'already DISTINCT'
    """
    too_long = _too_long(sql)
    return Rewrite(None, too_long) if too_long else _append_columns(sql, columns, dialect)


@lru_cache(maxsize=1024)
def _append_columns(sql: str, columns: tuple[str, ...], dialect: str) -> Rewrite:
    if not columns:
        return Rewrite(None, "no columns to append")
    query = _parse_query(sql, dialect)
    if isinstance(query, str):
        return Rewrite(None, query)
    try:
        return _appended(sql, columns, dialect, query)
    finally:
        release(query.root)


def _appended(sql: str, columns: tuple[str, ...], dialect: str, query: _Query) -> Rewrite:
    if query.select.args.get("distinct") is not None:
        return Rewrite(None, "already DISTINCT")  # appended columns would change what DISTINCT merges
    at = _end_of_select_list(query)
    if at is None:
        return Rewrite(None, "could not find the outermost FROM keyword")
    items = ", ".join(f'{column} AS "__gs_id{n}"' for n, column in enumerate(columns))
    rewritten = f"{sql[:at]}, {items}{sql[at:]}"
    try:
        with quiet_sqlglot():
            appended = [
                sqlglot.parse_one(f'SELECT {column} AS "__gs_id{n}"', read=dialect).expressions[0]
                for n, column in enumerate(columns)
            ]
    except (SqlglotError, RecursionError) as error:
        return Rewrite(None, f"a column to append does not parse: {_first_line(error)}")
    expected = query.root.copy()
    outermost = _outermost(expected)
    outermost.set("expressions", [*outermost.expressions, *appended])
    if not _reparses_to(rewritten, dialect, expected):
        return Rewrite(None, "could not append the columns safely to the original text")
    return Rewrite(rewritten, f"{len(columns)} column(s) appended to the outermost select list")


def _end_of_select_list(query: _Query) -> int | None:
    """Character offset just after the last token of the outermost select list (before any comment
    that precedes its FROM keyword), or None when that SELECT has no FROM."""
    depth = 0
    tokens = query.tokens
    for index in range(query.select_index + 1, len(tokens)):
        kind = tokens[index].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
            if depth < 0:
                return None
        elif kind == TokenType.FROM and depth == 0:
            return int(tokens[index - 1].end) + 1 if index > query.select_index + 1 else None
    return None


_QUERY_STARTS = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.L_PAREN})
_WRITE_TOKENS = frozenset(
    getattr(TokenType, name)
    for name in (
        "INSERT",
        "UPDATE",
        "DELETE",
        # Not REPLACE: a REPLACE that writes says INTO (a token below); elsewhere it is SQLite's and
        # PostgreSQL's replace() function, a column named replace, or DuckDB's SELECT * REPLACE (...).
        "MERGE",
        "CREATE",
        "DROP",
        "ALTER",
        "ATTACH",
        "DETACH",
        "PRAGMA",
        "VACUUM",
        "ANALYZE",
        "INTO",
        "RETURNING",
        "TRUNCATE",
        "COMMAND",
    )
    if hasattr(TokenType, name)
)


def is_read_only_query(sql: str, dialect: str = "sqlite") -> bool:
    """Whether ``sql`` reads as a query and nothing else, judged on tokens so that SQL with a syntax
    error (which a parser would reject) can still be classified. Used to decide whether a failed or
    flagged statement may be replaced by a candidate's rows: a write never is."""
    return not _too_long(sql) and _is_read_only_query(sql, dialect)


@lru_cache(maxsize=1024)
def _is_read_only_query(sql: str, dialect: str) -> bool:
    try:
        tokens = dialect_named(dialect).tokenize(sql)
    except SqlglotError:
        return False
    if not tokens or tokens[0].token_type not in _QUERY_STARTS:
        return False
    return not any(token.token_type in _WRITE_TOKENS for token in tokens)


# Tokens that continue a parameter's name rather than start a literal: ?1 and $1 (and :1 in SQLite)
# tokenize as a prefix followed by a NUMBER.
_PARAMETER_PREFIXES = frozenset({TokenType.PLACEHOLDER, TokenType.PARAMETER, TokenType.COLON})


def normalise_literals(sql: str, dialect: str = "sqlite", *, double_quoted: bool = False) -> str:
    """``sql`` with every literal replaced by ``?``, every other character as written: what may be
    logged of a caller's SQL at INFO, since literals can be secrets (tokens, e-mail addresses).

    Literals are the tokens sqlglot's parser reads as literal values in ``dialect``: strings (with any
    prefix, such as ``X'..'``, ``N'..'``, ``E'..'``, and dollar-quoted ones), numbers, bit, byte and hex
    strings. Parameters (``?``, ``?1``, ``:name``, ``$1``, ``%s``), identifiers (quoted ones too),
    keywords, ``NULL``/``TRUE``/``FALSE`` and comments are kept. Text that does not tokenize gives
    ``<SQL not shown: N characters>``, never the text itself. A number right after ``:`` is kept as a
    parameter name, so a slice bound such as ``x[1:2]``'s 2 is not replaced. A word written right after
    a number is part of it (DuckDB's ``0xFF`` and ``0b101``, PostgreSQL's ``1_000``, which sqlglot reads
    as a number and a name) and goes with it.

    ``double_quoted=True`` replaces every ``"..."`` token as well: SQLite reads one that names no column
    as a string (``WHERE email = "ana@example.com"``), which only the schema could tell apart from a
    quoted name, so the audit log hides both.

    >>> normalise_literals("SELECT name FROM t WHERE token = 'tok_9f8e' AND n > 10 AND id = ?")
    'SELECT name FROM t WHERE token = ? AND n > ? AND id = ?'
    >>> normalise_literals("SELECT 'unterminated")
    '<SQL not shown: 20 characters>'
    >>> normalise_literals('SELECT "name" FROM t WHERE email = "a@b.c" AND k = 0xFF', "duckdb", double_quoted=True)
    'SELECT ? FROM t WHERE email = ? AND k = ?'
    """
    if _too_long(sql):  # not kept in the cache (see _too_long)
        return _normalise_literals.__wrapped__(sql, dialect, double_quoted)
    return _normalise_literals(sql, dialect, double_quoted)


@lru_cache(maxsize=256)
def _normalise_literals(sql: str, dialect: str, double_quoted: bool) -> str:
    try:
        sqlglot_dialect = dialect_named(dialect)
        tokens = sqlglot_dialect.tokenize(sql)
    except Exception:  # a tokenizer error or an unknown dialect: nothing of the text, not even the error's excerpt
        return f"<SQL not shown: {len(sql)} characters>"
    parser = sqlglot_dialect.parser_class
    literals = frozenset(parser.STRING_PARSERS) | frozenset(parser.NUMERIC_PARSERS)
    pieces: list[str] = []
    copied = 0  # sql[:copied] is already in pieces
    previous: Token | None = None
    replaced: Token | None = None  # the last token replaced by "?"
    for token in tokens:
        kind = token.token_type
        adjacent = previous is not None and previous.end + 1 == token.start
        is_parameter_name = (
            kind == TokenType.NUMBER
            and adjacent
            and previous is not None
            and previous.token_type in _PARAMETER_PREFIXES
        )
        if replaced is not None and replaced is previous and adjacent and replaced.token_type == TokenType.NUMBER:
            if sql[token.start].isalnum() or sql[token.start] == "_":  # 0xFF: the rest of the number
                copied = token.end + 1
                replaced = previous = token
                continue
        quoted = double_quoted and sql[token.start] == '"' and kind == TokenType.IDENTIFIER
        if (kind in literals and not is_parameter_name) or quoted:
            pieces.append(sql[copied : token.start])
            pieces.append("?")
            copied = token.end + 1
            replaced = token
        previous = token
    pieces.append(sql[copied:])
    return "".join(pieces)


MAX_PARSED_CHARS = 20_000
"""Longest SQL the rules parse. sqlglot needs about 13 ms per KB on long IN-lists, outside any
statement time limit; a longer statement is left as it is, with this reason in the report."""


def _too_long(sql: str) -> str:
    """Why ``sql`` is not parsed, if it is longer than ``MAX_PARSED_CHARS``; else "". Checked before
    any cache keyed by the SQL text, so that the caches never keep such texts (1,024 statements of a
    megabyte each would be a gigabyte)."""
    if len(sql) > MAX_PARSED_CHARS:
        return f"SQL longer than {MAX_PARSED_CHARS:,} characters is not analysed (parsing time is not bounded)"
    return ""


def _parse_query(sql: str, dialect: str) -> _Query | str:
    """The statement's tree and tokens if it is one read-only SELECT, else the reason it is not."""
    too_long = _too_long(sql)
    if too_long:
        return too_long
    try:
        sqlglot_dialect = dialect_named(dialect)
        tokens = [t for t in sqlglot_dialect.tokenize(sql)]
    except SqlglotError as error:
        return f"could not tokenize: {_first_line(error)}"
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        tokens.pop()
    if not tokens:
        return "empty statement"
    if any(t.token_type == TokenType.SEMICOLON for t in tokens):
        return "more than one statement"
    if tokens[0].token_type not in (TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN):
        return f"not a SELECT statement (starts with {tokens[0].text.upper()})"
    try:
        with quiet_sqlglot():
            trees = sqlglot_dialect.parser().parse(tokens, sql)
    except SqlglotError as error:
        return f"sqlglot could not parse it: {_first_line(error)}"
    except RecursionError:  # sqlglot's parser recurses per nesting level: ~50 parentheses can be too many
        return "nested too deeply for sqlglot to parse (Python's recursion limit)"
    reason = _not_one_select(trees)
    if reason:
        release(trees)
        return reason
    root = cast(exp.Expression, trees[0])
    index = _outermost_select_token(tokens)
    if index is None:
        release(trees)
        return "could not find the outermost SELECT keyword"
    return _Query(root, cast(exp.Select, _outermost(root)), tokens, index)


def _not_one_select(trees: list[exp.Expr | None]) -> str:
    """Why the parsed statement is not one read-only SELECT; "" if it is."""
    if len(trees) != 1 or trees[0] is None:
        return "not a single statement"
    root = cast(exp.Expression, trees[0])
    if root.find(*_WRITE_NODES) is not None:
        return "statement may write (DML, INTO or a row lock)"
    select = _outermost(root)
    if isinstance(select, exp.SetOperation):
        kind = type(select).__name__.upper()
        if isinstance(select, exp.Union) and not select.args.get("distinct"):
            return "compound query: UNION ALL keeps duplicates on purpose"
        return f"compound query ({kind})"
    if not isinstance(select, exp.Select):
        return f"not a SELECT statement ({type(select).__name__})"
    return ""


def _outermost(root: exp.Expression) -> exp.Expression:
    """The query inside any wrapping parentheses (PostgreSQL allows ``(SELECT ...)`` statements)."""
    node = root
    while isinstance(node, exp.Subquery):
        node = node.this
    return node


def _outermost_select_token(tokens: list[Token]) -> int | None:
    """Index of the first SELECT keyword at the shallowest bracket depth any SELECT has.

    CTE bodies sit inside brackets, so this skips a WITH clause. Odd layouts that fool it are caught
    by the re-parse check, never silently mis-patched.
    """
    depth, best, best_depth = 0, None, None
    for index, token in enumerate(tokens):
        kind = token.token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        elif kind == TokenType.SELECT and (best_depth is None or depth < best_depth):
            best, best_depth = index, depth
    return best


def _next_token_is(query: _Query, kind: TokenType) -> bool:
    following = query.select_index + 1
    return following < len(query.tokens) and query.tokens[following].token_type == kind


def _cut_or_grouping(query: _Query) -> str | None:
    """Exemption shared by both rules: a LIMIT/OFFSET cut or a GROUP BY on the outermost query."""
    node: exp.Expression = query.root
    while True:
        if node.args.get("limit") is not None or node.args.get("offset") is not None:
            return "has LIMIT/OFFSET: DISTINCT would change which rows survive the cut"
        if not isinstance(node, exp.Subquery):
            break
        node = node.this
    if query.select.args.get("group") is not None:
        return "has GROUP BY: each output row is a separate group"
    return None


def _aggregate_in_outer_scope(select: exp.Select, include_windows: bool) -> str | None:
    """Reason naming an aggregate used by the outermost query itself (not by its subqueries)."""
    roots = [*select.expressions, select.args.get("having"), select.args.get("order")]
    for root in roots:
        if root is None:
            continue
        for node in root.walk(prune=lambda n: _prunes_scope(n, include_windows)):
            if _is_aggregate(node):
                return f"aggregate query ({_function_name(node)})"
    return None


_DISTINCT_ORDER_STRICT = frozenset({"postgres", "mysql"})
"""Dialects whose engine rejects ``SELECT DISTINCT ... ORDER BY`` an expression outside the select list."""


def _order_outside_select_list(select: exp.Select, dialect: str) -> str | None:
    """Reason naming an ORDER BY key that is neither an output column, an output alias, nor a position."""
    order = select.args.get("order")
    if order is None:
        return None
    outputs = select.expressions
    if any(isinstance(o, exp.Star) or (isinstance(o, exp.Column) and isinstance(o.this, exp.Star)) for o in outputs):
        return None  # the key may be one of the columns the star expands to
    aliases = {o.alias.lower() for o in outputs if o.alias}
    bodies = [o.unalias() for o in outputs]
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Literal) and not key.is_string:
            continue
        if any(key == body for body in bodies):
            continue
        if isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
            continue
        return (
            f"ORDER BY {text_of(key, dialect)} is not in the select list, which {dialect} rejects under SELECT DISTINCT"
        )
    return None


def _prunes_scope(node: exp.Expression, include_windows: bool) -> bool:
    if isinstance(node, (exp.Subquery, exp.Select, exp.SetOperation)):
        return True
    return isinstance(node, exp.Window) and not include_windows


def _is_aggregate(node: exp.Expression) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and str(node.name).lower() in _ANONYMOUS_AGGREGATES


def _function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    if isinstance(node, exp.Func):
        return str(node.sql_name())
    return type(node).__name__.upper()


def _reparses_as(rewritten: str, dialect: str, original: exp.Expression, distinct: bool) -> bool:
    """Whether ``rewritten`` parses to ``original`` with only the outermost DISTINCT toggled."""
    expected = original.copy()
    _outermost(expected).set("distinct", exp.Distinct() if distinct else None)
    return _reparses_to(rewritten, dialect, expected)


def _reparses_to(rewritten: str, dialect: str, expected: exp.Expression) -> bool:
    """Whether ``rewritten`` parses to exactly ``expected`` (a tree made for the comparison: released)."""
    try:
        with quiet_sqlglot():
            trees = sqlglot.parse(rewritten, read=dialect)
    except (SqlglotError, RecursionError):
        release(expected)
        return False
    # A comment after the final semicolon comes back as a separate Semicolon node: not a statement.
    statements = [tree for tree in trees if tree is not None and not isinstance(tree, exp.Semicolon)]
    same = len(statements) == 1 and statements[0] == expected
    release(trees, expected)
    return same


def _first_line(error: Exception) -> str:
    # sqlglot's later lines repeat the SQL with terminal highlighting: the first says what is wrong.
    return str(error).splitlines()[0] if str(error) else type(error).__name__


class _QuietThreads(logging.Filter):
    """Drops the records of threads inside ``quiet_sqlglot``; every other thread's records pass.

    Filters run in the thread that logs, so a per-thread depth says whether the record comes from our
    own parse. Nested and concurrent uses need no lock: each thread only touches its own counter.
    """

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def depth(self) -> int:
        depth: int = getattr(self._local, "depth", 0)
        return depth

    def enter(self) -> None:
        self._local.depth = self.depth() + 1

    def exit(self) -> None:
        self._local.depth = self.depth() - 1

    def filter(self, record: logging.LogRecord) -> bool:
        return self.depth() == 0


_QUIET = _QuietThreads()
_INSTALLING = threading.Lock()


class quiet_sqlglot:
    """Silence sqlglot's logger for the current thread while we parse: its fallback warnings are not
    the caller's concern.

    The application's own sqlglot logging, in this thread outside the block and in every other thread,
    is left alone: nothing shared is flipped and restored (``Logger.disabled`` is process-wide, and two
    threads restoring it out of order left it disabled for good). Instead one filter on the sqlglot
    logger drops the records of threads inside the block.
    """

    _logger = logging.getLogger("sqlglot")

    def __enter__(self) -> None:
        # Checked each time rather than once, so an application that reset the logger's filters gets
        # the filter back; the lock keeps two threads from both adding it.
        if _QUIET not in self._logger.filters:
            with _INSTALLING:
                self._logger.addFilter(_QUIET)  # a no-op if another thread just added it
        _QUIET.enter()

    def __exit__(self, *exc_info: object) -> None:
        _QUIET.exit()

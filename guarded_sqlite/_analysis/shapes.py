"""One aggregate plan per statement *shape* (issue 44 item 2): a statement new only in its literals is
served the plan of the first statement of its shape, with its own literals written back.

Text-to-SQL sends statements a connection has never seen, but mostly in shapes it has: the same joins,
groups and filters with other constants (``WHERE c.id > 17``, ``WHERE c.region = 'north'``). Planning
one costs milliseconds (parse, analysis, the corrected and check queries generated); the shape's plan,
kept, costs a token scan and a string substitution.

How, exactly:

* ``read_shape`` scans the text once (no parser): each plain literal (an integer of at most 15 digits,
  a decimal ``digits.digits``, a ``'string'`` without backslash or control characters) is a *slot*; the
  rest (words, quoted names, comments, other literals: ``1e5``, ``x'0a'``, ``.5``) is kept as written.
  Comments, strings and quoted names are read by the aggregate pre-screen's own patterns
  (``guarded_sqlite._core.probe``), so the two readings agree on where SQL is. The shape's key is the
  text with each slot replaced by its *kind* (integer, decimal, string): another kind is another shape.
  On PostgreSQL and MySQL/MariaDB a text this scan would read otherwise than the engine has no shape:
  a backslash anywhere (MySQL's escapes, PyMySQL's ``\'`` among them; PostgreSQL's ``E'..'``), a
  dollar quote, a comment inside a comment (PostgreSQL's nest), MySQL's ``#`` comments, a ``--`` MySQL
  does not read as one (``5--3``), executable comments and hints; a prefixed string (``U&'..'``,
  ``_utf8mb4'..'``) and MySQL's ``"double-quoted"`` strings are kept as written. Parameters (``?``,
  ``$1``, ``%s``, ``%(name)s``) are words: never slots.
* ``free_slots`` decides, on the parse of the text with every slot replaced by a marker literal of its
  kind, which slots the plan may take as opaque: an operand of a comparison (``=``, ``<``, ``IN``,
  ``BETWEEN``, ``LIKE``, ...) whose other operand is not a literal, in a WHERE or HAVING condition
  combined by AND, OR and NOT only. Such a literal is, to the analysis, what a parameter there is: a
  constant (a pin, a bound). Every other slot is *fixed*: its value is part of the key. So a literal in
  a join condition, a select item, an aggregate's argument, a function call (``date('now')``), a CASE,
  GROUP BY or ORDER BY (positions), LIMIT or OFFSET, or one sqlglot folds (``'a' 'b'``) is never shared.
  The free slots depend on the key alone (the same tokens parse to the same tree). A literal's kind is
  its marker's: PostgreSQL types ``5`` (integer), ``5.5`` (numeric) and ``'5'`` (unknown) apart, and
  each statement's own literals are what the engine reads in the queries the plan makes (markers are
  the analysis's only: it reads no literal's value or type where it takes it as opaque).
* The plan is made on the text with the free slots as markers (``marked``) and kept as any statement's
  (``catalog``: on SQLite reused while the catalog rows it rests on are unchanged, made again otherwise;
  on DuckDB, PostgreSQL and MySQL/MariaDB kept with the catalog snapshot's verdicts, which DDL through
  the connection drops, as another search path or database does). The free markers must parse, in that
  text, as the opaque literals they were read as, or the plan is not shared. Where the tables the
  statement reads have a unique partial index (a WHERE literal can imply its predicate, which makes a
  key; PostgreSQL's catalog reports them, MySQL has none) the plan is not shared either: ``shareable``
  says so and the statement is planned as written.
* ``substituted`` writes each free slot's own text back in place of its marker, in every text of the
  plan (the literal's text as written: sqlglot writes these forms back unchanged).

Nothing here changes what is planned for a statement seen as written: a shape that cannot be read
(an unterminated literal, the markers' own text in it, no free slot) is planned as before.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

from sqlglot import exp

__all__ = [
    "SHAPES",
    "Shape",
    "ShapeCache",
    "free_slots",
    "marked",
    "read_shape",
    "shaped_text",
    "shareable",
    "substituted",
]

T = TypeVar("T")

SHAPES = 256
"""Shapes kept per connection, least recently used dropped first."""

SERVED = 64
"""Texts whose plan, written back from their shape's, is kept per connection (``ShapeCache.serve``)."""

# One pass: a comment, a string, a quoted name, a number, or a word (a name, a keyword, a parameter,
# kept whole so that no number is read out of ``t1``, ``?1`` or ``0x1f``); what starts a comment, a
# string or a quoted name it cannot end (``bad``) ends the shape. The pre-screen
# (``guarded_sqlite._core.probe``) reads comments, strings and quoted names by the same delimiters.
_TOKEN = re.compile(
    r"(?P<comment>--[^\n]*|/\*.*?\*/)"
    r"|(?P<string>'(?:[^']|'')*')"
    r"|(?P<quoted>\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\])"
    r"|(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?![\w.$]))"
    r"|(?P<word>[\w$.?:@#]+)"
    r"|(?P<bad>/\*|['\"`\[])",
    re.DOTALL,
)
_INTEGER = re.compile(r"(?:0|[1-9]\d{0,14})")
_DECIMAL = re.compile(r"(?:0|[1-9]\d{0,14})\.\d{1,15}")
_PLAIN_STRING = re.compile(r"'(?:[^'\\\x00-\x1f]|'')*'")
_MARKER_ROOTS = ("91827364", "__gs_l")
_KEY_MARK = "\x01"
_DOLLAR_QUOTE = re.compile(r"\$(?:[A-Za-z_]\w*)?\$")
# What this scan would read otherwise than the engine reads it, where that engine's statements get no
# shape. A backslash: MySQL's strings escape with it (PyMySQL writes a quote in a value as \'), and so
# do PostgreSQL's E'..' strings. MySQL also comments with # (to the end of the line), reads -- as a
# comment only before a space or a control character (5--3 is 5 - -3), and runs /*! ... */ (an
# executable comment) and reads /*+ ... */ (an optimizer hint).
_UNREAD = {
    "postgres": re.compile(r"\\"),
    "mysql": re.compile(r"[\\#]|--(?![\x00-\x20])|/\*[!+]|/\*M!"),
}
_NESTING = frozenset({"postgres", "duckdb"})
"""The dialects whose block comments nest (``/* a /* b */ c */`` is one comment): a comment holding
``/*`` gives no shape there."""


class Shape(NamedTuple):
    """A statement read as its shape: the text around the slots, the slots' texts and their kinds."""

    key: str
    """The text with each slot written as its kind (``\\x01i``, ``\\x01d``, ``\\x01s``)."""
    parts: tuple[str, ...]
    """The text between the slots (one more than there are slots)."""
    slots: tuple[str, ...]
    """Each slot's literal as written."""
    kinds: str
    """Each slot's kind: ``i`` integer, ``d`` decimal, ``s`` string."""


def read_shape(sql: str, dialect: str = "sqlite") -> Shape | None:
    """``sql`` read as a shape, or None where it has no slot, an unterminated string, comment or quoted
    name, or the text of the markers (which could not then be told from its own literals); on DuckDB,
    PostgreSQL and MySQL (``dialect``), also where it may hold a dollar-quoted string, which this scan
    does not read, and on PostgreSQL and MySQL where it holds what the module docstring lists.

    >>> shape = read_shape("SELECT SUM(o.v) FROM o JOIN c ON c.id = o.c WHERE c.id > 17 AND c.r = 'n'")
    >>> shape.slots, shape.kinds
    (('17', "'n'"), 'is')
    >>> read_shape("SELECT SUM(o.v) FROM o JOIN c ON c.id = o.c WHERE c.id > 18 AND c.r = 's'").key == shape.key
    True
    >>> read_shape("SELECT SUM(o.v) FROM o JOIN c ON c.id = o.c WHERE c.id > 1.5 AND c.r = 's'").key == shape.key
    False
    >>> read_shape("SELECT x FROM t1 WHERE a = ?1 AND b = x'0a' AND c = 1e5") is None
    True
    """
    # A pure reading of the text, kept for the last statements read (a statement repeated, a paging
    # query run page after page, is read once); a long text is read each time rather than held.
    return _read_kept(sql, dialect) if len(sql) <= _KEPT_LENGTH else _read(sql, dialect)


_KEPT_LENGTH = 4096


def _read(sql: str, dialect: str) -> Shape | None:
    if _KEY_MARK in sql or any(root in sql for root in _MARKER_ROOTS):
        return None
    if dialect != "sqlite" and _DOLLAR_QUOTE.search(sql):
        return None
    unread = _UNREAD.get(dialect)
    if unread is not None and unread.search(sql):
        return None  # text this scan would read otherwise than the engine (see ``_UNREAD``)
    nested = dialect in _NESTING
    sqlite = dialect == "sqlite"
    parts: list[str] = []
    slots: list[str] = []
    kinds: list[str] = []
    at = 0
    for match in _TOKEN.finditer(sql):
        group = match.lastgroup
        if group == "bad":
            return None  # an unterminated string, comment or quoted name
        text = match.group()
        kind = ""
        if group == "comment" and nested and "/*" in text[2:]:
            return None  # a comment inside a comment: it ends at a later ``*/`` than this scan's
        if group == "number":
            kind = "i" if _INTEGER.fullmatch(text) else "d" if _DECIMAL.fullmatch(text) else ""
        elif group == "string":
            start = match.start()
            # x'0a', E'..', N'..', _utf8mb4'..'; off SQLite also PostgreSQL's U&'..' (& is its prefix)
            prefixed = start > 0 and (sql[start - 1].isalnum() or sql[start - 1] in ("_$" if sqlite else "_$&"))
            # 'now' makes a date function read the clock (``sqltree.rerun_hazard``): never a slot.
            if not prefixed and _PLAIN_STRING.fullmatch(text) and text[1:-1].strip().lower() != "now":
                kind = "s"
        if kind:
            parts.append(sql[at : match.start()])
            slots.append(text)
            kinds.append(kind)
            at = match.end()
    if not slots:
        return None
    parts.append(sql[at:])
    key = "".join(part + _KEY_MARK + kind for part, kind in zip(parts, kinds)) + parts[-1]
    return Shape(key, tuple(parts), tuple(slots), "".join(kinds))


_read_kept = functools.lru_cache(maxsize=512)(_read)


def marker(index: int, kind: str) -> str:
    """The literal standing for slot ``index`` of ``kind`` in the text the plan is made on."""
    if kind == "i":
        return f"918273645{index:05d}"
    if kind == "d":
        return f"918273646{index:05d}.25"
    return f"'__gs_l{index}'"


def marked(shape: Shape, free: frozenset[int] | None = None) -> str:
    """The statement with the slots in ``free`` (all where None) written as markers, the others as written."""
    out = [shape.parts[0]]
    for index, (slot, kind) in enumerate(zip(shape.slots, shape.kinds)):
        out.append(marker(index, kind) if free is None or index in free else slot)
        out.append(shape.parts[index + 1])
    return "".join(out)


_READ_AS_ENGINES = frozenset({"sqlite", "duckdb", "postgres", "mysql"})
"""The dialects whose texts ``read_shape`` reads as their engines do (or not at all): not ClickHouse's,
whose strings escape with a backslash."""


def shaped_text(sql: str, dialect: str = "sqlite") -> str:
    """``sql`` with every slot written as its marker (``marked``), or ``sql`` itself where it has no
    shape, is longer than the texts whose shapes are kept, or is of a dialect not listed in
    ``_READ_AS_ENGINES``. A token-level reading that reads no literal's value (``rewrite.
    is_read_only_query``) then reads a text of one shape once: the markers are literals of the slots'
    kinds, so every other token, and their order, are ``sql``'s own.

    >>> shaped_text("SELECT SUM(v) FROM o WHERE id > 17") == shaped_text("SELECT SUM(v) FROM o WHERE id > 18")
    True
    >>> shaped_text("SELECT SUM(v) FROM o WHERE id > 1e5")
    'SELECT SUM(v) FROM o WHERE id > 1e5'
    """
    if len(sql) > _KEPT_LENGTH or dialect not in _READ_AS_ENGINES:
        return sql
    return _shaped_text(sql, dialect)


@functools.lru_cache(maxsize=512)
def _shaped_text(sql: str, dialect: str) -> str:
    # Kept per text, as its shape is: a statement repeated (c13's paging query) finds its text in one
    # lookup rather than joining the marked text again (a microsecond, a tenth of c13's raw time).
    shape = read_shape(sql, dialect)
    return sql if shape is None else marked(shape)


# Comparisons whose literal operand is, to the analysis, a constant like a parameter (a pin, a bound).
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between)
_COMBINING = (exp.And, exp.Or, exp.Not, exp.Paren)


def free_slots(tree: exp.Expression, shape: Shape) -> frozenset[int]:
    """The slots of ``shape`` that the plan may take as opaque, read from ``tree``, the parse of
    ``marked(shape)`` (see the module docstring); a marker found elsewhere, or twice, fixes its slot."""
    indexes = {marker(index, kind).strip("'"): index for index, kind in enumerate(shape.kinds)}
    seen: dict[int, int] = {}
    free: set[int] = set()
    for node in tree.find_all(exp.Literal):
        index = indexes.get(node.this)
        if index is None or node.is_string != (shape.kinds[index] == "s"):
            continue
        seen[index] = seen.get(index, 0) + 1
        if _opaque(node):
            free.add(index)
    return frozenset(index for index in free if seen[index] == 1)


def _opaque(literal: exp.Literal) -> bool:
    """Whether ``literal`` is a comparison's operand against a non-literal, in a WHERE or HAVING
    condition that reaches it through AND, OR, NOT and parentheses only."""
    node: exp.Expression = literal
    parent = node.parent
    if isinstance(parent, exp.Neg):
        node, parent = parent, parent.parent
    if not isinstance(parent, _COMPARISONS):
        return False
    if isinstance(parent, exp.In):
        if parent.args.get("query") is not None or node not in parent.expressions:
            return False
        others: list[Any] = [parent.this]
    elif isinstance(parent, exp.Between):
        if node is parent.this:
            return False
        others = [parent.this]
    else:
        if parent.args.get("escape") is not None:
            return False
        others = [parent.this if node is parent.expression else parent.expression]
    if any(isinstance(other, (exp.Literal, exp.Neg, exp.Null)) or other is None for other in others):
        return False
    above = parent.parent
    while isinstance(above, _COMBINING):
        above = above.parent
    return isinstance(above, (exp.Where, exp.Having))


def shareable(tree: exp.Expression, facts: Any) -> bool:
    """Whether a plan made on ``tree`` with markers may serve other literals: not where a table it
    names has a unique partial index (a WHERE literal may imply its predicate and so make a key).

    ``facts`` may hold more than the statement's tables (PostgreSQL's snapshot holds the database's):
    each table name in ``tree`` is looked up as the analysis looks it up, a CTE's name too (a table
    of that name may be read where the CTE is not in scope); where one is a view, whose tables the
    analysis reads through, every table of ``facts`` is asked."""
    named = []
    for node in tree.find_all(exp.Table):
        if not isinstance(node.this, exp.Identifier) or not node.name:
            continue  # a table function, a subquery's alias: no catalog table
        table = facts.table(node.name, node.db or None)
        if table is not None and table.is_view:
            return not any(table.partial_keys for table in facts.tables)
        if table is not None:
            named.append(table)
    return not any(table.partial_keys for table in named)


def substituted(value: Any, shape: Shape, free: frozenset[int]) -> Any:
    """``value`` (a plan, or anything in one) with every marker of a free slot written back as the slot's
    own text, in every string it holds; raises KeyError on a marker of no free slot. What holds no
    marker is returned as it is (the same object)."""
    # Plain replacement is exact: the statement holds neither root (``read_shape``), and the markers of
    # one kind have one width (no marker is part of another).
    texts = tuple((marker(index, shape.kinds[index]), shape.slots[index]) for index in free)
    return _walk(value, texts)


def _back(text: str, texts: tuple[tuple[str, str], ...]) -> str:
    for written, slot in texts:
        text = text.replace(written, slot)
    if any(root in text for root in _MARKER_ROOTS):
        raise KeyError(text)  # a marker of no free slot
    return text


def _walk(item: Any, texts: tuple[tuple[str, str], ...]) -> Any:
    """``substituted`` of one value; module-level, as a nested function calling itself would be a
    reference cycle (itself through its closure) left to the collector on every call."""
    kind = type(item)
    if kind is str:
        return _back(item, texts) if any(root in item for root in _MARKER_ROOTS) else item
    if kind in _ATOMS or (kind in _EMPTY and not item):
        return item
    names = _FIELDS.get(kind)
    if names is None:  # read once per type: a plan's walk meets the same few types every time
        names = _FIELDS[kind] = (
            tuple(f.name for f in dataclasses.fields(item)) if dataclasses.is_dataclass(item) else ()
        )
    if names:
        changes = {}
        for name in names:
            before = getattr(item, name)
            after = _walk(before, texts)
            if after is not before:
                changes[name] = after
        return dataclasses.replace(item, **changes) if changes else item
    if isinstance(item, (tuple, list, frozenset)):
        parts = [_walk(part, texts) for part in item]
        if all(after is before for after, before in zip(parts, item)):
            return item
        return type(item)(*parts) if hasattr(item, "_fields") else type(item)(parts)
    if isinstance(item, dict):
        pairs = [(_walk(k, texts), _walk(v, texts)) for k, v in item.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, item.items())):
            return item
        return dict(pairs)
    return item


_ATOMS = (int, float, bool, type(None))
_EMPTY = frozenset({tuple, list, frozenset, dict})  # an empty one holds no marker
_FIELDS: dict[type, tuple[str, ...]] = {}


class ShapeCache:
    """Per connection: each shape key's free slots (syntax only: they hold whatever the schema), least
    recently used dropped first; and the plans last served to texts of a shape (``serve``)."""

    __slots__ = ("free", "served")

    def __init__(self) -> None:
        self.free: OrderedDict[str, frozenset[int]] = OrderedDict()
        # SQL text -> (its shape's plan, that plan with the text's literals written back)
        self.served: dict[str, tuple[Any, Any]] = {}

    def serve(self, sql: str, plan: Any, written_back: Callable[[], T]) -> T:
        """``written_back()``, the shape's ``plan`` with ``sql``'s literals written back, kept for the last
        ``SERVED`` texts while ``plan`` is the one kept for their shape: a statement repeated (its first
        execution once its confirmation is dropped, a paging query page after page) takes its literals
        once. What ``written_back`` raises is raised, and nothing is kept."""
        served = self.served
        kept = served.get(sql)
        if kept is not None and kept[0] is plan:
            return cast(T, kept[1])
        value = written_back()
        try:
            if len(served) >= SERVED and sql not in served:
                del served[next(iter(served))]
        except (KeyError, StopIteration, RuntimeError):  # another thread's change meanwhile: bounded next time
            pass
        served[sql] = (plan, value)
        return value

    def get(self, key: str) -> frozenset[int] | None:
        found = self.free.get(key)
        if found is not None:
            try:
                self.free.move_to_end(key)
            except KeyError:  # dropped by another thread meanwhile: it is read again next time
                pass
        return found

    def put(self, key: str, free: frozenset[int]) -> None:
        self.free[key] = free
        try:
            self.free.move_to_end(key)
            while len(self.free) > SHAPES:
                self.free.popitem(last=False)
        except KeyError:  # another thread's put or drop meanwhile: the size is bounded by the next put
            pass

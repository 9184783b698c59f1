"""The guard's view of the schema: which catalog facts a verdict rests on, and when they may be reused.

A patch rule that needs to know why duplicates repeat asks ``explain(guard, sql)``, which returns the
``guarded_sqlite._analysis.provenance`` verdict of ``sql`` on this connection. Nothing here runs for a healthy
result: the first statement a rule asks about makes the first catalog read. Imported on that first
use (it loads sqlglot), not by ``import guarded_sqlite``.

SQLite (``SqliteSchemaView``). SQLite's only cheap version number, ``PRAGMA schema_version``, repeats:
a rolled-back DDL brings it back, and another file attached under the same name, ``deserialize()`` or
a backup can carry any number. So the view trusts no number, only the declarations themselves. For
each table a statement names it keeps where the name resolved (temp, main or an attached schema, as
SQLite resolves it) and the ``sqlite_master`` rows it was declared by: its CREATE TABLE (or VIEW, or
VIRTUAL TABLE) and CREATE INDEX texts, from which its key facts follow. A verdict is served again only
if, now,

* the schema list (``PRAGMA database_list``) is the same, and no TEMP table or earlier schema has
  come to shadow the name (or, for a name that was unknown, to define it);
* the rows at those rowids of ``sqlite_master`` are the same rows (a dropped, altered or re-created
  table or index changes or frees its row), and ``PRAGMA index_list`` names the same indexes (a new one
  has a row the view does not know yet).

These are lookups, whatever the size of the schema: four statements for a repeated two-table
statement (the schema list; the TEMP tables of those names and the rows by rowid, in one; an index
list per table). Their answers are kept with the verdict as sqlite3 returned them and compared as they
are; they are also kept per set of table names with those tables' facts, so a statement new to the
connection over tables it has read is answered by the same lookups, not by reading the declarations
again. A declaration not seen before is found by one scan of its schema's catalog, and its facts are
read with that schema's ``PRAGMA``s (``schema.sqlite_table_facts``) and kept per declaration; then the
check statements run once and their answers must say what the reads said, or DDL by another
connection came in between: the verdict is then ``unknown`` and nothing is kept. Whatever cannot be
read (an authorizer's denial, a missing virtual table module, a closed connection) makes the verdict
``unknown``, with the reason.

DuckDB, PostgreSQL and MySQL/MariaDB (``SnapshotSchemaView``) have no such cheap read per table here: the whole
catalog is read once and kept until a statement through this connection looks like DDL or fails with
an unknown-table error (``decide.forget_schema``), or until what unqualified names resolve against
changes (the current schema, database or search path, read once per question: ``Engine.name_context``,
c33); DDL by other connections is seen only then.

ClickHouse (``ClickHouseSchemaView``) reads its catalog the same way, but its declared keys are not
enforced: the keys a verdict rests on are proven on the data for each statement
(``schema_clickhouse.prove_keys``, one statement, once per statement however many rules ask), and a
verdict is kept per SQL text *and* what was proven.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar, cast

from sqlglot import exp

from .._core.probe import joining_view_names
from .._engines import SQLITE, execute_with
from ..errors import describe_error
from .aggregates import AggregatePlan
from .planning import aggregate_plan
from .provenance import Provenance, analyse_tree, parse_statement, table_names
from .schema import (
    CatalogUnreadable,
    Declaration,
    SchemaFacts,
    TableFacts,
    catalog_rows,
    fold,
    has_table_statement,
    index_list_statement,
    lookup_statement,
    plain_cursor,
    read_index_list,
    read_lookup,
    read_schemas,
    sqlite_declarations,
    sqlite_has_table,
    sqlite_index_list,
    sqlite_schemas,
    sqlite_table_facts,
    sqlite_temp_names,
)
from .schema_clickhouse import PROOF_SECONDS, ClickHouseCatalog, prove_keys, read_clickhouse_schema
from .schema_mysql import read_mysql_schema
from .schema_servers import read_duckdb_schema, read_postgres_schema
from .shapes import ShapeCache

if TYPE_CHECKING:
    from .._engines import Engine

__all__ = [
    "AGGREGATES",
    "MAX_NAMES",
    "Analyser",
    "ClickHouseSchemaView",
    "SnapshotSchemaView",
    "SqliteSchemaView",
    "explain",
    "joining_views",
    "program_functions",
    "schema_view",
]


class _Provenance(Protocol):
    @property
    def provenance(self) -> str: ...


class Guarded(Protocol):
    """What this module reads of a guarded connection's state (``ConnectionState`` has it; declared here
    so that the analysis does not import the layer above it)."""

    @property
    def policy(self) -> _Provenance: ...

    @property
    def raw(self) -> Any: ...

    @property
    def raw_ref(self) -> Callable[[], Any]: ...

    engine: Engine
    dialect: str
    catalog: Any
    epoch: int


VERDICTS = 256
"""Verdicts kept per connection (one per SQL text), oldest dropped first."""

TABLES = 1024
"""Table facts kept per connection (one per declaration); all dropped when full."""

MAX_NAMES = 200
"""Statements naming more tables than this are not analysed: the verdict is ``unknown``."""


def explain(guard: Guarded, sql: str) -> Provenance:
    """The provenance of ``sql``'s duplicates on the guarded connection (see the module docstring).

    Under ``provenance="text_to_sql"`` the reference is the projected tables alone, which do not depend
    on the order the FROM clause names its tables in (inner joins commute; a model may write them either
    way); elsewhere a fan-out must hold relative to the leading table too, as ORMs write their SQL."""
    analyser = _PROJECTED if guard.policy.provenance == "text_to_sql" else _PROVENANCE
    return schema_view(guard).explain(sql, analyser)


def schema_stamp(cur: sqlite3.Cursor) -> tuple[Any, ...]:
    """What tells a change of what a name resolves to on SQLite, short of DDL that brings a version
    number back: the schemas with their files (``PRAGMA database_list``) and each one's
    ``schema_version`` (TEMP included, which a shadowing table moves)."""
    schemas = tuple(cur.execute("PRAGMA database_list").fetchall())
    versions = tuple(
        cur.execute(f'PRAGMA "{str(row[1]).replace(chr(34), chr(34) * 2)}".schema_version').fetchone()[0]
        for row in schemas
    )
    return (schemas, versions)


def program_functions(guard: Guarded, sql: str, parameters: Any, keep: bool = True) -> frozenset[str] | None:
    """The functions ``sql``'s compiled program calls on SQLite, lower-cased and cut to 16 characters as
    ``EXPLAIN`` shows them, or None when that cannot be read; frozenset() on the other engines.

    The text alone does not say (c19): a view's body and a generated column the statement reads call
    functions it never names, and an operator calls one too (``x LIKE y`` is ``like()``, which the
    application may replace). The program says, views and generated columns compiled in: ``EXPLAIN``
    prepares the statement and runs nothing (about 80 us). ``keep``: kept per SQL text while no schema's
    version changes (a view redefined, a generated column added), nor the list of schemas, which costs
    a statement per schema to tell: for a statement asked about on every execution."""
    view = schema_view(guard)
    if not isinstance(view, SqliteSchemaView):
        return frozenset()
    try:
        cur = view.own_cursor()
        stamp = None
        if keep:
            stamp = schema_stamp(cur)
            kept = view.calls.get(sql)
            if kept is not None and kept[0] == stamp:
                return kept[1]
        execute_with(cur, f"EXPLAIN {sql}", parameters)
        called = frozenset(
            _as_text(row[5]).rpartition("(")[0].lower()
            for row in cur.fetchall()
            if _as_text(row[1]) in _CALLING_OPCODES
        )
    except (sqlite3.Error, TypeError, ValueError, IndexError):  # an authorizer, a closed connection
        return None
    if stamp is not None:
        if len(view.calls) >= VERDICTS and sql not in view.calls:
            del view.calls[next(iter(view.calls))]
        view.calls[sql] = (stamp, called)
    return called


def _as_text(value: Any) -> str:
    """An ``EXPLAIN`` column as text, whatever the connection's ``text_factory`` made of it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


_CALLING_OPCODES = frozenset(
    {"Function", "Function0", "PureFunc", "PureFunc0", "AggStep", "AggStep1", "AggValue", "AggInverse", "AggFinal"}
)
"""The VDBE opcodes whose P4 is a function called (``name(arguments)``)."""


def joining_views(guard: Guarded) -> frozenset[str]:
    """DuckDB, PostgreSQL, MySQL/MariaDB: the folded names of the views whose body joins, from the
    catalog snapshot (read on first need, dropped with it)."""
    view = schema_view(guard)
    if type(view) is not SnapshotSchemaView:  # ClickHouse's views are not read through (yet)
        return frozenset()
    facts = view.current_facts()
    return joining_view_names((fold(table.name), table.view_sql) for table in facts.tables if table.is_view)


def schema_view(guard: Guarded) -> SqliteSchemaView | SnapshotSchemaView:
    """The connection's schema view, made on first use (a rule's first question). A ClickHouse view
    learns which statement asks (``guard.started``, set per statement): its key proofs hold for one."""
    view = guard.catalog
    if view is None:
        if guard.engine is SQLITE:
            view = SqliteSchemaView(guard.raw_ref)
        elif guard.engine.name == "clickhouse":
            view = ClickHouseSchemaView(guard)
        else:
            view = SnapshotSchemaView(guard)
        guard.catalog = view
    if type(view) is ClickHouseSchemaView:
        view.statement = getattr(guard, "started", None)
    return cast("SqliteSchemaView | SnapshotSchemaView", view)  # only this module makes the views


T = TypeVar("T")


class Analyser(NamedTuple, Generic[T]):
    """A question about a statement that rests on schema facts, and its answer when they cannot be had."""

    kind: str  # part of the cache key: one statement has an answer per question
    answer: Callable[[exp.Expression, SchemaFacts, str], T]
    unknown: Callable[[str], T]


_PROVENANCE: Analyser[Provenance] = Analyser("provenance", analyse_tree, lambda why: Provenance("unknown", why))
_PROJECTED: Analyser[Provenance] = Analyser(
    "provenance, projected",
    lambda tree, facts, dialect: analyse_tree(tree, facts, dialect, "projected"),
    lambda why: Provenance("unknown", why),
)


_VIEW_DEPTH = 8
"""Views read through inside views, at most."""


def _view_table_names(facts: SchemaFacts, names: tuple[Name, ...]) -> set[Name]:
    """The tables the bodies of the views among ``names`` name, but those in ``names``."""
    more: set[Name] = set()
    for schema, name in names:
        found = facts.table(name, schema)
        if found is not None and found.view_sql:
            parsed = parse_statement(found.view_sql, "sqlite")
            if not isinstance(parsed, Provenance):
                more.update(table_names(parsed))
    return more - set(names)


AGGREGATES: Analyser[AggregatePlan] = Analyser(
    "aggregates", aggregate_plan, lambda why: AggregatePlan(note=why, unanalysed=True)
)


Statement = tuple[str, tuple[Any, ...]]
"""A catalog statement and its parameters."""

Name = tuple[str | None, str]
"""A table as a statement names it: (folded schema qualifier or None, folded name)."""

Entry = tuple[int | None, tuple[Declaration, ...], tuple[tuple[str, int, str, int], ...]]
"""What a name stands for now: the position of its schema (None: no such table), its ``sqlite_master``
rows and its ``PRAGMA index_list``."""


class SqliteSchemaView:
    """One SQLite connection's verdicts and table facts, reused only on identical declarations."""

    __slots__ = ("calls", "places", "raw_ref", "reads", "safe_aggregates", "shapes", "tables", "verdicts")

    def __init__(self, raw_ref: Callable[[], Any]) -> None:
        # The connection as its guard state holds it (weakly when the state belongs to it: the
        # connection holds this view), and no cursor of it, which would hold it strongly.
        self.raw_ref = raw_ref
        # (schema list, name) -> (schema position or None, rowids of its sqlite_master rows)
        self.places: dict[tuple[tuple[str, ...], Name], tuple[int | None, tuple[int, ...]]] = {}
        # (schema, declarations without rowids, index list) -> facts
        self.tables: dict[tuple[Any, ...], TableFacts] = {}
        # (schema list, names, through views) -> (check statements, their answers, the names' facts)
        self.reads: dict[tuple[Any, ...], tuple[tuple[Statement, ...], tuple[list[Any], ...], SchemaFacts]] = {}
        # SQL text -> ``_safe_stamp`` when its aggregate plan put nothing at risk (see ``plan``)
        self.safe_aggregates: dict[str, tuple[int, int]] = {}
        self.shapes = ShapeCache()  # shape key -> the slots its plan takes as opaque (``plan_cache``)
        # SQL text -> (schemas and their versions when read, the functions its program calls; ``program_functions``)
        self.calls: dict[str, tuple[Any, frozenset[str]]] = {}
        # (question, SQL text) -> (check statements, their rows when the answer was reached, answer)
        self.verdicts: dict[tuple[str, str], tuple[tuple[Statement, ...], tuple[list[Any], ...], Any]] = {}

    def own_cursor(self) -> sqlite3.Cursor:
        """A plain cursor for the guard's own catalog reads, under the connection's lock."""
        return plain_cursor(self.raw_ref())

    def explain(self, sql: str, analyser: Analyser[T], tree: exp.Expression | None = None) -> T:
        """``analyser``'s answer for ``sql``; ``tree``: its parse, where the caller has it already."""
        try:
            cur = self.own_cursor()
            key = (analyser.kind, sql)
            cached = self.verdicts.get(key)
            if cached is not None and _still(cur, cached[0], cached[1]):
                return cached[2]  # type: ignore[no-any-return]
            schemas = sqlite_schemas(cur)
            # The aggregate rule writes numbered parameters back into the SQL it generates (c29).
            planning = analyser.kind.startswith(AGGREGATES.kind)  # a statement's or a shape's plan
            parsed = tree if tree is not None else parse_statement(sql, "sqlite", numbered=planning)
            if isinstance(parsed, Provenance):  # unparseable: it names no table
                return self._keep(key, (), (), analyser.unknown(parsed.evidence))
            names = table_names(parsed)
            if len(names) > MAX_NAMES:
                return analyser.unknown(f"the statement names more than {MAX_NAMES} tables: not analysed")
            read = self._current(cur, schemas, names, through_views=planning)
            if read is None:  # DDL by another connection meanwhile
                return analyser.unknown("the schema changed while its catalog was read")
            plan, answers, facts = read
            return self._keep(key, plan, answers, analyser.answer(parsed, facts, "sqlite"))
        except CatalogUnreadable as why:
            return analyser.unknown(f"catalog unreadable: {why}")
        except (TypeError, ValueError, sqlite3.Error) as error:  # no usable connection, or odd answers
            return analyser.unknown(f"catalog unreadable: {describe_error(error)}")

    def facts_of(self, names: tuple[Name, ...]) -> SchemaFacts | None:
        """The facts of the tables ``names`` stand for now, read as ``explain`` reads them (kept per
        declaration), or None where the catalog cannot be read or changed while it was."""
        try:
            cur = self.own_cursor()
            # Followed through views as the aggregate rule's plans read them: the plan of the same
            # statement then finds these reads kept.
            read = self._current(cur, sqlite_schemas(cur), names, through_views=True)
        except (CatalogUnreadable, TypeError, ValueError, sqlite3.Error):
            return None
        return None if read is None else read[2]

    def _current(
        self, cur: sqlite3.Cursor, schemas: tuple[str, ...], names: tuple[Name, ...], through_views: bool
    ) -> tuple[tuple[Statement, ...], tuple[list[Any], ...], SchemaFacts] | None:
        """What ``names`` stand for now: the check statements, their answers and the tables' facts, or
        None where DDL by another connection came in between the reads. ``through_views``: the tables of
        the views among them too (``transparent``), to ``_VIEW_DEPTH``.

        Kept per set of names and reused while the check statements answer as they did: the criterion
        a verdict is reused on (``_still``), so a statement new to the connection over tables it has read
        pays the lookups, not the declarations' reads again (issue 44)."""
        key = (schemas, names, through_views)
        known = self.reads.get(key)
        if known is not None and _still(cur, known[0], known[1]):
            return known
        temp_names = sqlite_temp_names(cur)
        entries, facts = self._read(cur, schemas, temp_names, names)
        for _ in range(_VIEW_DEPTH if through_views else 0):
            # The aggregate rule reads views through (``transparent``): their tables' facts too.
            more = _view_table_names(facts, names)
            if not more or len(names) + len(more) > MAX_NAMES:
                break
            names = tuple(sorted({*names, *more}, key=lambda n: (n[0] or "", n[1])))
            entries, facts = self._read(cur, schemas, temp_names, names)
        plan = self._plan(schemas, names)
        answers = _answers(cur, plan)
        if self._entries(schemas, names, answers) != entries:
            return None
        reads = self.reads
        if len(reads) >= VERDICTS and key not in reads:
            del reads[next(iter(reads))]
        reads[key] = (plan, answers, facts)
        return plan, answers, facts

    def _keep(self, key: tuple[str, str], plan: tuple[Statement, ...], answers: tuple[list[Any], ...], verdict: T) -> T:
        verdicts = self.verdicts
        if len(verdicts) >= VERDICTS and key not in verdicts:
            del verdicts[next(iter(verdicts))]
        verdicts[key] = (plan, answers, verdict)
        return verdict

    def _position(self, cur: sqlite3.Cursor, schemas: tuple[str, ...], temp: frozenset[str], name: Name) -> int | None:
        """Where ``name`` resolves now, as SQLite resolves it: a qualified name in its schema only, an
        unqualified one in temp, main, then the attached schemas in order; None if nowhere."""
        qualifier, table = name
        if qualifier is not None:
            position = _schema_position(schemas, qualifier)
            if position is None:
                return None
            found = table in temp if position == 0 else sqlite_has_table(cur, schemas[position], table)
            return position if found else None
        if table in temp:
            return 0
        return next((i for i in range(1, len(schemas)) if sqlite_has_table(cur, schemas[i], table)), None)

    def _plan(self, schemas: tuple[str, ...], names: tuple[Name, ...]) -> tuple[Statement, ...]:
        """The statements whose answers say whether ``names`` still stand for what ``_read`` found: the
        schema list; in one statement, the TEMP tables among the unqualified names and the ``sqlite_master``
        rows at the rowids read; each table's index list; and for a name resolved past main (or not
        found), whether an earlier schema now defines it. All lookups, whatever the schema's size."""
        wanted: dict[int, list[int]] = {}
        located: list[Statement] = []
        shadows: list[Statement] = []
        for name in names:
            position, rowids = self.places[(schemas, name)]
            qualifier, table = name
            if position is not None and rowids:
                wanted.setdefault(position, []).extend(rowids)
                located.append((index_list_statement(schemas[position], table), ()))
            if qualifier is None and position != 0:
                later = len(schemas) if position is None else position
                shadows.extend((has_table_statement(schemas[i], table), ()) for i in range(1, later))
            elif qualifier is not None and position is None:
                found = _schema_position(schemas, qualifier)
                if found is not None and found > 0:
                    shadows.append((has_table_statement(schemas[found], table), ()))
        temp_names = sorted({table for qualifier, table in names if qualifier in (None, "temp")})
        lookup, parameters = lookup_statement(schemas, wanted, temp_names)
        return (("PRAGMA database_list", ()), (lookup, tuple(parameters)), *located, *shadows)

    def _entries(
        self, schemas: tuple[str, ...], names: tuple[Name, ...], answers: tuple[list[Any], ...]
    ) -> tuple[Entry, ...] | None:
        """What ``names`` stand for according to the answers to ``_plan``'s statements, as ``_read``
        reports it; None where the answers contradict the places ``_read`` recorded."""
        if read_schemas(answers[0]) != schemas:
            return None
        temp, found = read_lookup(answers[1])
        index_lists = iter(answers[2:])
        entries: list[Entry] = []
        for name in names:
            position, rowids = self.places[(schemas, name)]
            in_temp = name[1] in temp and name[0] in (None, "temp")
            if (position == 0) != in_temp and (position is not None or in_temp):
                return None
            if position is None or not rowids:
                entries.append((position, (), ()))
                continue
            rows = found.get(position, {})
            declared = tuple(rows[r] for r in rowids if r in rows)
            if len(declared) != len(rowids):
                return None
            entries.append((position, declared, read_index_list(next(index_lists))))
        if any(list(rest) for rest in index_lists):  # the shadow checks: each must find nothing
            return None
        return tuple(entries)

    def _read(
        self, cur: sqlite3.Cursor, schemas: tuple[str, ...], temp: frozenset[str], names: tuple[Name, ...]
    ) -> tuple[tuple[Entry, ...], SchemaFacts]:
        """Resolve ``names``, read their declarations and (for declarations not seen before) their facts;
        records the places for ``_plan``. Returns what the names stand for, and the facts."""
        entries: list[Entry] = []
        tables: dict[tuple[str, str], TableFacts] = {}
        for name in names:
            position = self._position(cur, schemas, temp, name)
            if position is None:
                self.places[(schemas, name)] = (None, ())
                entries.append((None, (), ()))
                continue
            schema = schemas[position]
            rows = sqlite_declarations(cur, schema, name[1])
            own = next((r for r in rows if r[1] in ("table", "view") and fold(r[2]) == name[1]), None)
            if own is None:  # sqlite_master itself, an eponymous virtual table: declared nowhere
                self.places[(schemas, name)] = (position, ())
                entries.append((position, (), ()))
                continue
            rows = (own, *(r for r in rows if r is not own))  # the table's own row first
            indexes = sqlite_index_list(cur, schema, own[3])
            listed = {fold(i[0]) for i in indexes}
            if any(r[1] == "index" and fold(r[2]) not in listed for r in rows):
                # An index the catalog declares is missing from the PRAGMA: it was not answered.
                raise CatalogUnreadable(f"PRAGMA index_list of {own[2]} disagrees with sqlite_master")
            self.places[(schemas, name)] = (position, tuple(r[0] for r in rows))
            entries.append((position, rows, indexes))
            key = (fold(schema), tuple(r[1:] for r in rows), indexes)
            facts = self.tables.get(key)
            if facts is None:
                try:
                    facts = sqlite_table_facts(cur, schema, own[2], own[1], own[4])
                except CatalogUnreadable as why:  # this table only: the others may still decide
                    facts = TableFacts(own[2], schema, keys_unknown=f"catalog unreadable ({why})")
                else:
                    if len(self.tables) >= TABLES:
                        self.tables.clear()
                    self.tables[key] = facts
            tables[(fold(schema), name[1])] = facts
        if len(self.places) > 4 * TABLES:
            self.places.clear()
        facts_view = SchemaFacts(tuple(tables.values()), tuple(fold(s) for s in schemas))
        return tuple(entries), facts_view


def _answers(cur: sqlite3.Cursor, plan: tuple[Statement, ...]) -> tuple[list[Any], ...]:
    """The rows of each statement, as sqlite3 returns them (compared as they are: no conversion)."""
    return tuple(catalog_rows(cur, sql, parameters) for sql, parameters in plan)


def _still(cur: sqlite3.Cursor, plan: tuple[Statement, ...], answers: tuple[list[Any], ...]) -> bool:
    """Whether the check statements answer as they did (a statement that now fails, e.g. on a schema
    detached since, answers differently: the verdict is worked out again)."""
    try:
        return _answers(cur, plan) == answers
    except CatalogUnreadable:
        return False


def _schema_position(schemas: tuple[str, ...], qualifier: str) -> int | None:
    return next((i for i, s in enumerate(schemas) if fold(s) == qualifier), None)


class SnapshotSchemaView:
    """DuckDB's, PostgreSQL's or MySQL/MariaDB's whole catalog, read on first need, with verdicts per SQL text
    (and per statement shape: ``plan_cache``)."""

    __slots__ = ("context", "dialect", "engine", "facts", "raw", "reader", "shapes", "verdicts")

    def __init__(self, guard: Guarded) -> None:
        readers: dict[str, Callable[[Any], SchemaFacts]] = {"duckdb": read_duckdb_schema, "mysql": read_mysql_schema}
        self.reader = readers.get(guard.engine.name, read_postgres_schema)
        self.raw = guard.raw
        self.engine = guard.engine
        self.dialect = guard.dialect
        self.facts: SchemaFacts | None = None
        self.verdicts: dict[tuple[Any, ...], Any] = {}  # (question, SQL text[, what ClickHouse proved])
        self.context: Any = None
        self.shapes = ShapeCache()  # shape key -> its free literals (``plan_cache``; not ClickHouse)

    def current_facts(self) -> SchemaFacts:
        """The catalog as unqualified names resolve now: read anew where what they resolve against
        changed (the current schema, search path or database, read once per question)."""
        context = self.engine.name_context(self.raw)
        if context != self.context:
            self.facts, self.context = None, context
            self.verdicts.clear()
        facts = self.facts
        if facts is None:
            facts = self.reader(self.raw)
            if facts.tables:  # an unreadable catalog (or none) is read again next time, not kept
                self.facts = facts
        return facts

    def explain(self, sql: str, analyser: Analyser[T], tree: exp.Expression | None = None) -> T:
        facts = self.current_facts()
        key = (analyser.kind, sql)
        if key in self.verdicts:
            return self.verdicts[key]  # type: ignore[no-any-return]
        parsed = tree if tree is not None else parse_statement(sql, self.dialect)
        verdict = (
            analyser.unknown(parsed.evidence)
            if isinstance(parsed, Provenance)
            else analyser.answer(parsed, facts, self.dialect)
        )
        if len(self.verdicts) >= VERDICTS:
            del self.verdicts[next(iter(self.verdicts))]
        self.verdicts[key] = verdict
        return verdict


class ClickHouseSchemaView(SnapshotSchemaView):
    """ClickHouse's catalog, read on first need and kept as ``SnapshotSchemaView`` keeps it, with the keys
    of the tables a statement names proven on the data once per statement (``schema_clickhouse``)."""

    __slots__ = ("catalog", "proofs", "statement")

    def __init__(self, guard: Guarded) -> None:
        super().__init__(guard)
        self.catalog: ClickHouseCatalog | None = None
        self.statement: Any = None  # which statement asks (guard.started): proofs hold for it alone
        self.proofs: tuple[Any, dict[tuple[tuple[str | None, str], ...], SchemaFacts]] = (None, {})

    def _fetch(self, sql: str) -> list[Any]:
        from .._core.deadlines import time_left
        from .._engines import NO_PARAMETERS, GuardStatement

        limit = time_left(PROOF_SECONDS)  # within what the caller's call deadline (an agent tool's) has left
        if limit is not None and limit <= 0:
            raise CatalogUnreadable("the call's time limit has passed")
        rows = self.engine.read_only_fetch(
            self.raw, GuardStatement(sql, NO_PARAMETERS, None, 1_000_000, limit, None, False)
        )
        if rows is None:
            raise CatalogUnreadable("too many catalog rows")
        return rows

    def explain(self, sql: str, analyser: Analyser[T], tree: exp.Expression | None = None) -> T:
        catalog = self.catalog
        if catalog is None:
            catalog = read_clickhouse_schema(self._fetch)
            if catalog.facts.tables:  # an unreadable catalog (or none) is read again next time
                self.catalog = catalog
        parsed = parse_statement(sql, self.dialect)
        if isinstance(parsed, Provenance):
            return analyser.unknown(parsed.evidence)
        names = table_names(parsed)
        statement, proven = self.proofs
        if statement is None or statement != self.statement:
            proven = {}
            self.proofs = (self.statement, proven)
        facts = proven.get(names)
        if facts is None:
            facts = proven[names] = prove_keys(catalog, names, self._fetch)
        signature = tuple(
            (t.schema, t.name, t.keys, t.keys_unknown) for t in (facts.table(n, s) for s, n in names) if t is not None
        )
        key = (analyser.kind, sql, signature)
        if key in self.verdicts:
            return self.verdicts[key]  # type: ignore[no-any-return]
        verdict = analyser.answer(parsed, facts, self.dialect)
        if len(self.verdicts) >= VERDICTS:
            del self.verdicts[next(iter(self.verdicts))]
        self.verdicts[key] = verdict
        return verdict

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
are. A declaration not seen before is found by one scan of its schema's catalog, and its facts are
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
"""

from __future__ import annotations

import dataclasses
import functools
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar, cast

from sqlglot import exp

from .._engines import SQLITE, execute_with
from ..errors import describe_error
from .aggregates import AggregatePlan, grouped_only, plan_aggregates
from .deciding import inner_scopes, plan_whole, substituted
from .paging import pages_groups, plan_bound
from .pregroup import scans_whole
from .provenance import NUMBERED_NAME, Provenance, analyse_tree, numbers_back, parse_statement, table_names
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
from .schema_mysql import read_mysql_schema
from .schema_servers import read_duckdb_schema, read_postgres_schema
from .sqltree import rerun_hazard
from .trees import text_of

if TYPE_CHECKING:
    from .._engines import Engine

__all__ = [
    "MAX_NAMES",
    "SnapshotSchemaView",
    "SqliteSchemaView",
    "explain",
    "plan",
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


def plan(guard: Guarded, sql: str, parameters: Any = None) -> AggregatePlan:
    """``aggregates.plan_aggregates`` of ``sql`` on the guarded connection: kept and reused as the
    provenance verdicts are, except that on SQLite a plan that puts no aggregate at risk is served
    again while the schemas' versions are unchanged (a statement per schema, not the lookups). Those
    numbers can repeat after other DDL (see above), which can make the guard miss a fan-out, never
    invent one: a plan at risk, which leads to serving corrected values under ``"text_to_sql"``, is
    always checked.

    The stamp (``schema_stamp``) is every schema's ``PRAGMA schema_version`` with the list of schemas and
    their files, not only main's: a TEMP table that shadows a table, or another file attached under the
    same name, moves no number of main's (c27).

    On SQLite, where one table can be pre-grouped (``pregroup``), the plan's check is the pre-grouped
    one if the statement's query plan (with ``parameters``, the first execution's) reads that table by a
    full scan, else the grouped one: asked once per plan (``EXPLAIN QUERY PLAN`` prepares the statement,
    it runs nothing), and never for a paging query, whose check is bounded to the groups it served."""
    view = schema_view(guard)
    if not isinstance(view, SqliteSchemaView):
        return view.explain(sql, _AGGREGATES)
    try:
        version = schema_stamp(view.own_cursor())
    except sqlite3.Error as error:
        return AggregatePlan(note=f"catalog unreadable: {describe_error(error)}", unanalysed=True)
    if view.safe_aggregates.get(sql) == version:
        return _SAFE

    def scanned(leaf: str) -> bool:
        try:
            cur = view.own_cursor()
            execute_with(cur, f"EXPLAIN QUERY PLAN {sql}", parameters)
            return scans_whole(cur.fetchall(), leaf)
        except (sqlite3.Error, TypeError, ValueError):  # the grouped check stays: it needs no plan
            return False

    answer = functools.partial(_aggregate_plan, scanned=scanned)
    found = view.explain(sql, Analyser(_AGGREGATES.kind, answer, _AGGREGATES.unknown))
    if not found.risks and not found.unanalysed:
        if len(view.safe_aggregates) >= VERDICTS and sql not in view.safe_aggregates:
            del view.safe_aggregates[next(iter(view.safe_aggregates))]
        view.safe_aggregates[sql] = version
    return found


_SAFE = AggregatePlan(note="no value aggregate at risk (kept while the schema version is unchanged)")


def known_safe(guard: Guarded, sql: str) -> bool:
    """Whether ``plan`` would serve ``sql``'s kept plan that puts nothing at risk (SQLite, schema version
    unchanged): answered without making a tree, so the caller need not prepare to release any."""
    view = guard.catalog
    if not isinstance(view, SqliteSchemaView) or sql not in view.safe_aggregates:
        return False
    try:
        return bool(view.safe_aggregates.get(sql) == schema_stamp(view.own_cursor()))
    except sqlite3.Error:
        return False


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


def schema_view(guard: Guarded) -> SqliteSchemaView | SnapshotSchemaView:
    """The connection's schema view, made on first use (a rule's first question)."""
    view = guard.catalog
    if view is None:
        view = guard.catalog = SqliteSchemaView(guard.raw_ref) if guard.engine is SQLITE else SnapshotSchemaView(guard)
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


def _aggregate_plan(
    tree: exp.Expression, facts: SchemaFacts, dialect: str, scanned: Callable[[str], bool] | None = None
) -> AggregatePlan:
    planned = _statement_plan(tree, facts, dialect, scanned)
    return _numbered_back(planned) if dialect == "sqlite" else planned


def _statement_plan(
    tree: exp.Expression, facts: SchemaFacts, dialect: str, scanned: Callable[[str], bool] | None
) -> AggregatePlan:
    """The plan of every SELECT of ``tree`` at risk: the outer one's (``plan_aggregates``) made on the
    statement with the others corrected (``deciding.inner_scopes``), all or none corrected."""
    inner = inner_scopes(tree, facts, dialect)
    if scanned is not None and (pages_groups(tree) or inner.planned):
        scanned = grouped_only  # the check bounded to the served groups, or one over corrected subqueries
    found = plan_aggregates(tree, facts, dialect, scanned)
    hazard = rerun_hazard(tree)
    risks = found.risks + inner.risks
    refused = inner.refusals
    if found.unanalysed and isinstance(tree, exp.Select):
        # The statement's own SELECT is not read: whether a corrected subquery changes its answer is unknown.
        refused = (f"the outer query: {found.note}", *refused)
    if refused or inner.unanalysed:
        notes = "; ".join((*refused, *inner.unanalysed))
        if not risks:
            return AggregatePlan(note=notes, unanalysed=True, hazard=hazard)
        # Several SELECTs at risk and one cannot be corrected, or not read (a RIGHT JOIN or ROLLUP in a
        # subquery, whose inflated value may choose the rows): none is (never a statement corrected in part).
        return AggregatePlan(risks, None, notes, hazard=hazard)
    if not inner.planned:
        if not found.risks:
            return found
        return plan_whole(plan_bound(dataclasses.replace(found, hazard=hazard), tree, dialect), tree, dialect)
    statement = substituted(tree, inner)
    checks = tuple(check for _, _, check in inner.planned)
    if not found.risks:
        written = text_of(statement, dialect)
        decides = "an outer query" + (" with ORDER BY" if tree.args.get("order") is not None else "")
        return AggregatePlan(inner.risks, written, check_sql=written, hazard=hazard, decides=decides, scopes=checks)
    # The outer SELECT's plan, made on the statement with its subqueries corrected: its check reads them so.
    again = plan_aggregates(statement, facts, dialect, grouped_only)
    if again.corrected_sql is None or [(r.function, r.argument) for r in again.risks] != [
        (r.function, r.argument) for r in found.risks
    ]:
        why = again.note or "its aggregates read otherwise with its subqueries corrected"
        return AggregatePlan(risks, None, f"the outer query, with its subqueries corrected: {why}", hazard=hazard)
    return plan_whole(dataclasses.replace(again, hazard=hazard, scopes=checks), statement, dialect)


def _numbered_back(plan: AggregatePlan) -> AggregatePlan:
    """``plan`` with SQLite's numbered parameters, read as names to parse (``parse_statement``), written
    back as ``?N`` in every query it runs."""
    texts = (plan.corrected_sql, plan.check_sql, plan.whole_sql, plan.bounded_sql)
    if not any(text is not None and NUMBERED_NAME in text for text in texts):
        return plan
    pregrouped = plan.pregrouped
    return dataclasses.replace(
        plan,
        scopes=tuple(scope._replace(whole_sql=numbers_back(scope.whole_sql)) for scope in plan.scopes),
        corrected_sql=None if plan.corrected_sql is None else numbers_back(plan.corrected_sql),
        check_sql=None if plan.check_sql is None else numbers_back(plan.check_sql),
        whole_sql=None if plan.whole_sql is None else numbers_back(plan.whole_sql),
        bounded_sql=None if plan.bounded_sql is None else numbers_back(plan.bounded_sql),
        pregrouped=None
        if pregrouped is None
        else (pregrouped[0], numbers_back(pregrouped[1]), numbers_back(pregrouped[2])),
    )


_AGGREGATES: Analyser[AggregatePlan] = Analyser(
    "aggregates", _aggregate_plan, lambda why: AggregatePlan(note=why, unanalysed=True)
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

    __slots__ = ("calls", "places", "raw_ref", "safe_aggregates", "tables", "verdicts")

    def __init__(self, raw_ref: Callable[[], Any]) -> None:
        # The connection as its guard state holds it (weakly when the state belongs to it: the
        # connection holds this view), and no cursor of it, which would hold it strongly.
        self.raw_ref = raw_ref
        # (schema list, name) -> (schema position or None, rowids of its sqlite_master rows)
        self.places: dict[tuple[tuple[str, ...], Name], tuple[int | None, tuple[int, ...]]] = {}
        # (schema, declarations without rowids, index list) -> facts
        self.tables: dict[tuple[Any, ...], TableFacts] = {}
        # SQL text -> ``schema_stamp`` when its aggregate plan put nothing at risk (see ``plan``)
        self.safe_aggregates: dict[str, tuple[Any, ...]] = {}
        # SQL text -> (schemas and their versions when read, the functions its program calls; ``program_functions``)
        self.calls: dict[str, tuple[Any, frozenset[str]]] = {}
        # (question, SQL text) -> (check statements, their rows when the answer was reached, answer)
        self.verdicts: dict[tuple[str, str], tuple[tuple[Statement, ...], tuple[list[Any], ...], Any]] = {}

    def own_cursor(self) -> sqlite3.Cursor:
        """A plain cursor for the guard's own catalog reads, under the connection's lock."""
        return plain_cursor(self.raw_ref())

    def explain(self, sql: str, analyser: Analyser[T]) -> T:
        try:
            cur = self.own_cursor()
            key = (analyser.kind, sql)
            cached = self.verdicts.get(key)
            if cached is not None and _still(cur, cached[0], cached[1]):
                return cached[2]  # type: ignore[no-any-return]
            schemas = sqlite_schemas(cur)
            # The aggregate rule writes numbered parameters back into the SQL it generates (c29).
            parsed = parse_statement(sql, "sqlite", numbered=analyser.kind == _AGGREGATES.kind)
            if isinstance(parsed, Provenance):  # unparseable: it names no table
                return self._keep(key, (), (), analyser.unknown(parsed.evidence))
            names = table_names(parsed)
            if len(names) > MAX_NAMES:
                return analyser.unknown(f"the statement names more than {MAX_NAMES} tables: not analysed")
            entries, facts = self._read(cur, schemas, sqlite_temp_names(cur), names)
            plan = self._plan(schemas, names)
            answers = _answers(cur, plan)
            if self._entries(schemas, names, answers) != entries:  # DDL by another connection meanwhile
                return analyser.unknown("the schema changed while its catalog was read")
            return self._keep(key, plan, answers, analyser.answer(parsed, facts, "sqlite"))
        except CatalogUnreadable as why:
            return analyser.unknown(f"catalog unreadable: {why}")
        except (TypeError, ValueError, sqlite3.Error) as error:  # no usable connection, or odd answers
            return analyser.unknown(f"catalog unreadable: {describe_error(error)}")

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
    """DuckDB's or PostgreSQL's whole catalog, read on first need, with verdicts per SQL text."""

    __slots__ = ("context", "dialect", "engine", "facts", "raw", "reader", "verdicts")

    def __init__(self, guard: Guarded) -> None:
        readers: dict[str, Callable[[Any], SchemaFacts]] = {"duckdb": read_duckdb_schema, "mysql": read_mysql_schema}
        self.reader = readers.get(guard.engine.name, read_postgres_schema)
        self.raw = guard.raw
        self.engine = guard.engine
        self.dialect = guard.dialect
        self.facts: SchemaFacts | None = None
        self.verdicts: dict[tuple[str, str], Any] = {}
        self.context: Any = None

    def explain(self, sql: str, analyser: Analyser[T]) -> T:
        # One read per question: unqualified names may resolve elsewhere since the catalog was read.
        context = self.engine.name_context(self.raw)
        if context != self.context:
            self.facts, self.context = None, context
            self.verdicts.clear()
        facts = self.facts
        if facts is None:
            facts = self.reader(self.raw)
            if facts.tables:  # an unreadable catalog (or none) is read again next time, not kept
                self.facts = facts
        key = (analyser.kind, sql)
        if key in self.verdicts:
            return self.verdicts[key]  # type: ignore[no-any-return]
        parsed = parse_statement(sql, self.dialect)
        verdict = (
            analyser.unknown(parsed.evidence)
            if isinstance(parsed, Provenance)
            else analyser.answer(parsed, facts, self.dialect)
        )
        if len(self.verdicts) >= VERDICTS:
            del self.verdicts[next(iter(self.verdicts))]
        self.verdicts[key] = verdict
        return verdict

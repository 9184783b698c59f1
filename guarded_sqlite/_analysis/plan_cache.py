"""The aggregate rule's plans on a connection: made by ``planning.aggregate_plan`` on the catalog facts
``catalog`` reads, kept per SQL text and, on SQLite, DuckDB, PostgreSQL and MySQL/MariaDB, per statement
shape (``shapes``: a statement new only in its literals is served its shape's plan with its own literals
written back, issue 44 item 2). Not on ClickHouse, whose verdicts rest on keys proven on the data for
each statement (``catalog.ClickHouseSchemaView``).

A shape's plan is kept exactly as a statement's is: under the text it was made on (the statement with
markers for its free literals), reused while the catalog rows it rests on answer as they did, made
again otherwise; a plan that puts nothing at risk is reused under the same stamp as a statement's.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any, cast

from sqlglot import exp

from .._engines import execute_with
from ..errors import describe_error
from .catalog import AGGREGATES, VERDICTS, Analyser, Guarded, SnapshotSchemaView, SqliteSchemaView, schema_view
from .keyed_joins import cannot_fan_out, read_joins
from .planning import aggregate_plan
from .plans import AggregatePlan
from .pregroup import scans_whole
from .provenance import Provenance, parse_statement
from .schema import SchemaFacts
from .shapes import Shape, free_slots, marked, read_shape, shareable, substituted

__all__ = ["SHAPED", "SNAPSHOT_SHAPES", "known_safe", "plan"]

SHAPED = f"{AGGREGATES.kind}, by shape"
"""The verdict kind of a shape's plan (kept beside statements' plans, under the marked text)."""

SNAPSHOT_SHAPES = frozenset({"duckdb", "postgres", "mysql"})
"""The dialects of ``SnapshotSchemaView``s whose statements are served their shape's plan. Not
ClickHouse's (``ClickHouseSchemaView``): its verdicts rest on keys proven on the data per statement."""


def plan(guard: Guarded, sql: str, parameters: Any = None) -> AggregatePlan:
    """``aggregates.plan_aggregates`` of ``sql`` on the guarded connection: kept and reused as the
    provenance verdicts are, except that on SQLite a plan that puts no aggregate at risk is served
    again while main's schema version and the connection's own changes stand still (one statement, not
    the lookups). Those numbers can repeat after other DDL (see ``catalog``), which can make the guard
    miss a fan-out, never invent one: a plan at risk, which leads to serving corrected values under
    ``"text_to_sql"``, is always checked.

    The stamp (``_safe_stamp``) is main's schema version with the guarded connection's count of its own
    changes: a TEMP table that shadows a table, or another file attached under the same name, moves no
    number of main's, but is made through the connection (c27).

    On SQLite, where one table can be pre-grouped (``pregroup``), the plan's check is the pre-grouped
    one if the statement's query plan (with ``parameters``, the first execution's) reads that table by a
    full scan, else the grouped one: read once per plan (``EXPLAIN QUERY PLAN`` prepares the statement,
    it runs nothing), for the statement's own SELECT and each subquery's check of every group, and never
    for a paging query's own SELECT, whose check is bounded to the groups it served.
    Either check is exact; a shape's plan keeps the choice made for its first statement.

    On SQLite, DuckDB, PostgreSQL and MySQL/MariaDB a statement with free literals (``shapes``) is served
    its shape's plan, made once; on SQLite one whose joins cannot repeat what it sums is recognised from
    its words (``keyed_joins``)."""
    view = schema_view(guard)
    if not isinstance(view, SqliteSchemaView):
        if type(view) is SnapshotSchemaView and view.dialect in SNAPSHOT_SHAPES:
            # The snapshot is dropped on DDL with its verdicts: a shape's plan is kept with them.
            dialect = view.dialect
            shaped = _by_shape(view, sql, read_shape(sql, dialect), None, aggregate_plan, dialect)
            if shaped is not None:
                return shaped
        return view.explain(sql, AGGREGATES)
    try:
        version = _safe_stamp(view, guard)
    except sqlite3.Error as error:
        return AggregatePlan(note=f"catalog unreadable: {describe_error(error)}", unanalysed=True)
    if view.safe_aggregates.get(sql) == version:
        return _SAFE

    explained: list[list[Any]] = []  # the statement's query plan, read once for every SELECT that asks

    def scanned(leaf: str) -> bool:
        try:
            if not explained:
                cur = view.own_cursor()
                execute_with(cur, f"EXPLAIN QUERY PLAN {sql}", parameters)
                explained.append(cur.fetchall())
            return scans_whole(explained[0], leaf)
        except (sqlite3.Error, TypeError, ValueError):  # the grouped check stays: it needs no plan
            return False

    shape = read_shape(sql)
    if shape is not None and view.safe_aggregates.get(shape.key) == version:
        return _KEYED  # its shape was read from its words before: no literal changes that reading
    # Read from its words only where neither the statement nor its shape was seen: a repeated statement
    # or shape has its plan kept (a reading that said no is not asked again).
    seen = (AGGREGATES.kind, sql) in view.verdicts if shape is None else view.shapes.get(shape.key) is not None
    if not seen and _keyed_only(view, sql):
        # A statement (of a shape) not seen before whose joins cannot repeat what it sums: no parse.
        _keep_safe(view, sql, _KEYED, version)
        if shape is not None:  # a shape's key holds a character no SQL text does: no statement's key
            _keep_safe(view, shape.key, _KEYED, version)
        return _KEYED
    answer = functools.partial(aggregate_plan, scanned=scanned)
    shaped = _by_shape(view, sql, shape, version, answer)
    if shaped is not None:
        return shaped
    found = view.explain(sql, Analyser(AGGREGATES.kind, answer, AGGREGATES.unknown))
    _keep_safe(view, sql, found, version)
    return found


def _keyed_only(view: SqliteSchemaView, sql: str) -> bool:
    """Whether ``sql``'s words say that its joins cannot repeat the rows its value aggregates read
    (``keyed_joins``), on the catalog's facts of its tables."""
    reading = read_joins(sql)
    if reading is None or len(reading.equalities) < len(reading.tables) - 1:
        return False  # each other table needs an equality to be matched on its key: no catalog read
    facts = view.facts_of(tuple(sorted({(None, table) for _, table in reading.tables}, key=lambda name: name[1])))
    return facts is not None and cannot_fan_out(reading, facts)


_KEYED = AggregatePlan(
    note="every value aggregate reads rows the join does not repeat (every other table is matched on its key)"
)


def _by_shape(
    view: SqliteSchemaView | SnapshotSchemaView,
    sql: str,
    shape: Shape | None,
    version: tuple[int, int] | None,
    answer: Any,
    dialect: str = "sqlite",
) -> AggregatePlan | None:
    """``sql``'s plan from its shape's (made now if the shape is new), or None where the statement has no
    free literal or its shape's plan may not serve other literals (``shapes.shareable``). ``version``:
    SQLite's stamp for plans that put nothing at risk (None on the snapshot engines, whose verdicts are
    all kept)."""
    if shape is None:
        return None
    free = view.shapes.get(shape.key)
    tree: exp.Expression | None = None
    if free is None:
        # Which literals the plan may take as opaque is syntax alone: read once per shape.
        parsed = parse_statement(marked(shape), dialect, numbered=True)
        free = frozenset() if isinstance(parsed, Provenance) else free_slots(parsed, shape)
        view.shapes.put(shape.key, free)
        if len(free) == len(shape.slots) and not isinstance(parsed, Provenance):
            tree = parsed  # the text the plan is made on: not parsed twice
    if not free:
        return None
    text = marked(shape, free)
    if isinstance(view, SqliteSchemaView) and view.safe_aggregates.get(text) == version:
        return _SAFE

    def shaped(tree: exp.Expression, facts: SchemaFacts, dialect: str) -> tuple[AggregatePlan, bool]:
        # Each free marker must parse, in this very text, as the opaque literal it was read as in the
        # shape's (the fixed literals written back are other tokens: a scan that misread where a string
        # ends would show here), or the plan is not shared.
        if free_slots(tree, shape) != free:
            return AGGREGATES.unknown("a free literal is not read as one in the text planned"), False
        return answer(tree, facts, dialect), shareable(tree, facts)

    found, share = view.explain(text, Analyser(SHAPED, shaped, lambda why: (AGGREGATES.unknown(why), False)), tree)
    if not share:
        return None
    if not found.risks and not found.unanalysed:
        if isinstance(view, SqliteSchemaView) and version is not None:
            _keep_safe(view, text, found, version)
            _keep_safe(view, sql, found, version)  # the statement repeated is then served by ``known_safe``
        return found
    try:
        return view.shapes.serve(sql, found, lambda: cast(AggregatePlan, substituted(found, shape, free)))
    except KeyError:  # a marker the plan holds that is no free slot's: planned as written instead
        return None


def _keep_safe(view: SqliteSchemaView, text: str, found: AggregatePlan, version: tuple[int, int]) -> None:
    """Keep ``text``'s plan that puts nothing at risk under the stamp, the oldest dropped when full."""
    if not found.risks and not found.unanalysed:
        if len(view.safe_aggregates) >= VERDICTS and text not in view.safe_aggregates:
            del view.safe_aggregates[next(iter(view.safe_aggregates))]
        view.safe_aggregates[text] = version


_SAFE = AggregatePlan(note="no value aggregate at risk (kept while the schema version is unchanged)")


def known_safe(guard: Guarded, sql: str) -> bool:
    """Whether ``plan`` would serve ``sql``'s kept plan that puts nothing at risk (SQLite, schema version
    unchanged): answered without making a tree, so the caller need not prepare to release any."""
    view = guard.catalog
    if not isinstance(view, SqliteSchemaView) or sql not in view.safe_aggregates:
        return False
    try:
        return bool(view.safe_aggregates.get(sql) == _safe_stamp(view, guard))
    except sqlite3.Error:
        return False


def _safe_stamp(view: SqliteSchemaView, guard: Guarded) -> tuple[int, int]:
    """What a kept "nothing at risk" plan is kept with: main's ``PRAGMA schema_version`` (one statement)
    and the guarded connection's own count of changes (``epoch``), which a TEMP table created or a file
    attached through it moves (c27); DDL by another connection moves main's version."""
    return (view.own_cursor().execute("PRAGMA schema_version").fetchone()[0], guard.epoch)

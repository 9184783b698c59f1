"""The guard's view of the schema: which catalog facts a verdict rests on, and when they may be reused.

A patch rule that needs to know why duplicates repeat asks ``explain(guard, sql)``, which returns the
``guarded_sqlite.provenance`` verdict of ``sql`` on this connection. Nothing here runs for a healthy
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
statement (the schema list; the TEMP names and the rows by rowid, in one; an index list per table). A declaration not seen before is found by one scan of its schema's catalog, and its facts
are read with that schema's ``PRAGMA``s (``schema.sqlite_table_facts``) and kept per declaration;
then everything is checked once more, and if DDL by another connection changed it in between the
verdict is ``unknown`` and nothing is kept. Whatever cannot be read (an authorizer's denial, a missing
virtual table module, a closed connection) makes the verdict ``unknown``, with the reason.

DuckDB and PostgreSQL (``SnapshotSchemaView``) have no such cheap read per table here: the whole
catalog is read once and kept until a statement through this connection looks like DDL or fails with
an unknown-table error (``core.forget_schema``); DDL by other connections is seen only then.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .engines import SQLITE
from .errors import describe_error
from .provenance import Provenance, analyse, analyse_tree, parse_statement, table_names
from .schema import (
    CatalogUnreadable,
    Declaration,
    SchemaFacts,
    TableFacts,
    fold,
    plain_cursor,
    read_duckdb_schema,
    read_postgres_schema,
    sqlite_declarations,
    sqlite_has_table,
    sqlite_index_list,
    sqlite_lookup,
    sqlite_schemas,
    sqlite_table_facts,
    sqlite_temp_names,
)

if TYPE_CHECKING:
    from .core import ConnectionState

__all__ = ["MAX_NAMES", "SnapshotSchemaView", "SqliteSchemaView", "explain"]

VERDICTS = 256
"""Verdicts kept per connection (one per SQL text), oldest dropped first."""

TABLES = 1024
"""Table facts kept per connection (one per declaration); all dropped when full."""

MAX_NAMES = 200
"""Statements naming more tables than this are not analysed: the verdict is ``unknown``."""


def explain(guard: ConnectionState, sql: str) -> Provenance:
    """The provenance of ``sql``'s duplicates on the guarded connection (see the module docstring)."""
    view = guard.catalog
    if view is None:
        view = guard.catalog = SqliteSchemaView(guard.raw) if guard.engine is SQLITE else SnapshotSchemaView(guard)
    return view.explain(sql)


Name = tuple[str | None, str]
"""A table as a statement names it: (folded schema qualifier or None, folded name)."""

Entry = tuple[int | None, tuple[Declaration, ...], tuple[tuple[str, int, str, int], ...]]
"""What a name stands for now: the position of its schema (None: no such table), its ``sqlite_master``
rows and its ``PRAGMA index_list``."""


class SqliteSchemaView:
    """One SQLite connection's verdicts and table facts, reused only on identical declarations."""

    __slots__ = ("cursor", "places", "raw", "tables", "verdicts")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.cursor: sqlite3.Cursor | None = None  # a plain cursor, used only under the connection's lock
        # (schema list, name) -> (schema position or None, rowids of its sqlite_master rows)
        self.places: dict[tuple[tuple[str, ...], Name], tuple[int | None, tuple[int, ...]]] = {}
        # (schema, declarations without rowids, index list) -> facts
        self.tables: dict[tuple[Any, ...], TableFacts] = {}
        # SQL text -> (schema list, names, what they stood for, verdict)
        self.verdicts: dict[str, tuple[tuple[str, ...], tuple[Name, ...], tuple[Entry, ...], Provenance]] = {}

    def explain(self, sql: str) -> Provenance:
        try:
            cur = self.cursor
            if cur is None:
                cur = self.cursor = plain_cursor(self.raw)
            schemas = sqlite_schemas(cur)
            cached = self.verdicts.get(sql)
            if cached is not None and cached[0] == schemas and self._check(cur, schemas, cached[1]) == cached[2]:
                return cached[3]
            parsed = parse_statement(sql, "sqlite")
            if isinstance(parsed, Provenance):  # unparseable: it names no table
                return self._keep(sql, schemas, (), (), parsed)
            names = table_names(parsed)
            if len(names) > MAX_NAMES:
                return Provenance("unknown", f"the statement names more than {MAX_NAMES} tables: not analysed")
            entries, facts, fresh = self._read(cur, schemas, sqlite_temp_names(cur), names)
            if fresh and self._check(cur, schemas, names) != entries:
                return Provenance("unknown", "the schema changed while its catalog was read")
            return self._keep(sql, schemas, names, entries, analyse_tree(parsed, facts, "sqlite"))
        except CatalogUnreadable as why:
            return Provenance("unknown", f"catalog unreadable: {why}")
        except (TypeError, sqlite3.Error) as error:  # no usable connection behind the guard
            return Provenance("unknown", f"catalog unreadable: {describe_error(error)}")

    def _keep(
        self,
        sql: str,
        schemas: tuple[str, ...],
        names: tuple[Name, ...],
        entries: tuple[Entry, ...],
        verdict: Provenance,
    ) -> Provenance:
        verdicts = self.verdicts
        if len(verdicts) >= VERDICTS and sql not in verdicts:
            del verdicts[next(iter(verdicts))]
        verdicts[sql] = (schemas, names, entries, verdict)
        return verdict

    def _position(self, cur: sqlite3.Cursor, schemas: tuple[str, ...], temp: frozenset[str], name: Name) -> int | None:
        """Where ``name`` resolves now, as SQLite resolves it: a qualified name in its schema only, an
        unqualified one in temp, main, then the attached schemas in order; None if nowhere."""
        qualifier, table = name
        if qualifier is not None:
            position = next((i for i, s in enumerate(schemas) if fold(s) == qualifier), None)
            if position is None:
                return None
            found = table in temp if position == 0 else sqlite_has_table(cur, schemas[position], table)
            return position if found else None
        if table in temp:
            return 0
        return next((i for i in range(1, len(schemas)) if sqlite_has_table(cur, schemas[i], table)), None)

    def _check(
        self, cur: sqlite3.Cursor, schemas: tuple[str, ...], names: tuple[Name, ...]
    ) -> tuple[Entry, ...] | None:
        """What ``names`` stand for now, from lookups at the places read before; None if a place is not
        known yet or a name now resolves elsewhere."""
        places = []
        wanted: dict[int, list[int]] = {}
        for name in names:
            place = self.places.get((schemas, name))
            if place is None:
                return None
            places.append(place)
            if place[0] is not None and place[1]:
                wanted.setdefault(place[0], []).extend(place[1])
        temp, found = sqlite_lookup(cur, schemas, wanted)
        for name, (position, _) in zip(names, places):
            if name[0] is None and position != 0:
                # Unqualified: nothing earlier in the search order may define the name by now.
                if name[1] in temp:
                    return None
                later = len(schemas) if position is None else position
                if any(sqlite_has_table(cur, schemas[i], name[1]) for i in range(1, later)):
                    return None
            elif self._position(cur, schemas, temp, name) != position:
                return None
        entries: list[Entry] = []
        for position, rowids in places:
            if position is None or not rowids:  # no such table, or one the catalog does not declare
                entries.append((position, (), ()))
                continue
            rows = tuple(found[position][r] for r in rowids if r in found[position])
            if len(rows) != len(rowids) or not rows:
                return None
            entries.append((position, rows, sqlite_index_list(cur, schemas[position], rows[0][3])))
        return tuple(entries)

    def _read(
        self, cur: sqlite3.Cursor, schemas: tuple[str, ...], temp: frozenset[str], names: tuple[Name, ...]
    ) -> tuple[tuple[Entry, ...], SchemaFacts, bool]:
        """Resolve ``names``, read their declarations and (for declarations not seen before) their facts;
        records the places for ``_check``. Returns what the names stand for, the facts, and whether any
        facts were read now."""
        entries: list[Entry] = []
        tables: dict[tuple[str, str], TableFacts] = {}
        fresh = False
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
                fresh = True
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
        return tuple(entries), facts_view, fresh


class SnapshotSchemaView:
    """DuckDB's or PostgreSQL's whole catalog, read on first need, with verdicts per SQL text."""

    __slots__ = ("dialect", "facts", "raw", "reader", "verdicts")

    def __init__(self, guard: ConnectionState) -> None:
        readers: dict[str, Callable[[Any], SchemaFacts]] = {"duckdb": read_duckdb_schema}
        self.reader = readers.get(guard.engine.name, read_postgres_schema)
        self.raw = guard.raw
        self.dialect = guard.dialect
        self.facts: SchemaFacts | None = None
        self.verdicts: dict[str, Provenance] = {}

    def explain(self, sql: str) -> Provenance:
        facts = self.facts
        if facts is None:
            facts = self.facts = self.reader(self.raw)
        verdict = self.verdicts.get(sql)
        if verdict is None:
            verdict = analyse(sql, facts, self.dialect)
            if len(self.verdicts) >= VERDICTS:
                del self.verdicts[next(iter(self.verdicts))]
            self.verdicts[sql] = verdict
        return verdict

"""Schema facts from a MySQL or MariaDB server's ``information_schema``, in ``schema``'s shape.

Keys: the PRIMARY KEY and every unique index whose parts are whole columns (a prefix part,
``UNIQUE (name(10))``, constrains only the first characters; an expression part, MySQL's functional
index, no column): ``statistics`` with ``non_unique = 0``. A PRIMARY KEY's columns are NOT NULL; a
UNIQUE index's may hold NULL, any number of times (the module docstring of ``schema`` says where such a
key still counts). There is no row identity but a key: InnoDB's hidden row id cannot be read by a query,
so a table without a NOT NULL key has none, and what needs one is ``unknown`` for it. Each text
column's collation is kept (``TableFacts.collations``): the default ones compare case-insensitively
and ignore trailing spaces, so a key is unique under them, not byte for byte.

Tables are filed under their database; unqualified names resolve in the connection's current
database (``DATABASE()``). ``information_schema`` does not list a session's TEMPORARY tables: a name
that is one is unknown, unless it shadows a permanent table of the same name, which this cannot see.
Two tables whose names differ only in case (``lower_case_table_names = 0``) are both read as keyless
with the reason, rather than one taken for the other. The reads run through the engine's read-only
path (``_engines.mysql``); the reader never raises, and when a read fails no table is known at all.
"""

from __future__ import annotations

from typing import Any

from .schema import ForeignKey, SchemaFacts, TableFacts, fold, unique_keys

__all__ = ["read_mysql_schema"]

_SYSTEM = "('mysql', 'information_schema', 'performance_schema', 'sys')"
_TABLES = (
    f"SELECT table_schema, table_name, table_type FROM information_schema.tables WHERE table_schema NOT IN {_SYSTEM}"
)
_VIEWS = (
    "SELECT table_schema, table_name, view_definition FROM information_schema.views "
    f"WHERE table_schema NOT IN {_SYSTEM}"
)
"""The views' bodies (empty without the SHOW VIEW privilege: the view is then opaque, never guessed)."""
_COLUMNS = (
    "SELECT table_schema, table_name, column_name, ordinal_position, is_nullable, collation_name "
    f"FROM information_schema.columns WHERE table_schema NOT IN {_SYSTEM}"
)
_UNIQUE = (
    "SELECT table_schema, table_name, index_name, seq_in_index, column_name, sub_part "
    f"FROM information_schema.statistics WHERE non_unique = 0 AND table_schema NOT IN {_SYSTEM}"
)
_FOREIGN = (
    "SELECT table_schema, table_name, constraint_name, ordinal_position, column_name, referenced_table_name, "
    "referenced_column_name FROM information_schema.key_column_usage "
    f"WHERE referenced_table_name IS NOT NULL AND table_schema NOT IN {_SYSTEM}"
)


def read_mysql_schema(con: Any) -> SchemaFacts:
    """Read a PyMySQL connection's tables, views and keys (see the module docstring). Never raises."""
    from .._engines import MYSQL, NO_PARAMETERS, GuardStatement

    def fetch(sql: str) -> list[Any]:
        rows = MYSQL.read_only_fetch(con, GuardStatement(sql, NO_PARAMETERS, None, 1_000_000, 10.0, None, False))
        if rows is None:
            raise ValueError("too many catalog rows")
        return rows

    try:
        current = fetch("SELECT DATABASE()")
        database = str(current[0][0]) if current and current[0][0] is not None else ""
        kinds = {(str(s), str(t)): str(kind) for s, t, kind in fetch(_TABLES)}
        bodies = {(str(s), str(t)): str(body or "") for s, t, body in fetch(_VIEWS)}
        columns: dict[tuple[str, str], list[tuple[int, str, bool, str | None]]] = {}
        for schema, table, column, position, nullable, collation in fetch(_COLUMNS):
            where = (str(schema), str(table))
            columns.setdefault(where, []).append(
                (int(position), str(column), str(nullable) == "YES", None if collation is None else str(collation))
            )
        parts: dict[tuple[str, str, str], list[tuple[int, str | None, Any]]] = {}
        for schema, table, index, seq, column, sub_part in fetch(_UNIQUE):
            parts.setdefault((str(schema), str(table), str(index)), []).append(
                (int(seq), None if column is None else str(column), sub_part)
            )
        foreign: dict[tuple[str, str, str], list[tuple[int, str, str, str]]] = {}
        for schema, table, name, position, column, ref_table, ref_column in fetch(_FOREIGN):
            foreign.setdefault((str(schema), str(table), str(name)), []).append(
                (int(position), str(column), str(ref_table), str(ref_column))
            )
    except Exception:  # an unreadable catalog: every name unknown, never keyless
        return SchemaFacts()
    keys: dict[tuple[str, str], list[frozenset[str]]] = {}
    for (schema, table, _), index_parts in parts.items():
        if all(column is not None and sub_part is None for _, column, sub_part in index_parts):
            keys.setdefault((schema, table), []).append(frozenset(fold(str(c)) for _, c, _ in index_parts))
    fks: dict[tuple[str, str], list[ForeignKey]] = {}
    for (schema, table, _), fk_parts in foreign.items():
        ordered = sorted(fk_parts)
        fks.setdefault((schema, table), []).append(
            ForeignKey(tuple(c for _, c, _, _ in ordered), ordered[0][2], tuple(r for _, _, _, r in ordered))
        )
    folded: dict[tuple[str, str], int] = {}
    for schema, table in kinds:
        folded[(fold(schema), fold(table))] = folded.get((fold(schema), fold(table)), 0) + 1
    tables = []
    for (schema, table), kind in sorted(kinds.items()):
        cols = sorted(columns.get((schema, table), []))
        view = kind == "VIEW"
        twin = folded[(fold(schema), fold(table))] > 1
        tables.append(
            TableFacts(
                table,
                schema,
                tuple(name for _, name, _, _ in cols),
                () if view or twin else unique_keys(keys.get((schema, table), [])),
                frozenset(fold(name) for _, name, nullable, _ in cols if not nullable),
                tuple(fks.get((schema, table), [])),
                view,
                keys_unknown=f"another table's name differs from {table}'s only in case" if twin and not view else "",
                view_sql=_create_view(schema, table, bodies.get((schema, table), "")) if view and not twin else "",
                collations=tuple((fold(name), collation) for _, name, _, collation in cols if collation is not None),
            )
        )
    return SchemaFacts(tuple(tables), (fold(database),) if database else ())


def _create_view(schema: str, name: str, body: str) -> str:
    """The ``CREATE VIEW`` text of a view whose body the catalog shows (its names fully qualified), or ""."""
    if not body.strip():
        return ""
    quoted = ".".join("`" + part.replace("`", "``") + "`" for part in (schema, name))
    return f"CREATE VIEW {quoted} AS {body}"

"""Under ``"text_to_sql"`` a verdict does not depend on the order the FROM clause names inner-joined
tables in: inner joins commute, and a model writes ``FROM dogs JOIN treatments`` as readily as
``FROM treatments JOIN dogs``. The default keeps its leading-table reference (ORMs lead with the entity
they load), which this file checks is still order-sensitive where it should be."""

from __future__ import annotations

import itertools
import sqlite3
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

import guarded_sqlite

SCHEMA = """
CREATE TABLE owners (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE breeds (code TEXT PRIMARY KEY, label TEXT);
CREATE TABLE dogs (id INTEGER PRIMARY KEY, owner_id INTEGER, breed_code TEXT, name TEXT);
CREATE TABLE treatments (id INTEGER PRIMARY KEY, dog_id INTEGER, cost INTEGER);
INSERT INTO owners VALUES (1, 'Ann'), (2, 'Bo'), (3, 'Cy');
INSERT INTO breeds VALUES ('lab', 'Labrador'), ('pug', 'Pug');
INSERT INTO dogs VALUES (1, 1, 'lab', 'Rex'), (2, 1, 'pug', 'Max'), (3, 2, 'lab', 'Ida'), (4, 3, 'pug', 'Zed');
INSERT INTO treatments (dog_id, cost) VALUES (1, 10), (1, 20), (1, 30), (2, 10), (3, 5), (3, 5), (4, 7);
"""

# The join conditions of the tables a query may use: (table, table, condition).
EDGES = [
    ("owners", "dogs", "owners.id = dogs.owner_id"),
    ("breeds", "dogs", "breeds.code = dogs.breed_code"),
    ("dogs", "treatments", "dogs.id = treatments.dog_id"),
]
COLUMNS = {
    "owners": ["owners.name", "owners.id"],
    "breeds": ["breeds.label"],
    "dogs": ["dogs.name", "dogs.id"],
    "treatments": ["treatments.cost"],
}
# Connected sets of tables, each with the conditions that join it.
SHAPES = [
    (("owners", "dogs"), [EDGES[0][2]]),
    (("dogs", "treatments"), [EDGES[2][2]]),
    (("breeds", "dogs"), [EDGES[1][2]]),
    (("owners", "dogs", "treatments"), [EDGES[0][2], EDGES[2][2]]),
    (("breeds", "dogs", "treatments"), [EDGES[1][2], EDGES[2][2]]),
    (("owners", "breeds", "dogs", "treatments"), [e[2] for e in EDGES]),
]


def _con(guard: str) -> sqlite3.Connection:
    con = guarded_sqlite.connect(":memory:", guard=guard)
    con.executescript(SCHEMA)
    return con


def _comma_sql(columns: list[str], order: tuple[str, ...], conditions: list[str]) -> str:
    return f"SELECT {', '.join(columns)} FROM {', '.join(order)} WHERE {' AND '.join(conditions)}"


def _join_sql(columns: list[str], order: tuple[str, ...], conditions: list[str]) -> str:
    """``FROM a JOIN b ON ... JOIN c ON ...``: each condition where both its tables are joined; a table
    with none yet is CROSS JOINed and its conditions go to WHERE."""
    placed: set[str] = {order[0]}
    parts = [order[0]]
    pending = list(conditions)
    for table in order[1:]:
        placed.add(table)
        usable = [c for c in pending if all(t in placed for t in _tables(c)) and table in _tables(c)]
        for condition in usable:
            pending.remove(condition)
        parts.append(f"JOIN {table} ON {' AND '.join(usable)}" if usable else f"CROSS JOIN {table}")
    where = f" WHERE {' AND '.join(pending)}" if pending else ""
    return f"SELECT {', '.join(columns)} FROM {' '.join(parts)}{where}"


def _tables(condition: str) -> set[str]:
    return {side.strip().split(".")[0] for side in condition.split("=")}


@st.composite
def queries(draw: st.DrawFn) -> tuple[list[str], tuple[str, ...], list[str]]:
    tables, conditions = draw(st.sampled_from(SHAPES))
    projected = draw(st.lists(st.sampled_from(tables), min_size=1, max_size=2, unique=True))
    columns = [draw(st.sampled_from(COLUMNS[table])) for table in projected]
    return list(dict.fromkeys(columns)), tables, conditions


@settings(max_examples=60, deadline=None)
@given(query=queries(), write=st.sampled_from([_comma_sql, _join_sql]))
def test_text_to_sql_decides_the_same_whatever_the_join_order(query, write) -> None:  # type: ignore[no-untyped-def]
    columns, tables, conditions = query
    con = _con("text_to_sql")
    outcomes = set()
    served = set()
    for order in itertools.permutations(tables):
        sql = write(columns, order, conditions)
        cursor = con.execute(sql)
        rows = cursor.fetchall()
        report = cursor.guard_report
        outcomes.add((report.trigger, report.action, report.provenance))
        served.add(tuple(sorted(Counter(rows).items(), key=repr)))
    assert len(outcomes) == 1, outcomes
    assert len(served) == 1


def test_the_dogs_and_treatments_example_is_repaired_both_ways() -> None:
    """The issue's example: owners' dogs' names over treatments, written either way round."""
    con = _con("text_to_sql")
    forward = con.execute("SELECT dogs.name FROM dogs JOIN treatments ON dogs.id = treatments.dog_id")
    backward = con.execute("SELECT dogs.name FROM treatments JOIN dogs ON dogs.id = treatments.dog_id")
    assert forward.fetchall() == backward.fetchall() == [("Rex",), ("Max",), ("Ida",), ("Zed",)]
    assert forward.guard_report.action == backward.guard_report.action == "distinct_injected"


def test_the_default_keeps_the_leading_table_reference() -> None:
    """Under "patch" the lookup shape (the N side leads, the projected table is an N:1 lookup from it) is
    value repeats, as an ORM loading treatments with their dog would write it; led by the dog, a fan-out."""
    con = _con("patch")
    led_by_treatments = con.execute(
        "SELECT dogs.name, dogs.id FROM treatments JOIN dogs ON dogs.id = treatments.dog_id WHERE treatments.cost > 0"
    )
    assert led_by_treatments.guard_report.provenance in (None, "value_repeats", "identified")
    assert len(led_by_treatments.fetchall()) == 7


def test_identified_evidence_speaks_of_the_keys_not_the_rows() -> None:
    """An ``identified`` verdict without a fan-out rests on the declared keys; when rows repeat anyway
    (data that breaks a key, a catalog that lies) its evidence must not deny what the result shows, so it
    says what the keys allow rather than "no duplicate rows"."""
    from guarded_sqlite._analysis.provenance import analyse
    from guarded_sqlite._analysis.schema import read_sqlite_schema

    raw = sqlite3.connect(":memory:")
    raw.executescript(SCHEMA)
    verdict = analyse(
        "SELECT dogs.name FROM dogs JOIN treatments ON dogs.id = treatments.dog_id WHERE treatments.id = ?",
        read_sqlite_schema(raw),
    )
    assert verdict.verdict == "identified" and not verdict.amplification
    assert "no duplicate rows" not in verdict.evidence and "the keys allow no repeated row" in verdict.evidence
